//! `clrprof view`: loads the trace (and a baseline) with progress on stderr, serves the viewer on
//! loopback with a session token, prints its URL as the one line on stdout, opens a browser, and
//! runs until Ctrl-C or SIGTERM.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clrprof_load::{describe, store, Loader, Symbolizer};
use clrprof_view::{LoadedSource, ProfileSource, ServeOptions, Session, StoreCatalog, Viewer};
use signal_hook::iterator::Signals;

/// What `clrprof view` was asked.
#[derive(Clone, Debug)]
pub struct ViewCommand {
    /// A trace file or `run:ID`/`run:latest`; `None`: browse the runs of `store`.
    pub trace: Option<PathBuf>,
    /// The run store (`run:ID`, or the runs list without a trace).
    pub store: Option<String>,
    pub baseline: Option<PathBuf>,
    pub port: u16,
    pub bind: Option<IpAddr>,
    pub token: Option<String>,
    pub open_browser: bool,
    pub native_symbols: bool,
    pub debug_dirs: Vec<PathBuf>,
    /// Threads' stacks as sampled in a trace recorded with `--async` (no logical stacks).
    pub physical_stacks: bool,
}

/// An opened trace: the loader, its name and its size in bytes.
struct Opened {
    loader: Loader,
    label: String,
    size: u64,
}

/// Opens a trace, an imported file or a run of a store (`run:ID`, read through the same
/// `trace_source` as `report`, `export` and `diff`): a missing file, an unknown run or an unknown
/// format fails here, before anything is served.
fn open(path: &Path, store: Option<&str>, physical_stacks: bool) -> Result<Opened> {
    let input = crate::load::trace_source(path, store)?;
    let mut loader = Loader::open(input.source).map_err(|e| describe(&input.label, e))?;
    loader.set_physical_stacks(physical_stacks);
    Ok(Opened { loader, label: input.label, size: input.size })
}

/// Reads an opened trace with a progress line on stderr and in the page every half second.
/// Ctrl-C or SIGTERM while loading ends the command.
fn read(o: Opened, symbols: &Symbolizer, session: &Session, signals: &mut Signals) -> Result<LoadedSource> {
    let Opened { loader: mut l, label, size } = o;
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
            let text = format!("{records} records of {label} ({:.1} MB)", size as f64 / 1e6);
            eprint!("\rclrprof: loading: {text}");
            session.set_progress(text);
        }
    };
    let r = l.update_with(&mut progress).and_then(|_| l.read_to_end());
    if shown {
        eprintln!();
    }
    let d = r.map_err(|e| describe(&label, e))?;
    if let Some(t) = d.truncation {
        eprintln!("clrprof: warning: {label}: {t}");
    }
    if size > 50_000_000 {
        eprintln!("clrprof: loaded {} records in {:.1} s", d.records, started.elapsed().as_secs_f64());
    }
    Ok(LoadedSource::new(l, symbols.clone()))
}

/// The source panel's means: frames resolved to lines through the modules' PDBs (looked for under
/// `dirs` too) and the methods' sources found the same way.
fn with_lines(source: LoadedSource, symbols: &Symbolizer, dirs: &[PathBuf]) -> LoadedSource {
    let d = dirs.to_vec();
    let finder: clrprof_view::SourceFinder = Arc::new(move |f| clrprof_report::find_source(f, &d));
    source.with_lines(symbols.clone().with_lines(true, dirs.to_vec()), finder)
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
    let Some(trace_path) = &cmd.trace else {
        return serve_store(cmd, bind, token);
    };
    let trace = open(trace_path, cmd.store.as_deref(), cmd.physical_stacks)?;
    let baseline = cmd.baseline.as_ref().map(|b| open(b, cmd.store.as_deref(), cmd.physical_stacks)).transpose()?;
    let mut signals =
        Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]).context("cannot watch for Ctrl-C")?;
    // Serve at once: the page shows the loading progress until the trace is read.
    let session = Arc::new(Session::loading(trace.label.clone()));
    let viewer = Viewer::start(session.clone(), &ServeOptions { bind, port: cmd.port, token, workers: 4 })?;
    print_url(cmd, &viewer.url())?;
    // The trace and its baseline name frames of the same libraries: one set of symbol tables.
    let symbols = Symbolizer::new(cmd.native_symbols, cmd.debug_dirs.clone());
    let loaded = (|| -> Result<_> {
        let source = with_lines(read(trace, &symbols, &session, &mut signals)?, &symbols, &cmd.debug_dirs);
        let baseline = match baseline {
            Some(b) => {
                let name = b.label.clone();
                let s = read(b, &symbols, &session, &mut signals)?;
                Some((name, Box::new(s) as Box<dyn ProfileSource>))
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
    // The heap snapshots (if any) are read before the session answers, so the page's first `meta`
    // knows whether to offer its Heap tab.
    let read = crate::load::ReadOptions { store: cmd.store.clone(), ..Default::default() };
    match crate::heap_views::load_snapshots(trace_path, &read) {
        Ok(snaps) if !snaps.is_empty() => {
            session.set_heap(clrprof_view::heap::HeapSnapshots::new(trace_path.display().to_string(), snaps))
        }
        _ => {}
    }
    session.finish(Box::new(source), baseline);
    let _ = signals.forever().next();
    viewer.stop();
    Ok(())
}

/// Prints the URL as the one line on standard output and opens a browser if asked.
fn print_url(cmd: &ViewCommand, url: &str) -> Result<()> {
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{url}")?;
        out.flush()?;
    }
    if cmd.open_browser {
        open_browser(url);
    }
    Ok(())
}

/// `clrprof view --store S`: the page lists the store's runs and opens any of them; a run still
/// streaming is followed as it grows.
fn serve_store(cmd: &ViewCommand, bind: IpAddr, token: String) -> Result<()> {
    if cmd.baseline.is_some() {
        bail!("--baseline needs a TRACE to compare with (e.g. `clrprof view run:2 --baseline run:1 --store S`)");
    }
    let store = store::open(cmd.store.as_deref())?;
    let name = store::redact(&store::store_spec(cmd.store.as_deref()));
    let mut signals =
        Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]).context("cannot watch for Ctrl-C")?;
    let catalog = StoreCatalog::new(store, Symbolizer::new(cmd.native_symbols, cmd.debug_dirs.clone()));
    let session = Arc::new(Session::store(name, Box::new(catalog)));
    let viewer = Viewer::start(session, &ServeOptions { bind, port: cmd.port, token, workers: 4 })?;
    print_url(cmd, &viewer.url())?;
    let _ = signals.forever().next();
    viewer.stop();
    Ok(())
}
