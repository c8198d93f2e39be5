//! `clrprof view`: loads the trace (and a baseline) with progress on stderr, serves the viewer on
//! loopback with a session token, prints its URL as the one line on stdout, opens a browser, and
//! runs until Ctrl-C or SIGTERM.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clrprof_model::{NoSymbols, Profile, TimeRange};
use clrprof_query::source::{LoadError, Loader};
use clrprof_trace::TraceSource;
use clrprof_view::{ProfileSource, ServeOptions, Session, Viewer};
use signal_hook::iterator::Signals;

/// What `clrprof view` was asked.
#[derive(Clone, Debug)]
pub struct ViewCommand {
    pub trace: PathBuf,
    pub baseline: Option<PathBuf>,
    pub port: u16,
    pub bind: Option<IpAddr>,
    pub token: Option<String>,
    pub open_browser: bool,
    pub native_symbols: bool,
    pub debug_dirs: Vec<PathBuf>,
}

/// A loaded trace or imported file: profiles for any time range.
struct LoadedSource {
    loader: Loader,
    native_symbols: bool,
    debug_dirs: Vec<PathBuf>,
}

impl ProfileSource for LoadedSource {
    fn profile(&self, range: TimeRange) -> Profile {
        if self.native_symbols {
            self.loader.profile(range, &mut clrprof_symbols::ElfSymbols::with_debug_dirs(self.debug_dirs.clone()))
        } else {
            self.loader.profile(range, &mut NoSymbols)
        }
    }
}

fn describe(path: &Path, e: LoadError) -> anyhow::Error {
    let what = match &e {
        LoadError::Decode { records, .. } if *records > 0 => {
            format!("cannot read {} (after {records} records)", path.display())
        }
        LoadError::Open(_) => format!("cannot open trace {}", path.display()),
        _ => format!("cannot read {}", path.display()),
    };
    anyhow::Error::new(e).context(what)
}

/// Opens a trace (or an imported file): a missing file or an unknown format fails here, before
/// anything is served.
fn open(path: &Path) -> Result<Loader> {
    Loader::open(TraceSource::File(path.to_path_buf())).map_err(|e| describe(path, e))
}

/// Reads an opened trace with a progress line on stderr and in the page every half second.
/// Ctrl-C or SIGTERM while loading ends the command.
fn read(
    path: &Path,
    mut l: Loader,
    cmd: &ViewCommand,
    session: &Session,
    signals: &mut Signals,
) -> Result<LoadedSource> {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let started = Instant::now();
    let mut last = Instant::now();
    let mut shown = false;
    let mut progress = |records: u64| {
        if last.elapsed() >= Duration::from_millis(500) {
            if signals.pending().next().is_some() {
                eprintln!();
                std::process::exit(130);
            }
            last = Instant::now();
            shown = true;
            let text = format!("{records} records of {} ({:.1} MB)", path.display(), size as f64 / 1e6);
            eprint!("\rclrprof: loading: {text}");
            session.set_progress(text);
        }
    };
    let r = l.update_with(&mut progress).and_then(|_| l.read_to_end());
    if shown {
        eprintln!();
    }
    let d = r.map_err(|e| describe(path, e))?;
    if let Some(t) = d.truncation {
        eprintln!("clrprof: warning: {}: {t}", path.display());
    }
    if size > 50_000_000 {
        eprintln!("clrprof: loaded {} records in {:.1} s", d.records, started.elapsed().as_secs_f64());
    }
    Ok(LoadedSource { loader: l, native_symbols: cmd.native_symbols, debug_dirs: cmd.debug_dirs.clone() })
}

/// A token given on the command line must be long and URL/cookie safe.
fn check_token(t: &str) -> Result<()> {
    if t.len() < 16 || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        bail!("--token must be at least 16 characters of letters, digits, '-' or '_'");
    }
    Ok(())
}

fn open_browser(url: &str) {
    let graphical = std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if !graphical {
        return;
    }
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("xdg-open").is_file()))
        .unwrap_or(false);
    if found {
        let _ = std::process::Command::new("xdg-open")
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
}

pub fn view(cmd: &ViewCommand) -> Result<()> {
    let bind = cmd.bind.unwrap_or(IpAddr::from([127, 0, 0, 1]));
    if let Some(t) = &cmd.token {
        check_token(t)?;
    }
    if !bind.is_loopback() {
        if cmd.token.is_none() {
            bail!("--bind {bind} serves beyond this machine: give an explicit --token as well");
        }
        eprintln!(
            "clrprof: warning: serving on {bind}, reachable from other machines; anyone with the token can read this trace"
        );
    }
    let token = match &cmd.token {
        Some(t) => t.clone(),
        None => clrprof_view::new_token().context("cannot read /dev/urandom for a session token")?,
    };
    let trace = open(&cmd.trace)?;
    let baseline = cmd.baseline.as_ref().map(|b| open(b).map(|l| (b, l))).transpose()?;
    let mut signals =
        Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]).context("cannot watch for Ctrl-C")?;
    // Serve at once: the page shows the loading progress until the trace is read.
    let session = Arc::new(Session::loading(cmd.trace.display().to_string()));
    let viewer = Viewer::start(session.clone(), &ServeOptions { bind, port: cmd.port, token, workers: 4 })?;
    let url = viewer.url();
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{url}")?;
        out.flush()?;
    }
    if cmd.open_browser {
        open_browser(&url);
    }
    let loaded = (|| -> Result<_> {
        let source = read(&cmd.trace, trace, cmd, &session, &mut signals)?;
        let baseline = match baseline {
            Some((b, l)) => {
                let s = read(b, l, cmd, &session, &mut signals)?;
                Some((b.display().to_string(), Box::new(s) as Box<dyn ProfileSource>))
            }
            None => None,
        };
        Ok((source, baseline))
    })();
    let (source, baseline) = match loaded {
        Ok(x) => x,
        Err(e) => {
            viewer.stop();
            return Err(e);
        }
    };
    session.finish(Box::new(source), baseline);
    let _ = signals.forever().next();
    viewer.stop();
    Ok(())
}
