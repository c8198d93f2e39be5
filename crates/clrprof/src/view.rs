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
use clrprof_query::import::Format;
use clrprof_query::source::{LoadError, Loader};
use clrprof_trace::TraceSource;
use clrprof_view::{ProfileSource, ServeOptions, Session, Viewer};

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

/// Reads a trace (or an imported file) with a progress line on stderr every half second.
fn load(path: &Path, cmd: &ViewCommand) -> Result<LoadedSource> {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let what = |e: &LoadError| match e {
        LoadError::Decode { records, .. } if *records > 0 => {
            format!("cannot read {} (after {records} records)", path.display())
        }
        LoadError::Open(_) => format!("cannot open trace {}", path.display()),
        _ => format!("cannot read {}", path.display()),
    };
    let started = Instant::now();
    let mut l = Loader::open(TraceSource::File(path.to_path_buf())).map_err(|e| {
        let w = what(&e);
        anyhow::Error::new(e).context(w)
    })?;
    let mut last = Instant::now();
    let mut shown = false;
    let mut progress = |records: u64| {
        if last.elapsed() >= Duration::from_millis(500) {
            last = Instant::now();
            shown = true;
            eprint!("\rclrprof: loading {} ({:.1} MB): {records} records", path.display(), size as f64 / 1e6);
        }
    };
    let r = l.update_with(&mut progress).and_then(|_| l.read_to_end());
    let d = match r {
        // An imported file has no records to count.
        Ok(d) if l.format() != Format::Trace => Ok(d),
        r => r,
    };
    if shown {
        eprintln!();
    }
    let d = d.map_err(|e| {
        let w = what(&e);
        anyhow::Error::new(e).context(w)
    })?;
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
    let source = load(&cmd.trace, cmd)?;
    let baseline = match &cmd.baseline {
        Some(b) => Some((b.display().to_string(), Box::new(load(b, cmd)?) as Box<dyn ProfileSource>)),
        None => None,
    };
    let session = Arc::new(Session::new(cmd.trace.display().to_string(), Box::new(source), baseline));
    let signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])
        .context("cannot watch for Ctrl-C")?;
    let viewer = Viewer::start(session, &ServeOptions { bind, port: cmd.port, token, workers: 4 })?;
    let url = viewer.url();
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{url}")?;
        out.flush()?;
    }
    if cmd.open_browser {
        open_browser(&url);
    }
    let mut signals = signals;
    let _ = signals.forever().next();
    viewer.stop();
    Ok(())
}
