//! `--view jit`: JIT time and code size per method, and assembly/module load times.

use clrprof_model::Profile;

use super::text_table::{Align::*, TextTable};
use super::{ms, title};

fn us(ns: u64) -> String {
    format!("{}.{:01}", ns / 1_000, (ns / 100) % 10)
}

pub fn render(p: &Profile) -> String {
    let mut out = title(p, "jit");
    let totals = clrprof_query::events::jit_totals(p);
    let jitted = &totals.methods;
    let (pre, total_jit, total_code, versions) =
        (totals.precompiled, totals.jit_ns, totals.native_bytes, totals.code_versions);
    out += &format!(
        "\n{} methods JIT-compiled ({} code versions) in {} ms, {} bytes of native code; {} precompiled (ReadyToRun) methods used\n",
        jitted.len(),
        versions,
        ms(total_jit),
        total_code,
        pre
    );
    let mut by_time = jitted.clone();
    by_time.sort_by(|a, b| b.jit_ns.cmp(&a.jit_ns).then(a.name.cmp(&b.name)));
    let mut t = TextTable::new(&[
        ("JIT µs", Right),
        ("VERSIONS", Right),
        ("IL BYTES", Right),
        ("NATIVE BYTES", Right),
        ("METHOD", Left),
        ("SIGNATURE", Left),
    ]);
    for f in &by_time {
        let il = p.events.il_sizes.get(&f.id).map(|n| n.to_string()).unwrap_or_else(|| "-".into());
        t.row(vec![
            us(f.jit_ns),
            f.compilations.to_string(),
            il,
            f.code_size.to_string(),
            f.name.clone(),
            f.signature.clone(),
        ]);
    }
    out += &format!("\nmethods by JIT time ({})\n", t.len());
    out += &t.render();
    out += "IL BYTES: the method's IL code without its header (`-` for methods without IL).\n";
    let mut asm: Vec<_> = p.assemblies.iter().collect();
    asm.sort_by(|a, b| a.loaded_ns.cmp(&b.loaded_ns).then(a.name.cmp(&b.name)));
    let mut t = TextTable::new(&[("AT ms", Right), ("LOAD µs", Right), ("ASSEMBLY", Left)]);
    for a in asm {
        t.row(vec![ms(a.loaded_ns), us(a.load_ns), a.name.clone()]);
    }
    out += &format!("\nassembly loads ({})\n", t.len());
    out += &t.render();
    let mut mods: Vec<_> = p.modules.iter().collect();
    mods.sort_by(|a, b| a.loaded_ns.cmp(&b.loaded_ns).then(a.path.cmp(&b.path)));
    let mut t = TextTable::new(&[("AT ms", Right), ("LOAD µs", Right), ("MODULE", Left)]);
    for m in mods {
        t.row(vec![ms(m.loaded_ns), us(m.load_ns), m.file_name().to_string()]);
    }
    out += &format!("\nmodule loads ({})\n", t.len());
    out += &t.render();
    out
}
