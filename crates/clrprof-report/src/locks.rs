//! `--view locks`: thread lifetimes and names, and Monitor lock contention with waiting stacks.

use clrprof_model::Profile;

use super::text_table::{Align::*, TextTable};
use super::{ms, title};

pub fn render(p: &Profile) -> String {
    let mut out = title(p, "locks");
    let mut t = TextTable::new(&[
        ("OS TID", Right),
        ("NAME", Left),
        ("CREATED ms", Right),
        ("DESTROYED ms", Right),
        ("LIFETIME ms", Right),
    ]);
    let end = p.process.duration_ns;
    for th in &p.threads {
        let created = th.created_ns.unwrap_or(0);
        let gone = th.destroyed_ns.unwrap_or(end);
        t.row(vec![
            th.os_tid.map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
            th.name.clone(),
            th.created_ns.map(ms).unwrap_or_else(|| "-".into()),
            th.destroyed_ns.map(ms).unwrap_or_else(|| "alive".into()),
            ms(gone.saturating_sub(created)),
        ]);
    }
    out += &format!("\nthreads ({})\n", t.len());
    out += &t.render();
    let c = &p.events.contentions;
    let total: u64 = c.iter().map(|s| s.count).fold(0, u64::saturating_add);
    let wait: u64 = c.iter().map(|s| s.wait_ns).fold(0, u64::saturating_add);
    out += &format!("\n{total} Monitor lock contentions, {} ms waited in all\n", ms(wait));
    out += "COVERS contention for Monitor locks only (`lock`, Monitor.Enter: the runtime's ContentionStart/Stop \
            events). NOT INCLUDED: waits that are\nnot lock contention — SemaphoreSlim.Wait (beyond the short \
            contention on its internal lock), ReaderWriterLockSlim, Monitor.Wait,\nWaitHandle.WaitOne, Mutex, \
            events, Task.Wait; the wall-clock samples (`--weight wall`) show where threads blocked in them.\n";
    if c.is_empty() {
        return out;
    }
    let mut t = TextTable::new(&[("COUNT", Right), ("WAIT ms", Right), ("LONGEST ms", Right), ("WAITING IN", Left)]);
    for s in c {
        t.row(vec![s.count.to_string(), ms(s.wait_ns), ms(s.max_wait_ns), s.site.clone()]);
    }
    out += &t.render();
    for s in c {
        if let Some((st, n)) = s.stacks.first() {
            out += &format!("\n{} — waiting stack ({n} of {}):\n", s.site, s.count);
            for f in clrprof_query::weighted_stacks::stack_names(p, *st) {
                out += &format!("    {f}\n");
            }
        }
    }
    out
}
