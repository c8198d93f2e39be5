//! `clrprof report`: loads a trace and prints a view of it (rendering is `clrprof-report`'s).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clrprof_report::ReportOptions;

/// Options of `clrprof report`.
#[derive(Clone, Debug)]
pub struct ReportCommand {
    pub trace: PathBuf,
    /// `None` = standard output.
    pub output: Option<PathBuf>,
    pub read: crate::load::ReadOptions,
    /// Build the profile with source lines (`--by-line`, `--view lines|source`).
    pub lines: bool,
    pub report: ReportOptions,
}

pub fn report(c: &ReportCommand) -> Result<()> {
    let read = crate::load::ReadOptions { lines: c.lines, ..c.read.clone() };
    let profile = crate::load::load(&c.trace, &read)?;
    // Written as it is laid out (a JSON document can be larger than the trace).
    match &c.output {
        Some(p) => {
            // Opened at the first byte: a report that cannot be made leaves no file.
            let mut out = LazyFile { path: p, file: None };
            let written = clrprof_report::render_to(&profile, &c.report, &mut out)
                .map_err(anyhow::Error::from)
                .and_then(|_| Ok(out.flush()?));
            if let Err(e) = written {
                let io = e.chain().any(|c| c.is::<std::io::Error>());
                return Err(if io { e.context(format!("cannot write {}", p.display())) } else { e });
            }
            if out.file.is_none() {
                std::fs::write(p, "").with_context(|| format!("cannot write {}", p.display()))?;
            }
        }
        None => {
            let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
            match clrprof_report::render_to(&profile, &c.report, &mut out)
                .map_err(anyhow::Error::from)
                .and_then(|_| Ok(out.flush()?))
            {
                // A closed pipe (`| head`) is not an error worth reporting.
                Err(e) if crate::export::is_broken_pipe(&e) => {}
                r => r?,
            }
        }
    }
    Ok(())
}

/// Writes a command's text to `output`, or to standard output when `None` (a closed pipe is no error).
pub fn write_output(output: Option<&std::path::Path>, text: &str) -> Result<()> {
    match output {
        Some(p) => std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
        }
    }
    Ok(())
}

/// A file created at its first write, buffered.
struct LazyFile<'a> {
    path: &'a std::path::Path,
    file: Option<std::io::BufWriter<std::fs::File>>,
}

impl Write for LazyFile<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.file.is_none() {
            self.file = Some(std::io::BufWriter::with_capacity(1 << 16, std::fs::File::create(self.path)?));
        }
        self.file.as_mut().expect("opened above").write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.as_mut().map_or(Ok(()), |f| f.flush())
    }
}
