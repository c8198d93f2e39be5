//! Folded ("collapsed") stacks: one line per stack, frames root first separated by `;`, then
//! white space and a count — `main;Demo.Work;Demo.Hash 42`. Written by our
//! `export -f collapsed`, inferno and FlameGraph's stackcollapse scripts (perf, DTrace, …) and
//! py-spy. Empty lines and `#` comments are skipped. A frame may carry its module as a
//! `module!` prefix (`libc.so.6!write`, `Demo.dll!Demo.Work`): a managed module (`.dll`,
//! `.exe`) is split off the name; a native frame keeps the clrprof form `libc.so.6!write` with
//! the module set. Counts are samples, each standing for [`super::ImportOptions`]'s period.

use clrprof_model::Profile;

use super::{is_managed_module, samples, Builder, ImportError, ImportOptions};

/// Splits a line into its frames and count, or `None` when it is not a folded-stack line.
fn split(line: &str) -> Option<(&str, u64)> {
    let line = line.trim_end();
    let at = line.rfind([' ', '\t'])?;
    let (stack, count) = (line[..at].trim_end(), &line[at + 1..]);
    if stack.is_empty() || count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Counts beyond u64 are clamped rather than refused: the line is still a stack.
    Some((stack, count.parse().unwrap_or(u64::MAX)))
}

fn content_lines(t: &str) -> impl Iterator<Item = (usize, &str)> {
    t.lines().enumerate().filter(|(_, l)| {
        let l = l.trim();
        !l.is_empty() && !l.starts_with('#')
    })
}

/// True when the first content lines of `t` are folded stacks (a last line cut short by the
/// sniffer's window is allowed to be partial).
pub fn looks_like(t: &str) -> bool {
    let lines: Vec<&str> = content_lines(t).map(|(_, l)| l).take(8).collect();
    let complete = if lines.len() > 1 { lines.len() - 1 } else { lines.len() };
    complete > 0 && lines[..complete].iter().all(|l| split(l).is_some())
}

/// (module, name) of one frame.
fn frame_parts(f: &str) -> (&str, &str) {
    if let Some(i) = f.find('!') {
        let (module, rest) = (&f[..i], &f[i + 1..]);
        // `libc.so.6!write`, `dotnet!<unknown>`, `Demo.dll!Demo.Work`; not `Foo::operator!=`.
        let plausible = !module.is_empty()
            && !rest.is_empty()
            && !module.contains(|c: char| c.is_whitespace() || "()<>[]{},:;`'\"!=".contains(c));
        if plausible {
            return if is_managed_module(module) { (module, rest) } else { (module, f) };
        }
    }
    ("", f)
}

/// Reads folded stacks. A line that is not `frames count` is an error naming its number.
pub fn read(bytes: &[u8], opts: &ImportOptions) -> Result<Profile, ImportError> {
    let t = super::text(bytes);
    let mut b = Builder::new("(imported collapsed stacks)");
    let mut lines = 0u64;
    let mut total = 0u64;
    let mut path = Vec::new();
    for (i, line) in content_lines(&t) {
        let Some((stack, count)) = split(line) else {
            return Err(ImportError(format!(
                "collapsed stacks, line {}: expected 'frame;frame;… count', found \"{}\"",
                i + 1,
                super::first_line(line)
            )));
        };
        path.clear();
        for f in stack.split(';').map(str::trim).filter(|f| !f.is_empty()) {
            let (module, name) = frame_parts(f);
            path.push(b.frame(module, name));
        }
        if let Some(s) = b.stack(&path) {
            b.add(s, &samples(count, opts.sample_period_ns));
        }
        lines += 1;
        total = total.saturating_add(count);
    }
    if lines == 0 {
        return Err(ImportError("collapsed stacks: the file has no stack lines".into()));
    }
    let note = format!(
        "imported collapsed stacks: {lines} lines, {total} samples; each sample counted as {} of CPU time",
        crate::import::vsperf::ms(opts.sample_period_ns)
    );
    b.finish(note, opts.sample_period_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_model::{FrameKind, Metric};
    use clrprof_query::costs::{hotspots, CostQuery};

    #[test]
    fn folded_stacks_become_the_canonical_model() {
        let text = "# from perf\nmain;Demo.dll!Demo.Work;libc.so.6!memcpy 3\nmain;Demo.dll!Demo.Work 5\n\nmain 2\r\nmain;Demo.dll!Demo.Work 1\n";
        let p = read(text.as_bytes(), &ImportOptions::default()).unwrap();
        let v = hotspots(&p, &CostQuery::default(), None);
        assert_eq!(v.metric, Metric::Cpu);
        let rows: Vec<(&str, &str, FrameKind, u64, u64, u64)> = v.groups[0]
            .rows
            .iter()
            .map(|r| {
                (
                    r.name.as_str(),
                    r.module.as_str(),
                    r.kind,
                    r.self_cost.cpu_samples,
                    r.self_cost.cpu_ns,
                    r.inclusive.cpu_samples,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("Demo.Work", "Demo.dll", FrameKind::Managed, 6, 60_000_000, 9),
                ("libc.so.6!memcpy", "libc.so.6", FrameKind::Native, 3, 30_000_000, 3),
                ("main", "", FrameKind::Managed, 2, 20_000_000, 11),
            ]
        );
        assert_eq!((p.sampling.cpu_samples, p.sampling.cpu_rate_hz), (11, 100));
        assert!(p.messages[0].contains("4 lines, 11 samples"), "{:?}", p.messages);
        assert_eq!(p.functions.len(), 3);
    }

    #[test]
    fn bad_lines_are_errors_with_their_number() {
        let e = read(b"a;b 1\na;b\n", &ImportOptions::default()).unwrap_err();
        assert_eq!(e.0, "collapsed stacks, line 2: expected 'frame;frame;… count', found \"a;b\"");
        assert!(read(b"\n# only a comment\n", &ImportOptions::default()).is_err());
        // Spaces inside frames are fine; the count is the last word.
        let p = read(b"void foo(int, char) 7\n", &ImportOptions::default()).unwrap();
        assert_eq!(p.costs.stacks.frames[0].name, "void foo(int, char)");
    }

    #[test]
    fn sums_that_would_overflow_are_refused() {
        // Found while writing the fuzzer: two huge counts summed past u64 in every view.
        let e = read(b"a 18446744073709551615\nb 99999999999999999999999\n", &ImportOptions::default()).unwrap_err();
        assert!(e.0.starts_with("imported collapsed stacks: the values add up to more than"), "{}", e.0);
        let e = read(b"a 2000000000000\n", &ImportOptions::default()).unwrap_err();
        assert!(e.0.contains("add up to more than"), "{}", e.0);
        // Large but possible: a billion samples.
        assert!(read(b"a 1000000000\n", &ImportOptions::default()).is_ok());
    }

    #[test]
    fn sniffing() {
        assert!(looks_like("a;b;c 12\na 3\npartial line wit"));
        assert!(!looks_like("Level,Function Name\n"));
        assert!(!looks_like("hello world\n"));
    }
}
