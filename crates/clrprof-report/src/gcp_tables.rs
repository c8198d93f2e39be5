//! `--view tables`: the General Code Profiler's tables (threads, app domains, assemblies, modules,
//! classes, functions), laid out with the text-table renderer of `text_table.rs`.

use clrprof_model::Profile;

use super::text_table::{Align::*, TextTable};
use super::{ms, title};

fn opt_ms(v: Option<u64>) -> String {
    v.map(ms).unwrap_or_else(|| "-".into())
}

fn us(ns: u64) -> String {
    format!("{}.{:01}", ns / 1_000, (ns / 100) % 10)
}

fn section(out: &mut String, name: &str, t: &TextTable) {
    out.push_str(&format!("\n{name} ({})\n", t.len()));
    out.push_str(&t.render());
}

pub fn render(p: &Profile) -> String {
    let mut out = title(p, "tables");

    let mut t = TextTable::new(&[
        ("THREAD ID", Left),
        ("OS TID", Right),
        ("NAME", Left),
        ("CREATED ms", Right),
        ("DESTROYED ms", Right),
    ]);
    for th in &p.threads {
        let mut name = th.name.clone();
        if th.names.len() > 1 {
            let earlier: Vec<&str> = th.names[..th.names.len() - 1].iter().map(|(_, n)| n.as_str()).collect();
            name += &format!(" (was {})", earlier.join(", "));
        }
        t.row(vec![
            format!("0x{:x}", th.id),
            th.os_tid.map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
            name,
            opt_ms(th.created_ns),
            opt_ms(th.destroyed_ns),
        ]);
    }
    section(&mut out, "THREADS", &t);

    let mut t =
        TextTable::new(&[("APP DOMAIN ID", Left), ("NAME", Left), ("CREATED ms", Right), ("UNLOADED ms", Right)]);
    for a in &p.appdomains {
        t.row(vec![format!("0x{:x}", a.id), a.name.clone(), ms(a.created_ns), opt_ms(a.unloaded_ns)]);
    }
    section(&mut out, "APP DOMAINS", &t);

    let mut t = TextTable::new(&[
        ("ASSEMBLY", Left),
        ("APP DOMAIN", Left),
        ("LOADED ms", Right),
        ("LOAD µs", Right),
        ("MODULE", Left),
    ]);
    for a in &p.assemblies {
        let ad = p.appdomain(a.appdomain).map(|d| d.name.clone()).unwrap_or_else(|| format!("0x{:x}", a.appdomain));
        let module = p.module(a.module).map(|m| m.path.clone()).unwrap_or_else(|| format!("0x{:x}", a.module));
        t.row(vec![a.name.clone(), ad, ms(a.loaded_ns), us(a.load_ns), module]);
    }
    section(&mut out, "ASSEMBLIES", &t);

    let mut t = TextTable::new(&[
        ("MODULE ID", Left),
        ("BASE ADDRESS", Left),
        ("LOADED ms", Right),
        ("LOAD µs", Right),
        ("PATH", Left),
    ]);
    for m in &p.modules {
        t.row(vec![
            format!("0x{:x}", m.id),
            format!("0x{:x}", m.base_address),
            ms(m.loaded_ns),
            us(m.load_ns),
            m.path.clone(),
        ]);
    }
    section(&mut out, "MODULES", &t);

    let mut t = TextTable::new(&[("CLASS", Left), ("TOKEN", Left), ("MODULE", Left)]);
    for c in &p.classes {
        let module = p.module(c.module).map(|m| m.file_name().to_string()).unwrap_or_default();
        t.row(vec![c.name.clone(), format!("0x{:08x}", c.token), module]);
    }
    section(&mut out, "CLASSES", &t);

    let mut t = TextTable::new(&[
        ("FUNCTION", Left),
        ("TOKEN", Left),
        ("CODE START", Left),
        ("CODE SIZE", Right),
        ("VERSIONS", Right),
        ("JIT µs", Right),
        ("KIND", Left),
        ("MODULE", Left),
        ("SIGNATURE", Left),
    ]);
    for f in &p.functions {
        let module = p.module(f.module).map(|m| m.file_name().to_string()).unwrap_or_default();
        t.row(vec![
            f.name.clone(),
            format!("0x{:08x}", f.token),
            format!("0x{:x}", f.code_start),
            f.code_size.to_string(),
            f.compilations.to_string(),
            us(f.jit_ns),
            f.kind_name().into(),
            module,
            f.signature.clone(),
        ]);
    }
    section(&mut out, "FUNCTIONS", &t);
    out
}
