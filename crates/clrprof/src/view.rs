//! `clrprof view`: loads the trace (and a baseline) with progress on stderr, serves the viewer on
//! loopback with a session token, prints its URL as the one line on stdout, opens a browser, and
//! runs until Ctrl-C or SIGTERM.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clrprof_collect::{RunId, RunState, RunStore, RunTail};
use clrprof_load::{LoadError, Loader};
use clrprof_model::{Profile, ProfileBuilder, TimeRange};
use clrprof_symbols::Symbolizer;
use clrprof_trace::{Record, StreamDecoder};
use clrprof_view::{LiveRun, ProfileSource, RunCatalog, RunStatus, ServeOptions, Session, Viewer};
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
}

/// A loaded trace or imported file: profiles for any time range.
struct LoadedSource {
    /// Shared with the thread that prepares it for ranges of time.
    loader: Arc<Loader>,
    symbols: Symbolizer,
}

impl ProfileSource for LoadedSource {
    fn profile(&self, range: TimeRange) -> Profile {
        self.loader.profile(range, &mut *self.symbols.resolver())
    }

    // The viewer keeps the loader's sample records: its profiles need no second copy of them.
    fn profile_untimed(&self, range: TimeRange) -> Profile {
        self.loader.profile_untimed(range, &mut *self.symbols.resolver())
    }

    fn each_sample(
        &self,
        range: TimeRange,
        same_group: Option<clrprof_model::samples::SameGroup<'_>>,
        f: &mut dyn FnMut(clrprof_model::samples::SampleTime),
    ) -> bool {
        self.loader.each_sample(range, same_group, f)
    }
}

fn describe(label: &str, e: LoadError) -> anyhow::Error {
    let what = match &e {
        LoadError::Decode { records, .. } if *records > 0 => format!("cannot read {label} (after {records} records)"),
        LoadError::Open(_) => format!("cannot open trace {label}"),
        _ => format!("cannot read {label}"),
    };
    anyhow::Error::new(e).context(what)
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
fn open(path: &Path, store: Option<&str>) -> Result<Opened> {
    let (source, label, size) = crate::collect::trace_source(path, store)?;
    let loader = Loader::open(source).map_err(|e| describe(&label, e))?;
    Ok(Opened { loader, label, size })
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
    // Brushing asks for profiles of ranges again and again: sums at checkpoints make each one
    // cost the records near its ends, not all the records inside it. Prepared on one core in the
    // background (one pass over the records); ranges asked for meanwhile read the records.
    // The timeline and every range read the records through their time index (one pass).
    l.prepare_index();
    let loader = Arc::new(l);
    let background = Arc::clone(&loader);
    let _ = std::thread::Builder::new().name("clrprof-ranges".into()).spawn(move || background.prepare_ranges());
    Ok(LoadedSource { loader, symbols: symbols.clone() })
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
    let trace = open(trace_path, cmd.store.as_deref())?;
    let baseline = cmd.baseline.as_ref().map(|b| open(b, cmd.store.as_deref())).transpose()?;
    let mut signals =
        Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]).context("cannot watch for Ctrl-C")?;
    // Serve at once: the page shows the loading progress until the trace is read.
    let session = Arc::new(Session::loading(trace.label.clone()));
    let viewer = Viewer::start(session.clone(), &ServeOptions { bind, port: cmd.port, token, workers: 4 })?;
    print_url(cmd, &viewer.url())?;
    // The trace and its baseline name frames of the same libraries: one set of symbol tables.
    let symbols = Symbolizer::new(cmd.native_symbols, cmd.debug_dirs.clone());
    let loaded = (|| -> Result<_> {
        let source = read(trace, &symbols, &session, &mut signals)?;
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
    let store = crate::collect::open(cmd.store.as_deref())?;
    let name = crate::collect::redact(&crate::collect::store_spec(cmd.store.as_deref()));
    let mut signals =
        Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]).context("cannot watch for Ctrl-C")?;
    let catalog = StoreCatalog { store, symbols: Symbolizer::new(cmd.native_symbols, cmd.debug_dirs.clone()) };
    let session = Arc::new(Session::store(name, Box::new(catalog)));
    let viewer = Viewer::start(session, &ServeOptions { bind, port: cmd.port, token, workers: 4 })?;
    print_url(cmd, &viewer.url())?;
    let _ = signals.forever().next();
    viewer.stop();
    Ok(())
}

/// The runs of a store, for the viewer.
struct StoreCatalog {
    store: Arc<dyn RunStore>,
    /// Shared by the runs opened: they name frames of the same libraries.
    symbols: Symbolizer,
}

impl RunCatalog for StoreCatalog {
    fn runs(&self) -> Result<Vec<serde_json::Value>, String> {
        let mut runs = self.store.list().map_err(|e| e.to_string())?;
        runs.reverse();
        Ok(runs.iter().map(|r| serde_json::to_value(r).unwrap_or_default()).collect())
    }

    fn open(&self, id: i64) -> Result<Arc<dyn LiveRun>, String> {
        let info = self
            .store
            .get(RunId(id))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no run {id} in this store"))?;
        Ok(Arc::new(StoreRun {
            id,
            symbols: self.symbols.clone(),
            inner: Mutex::new(Follow {
                tail: RunTail::new(self.store.clone(), info.id),
                decoder: StreamDecoder::new(),
                builder: ProfileBuilder::new(),
                batch: Vec::new(),
                generation: 0,
                bytes: 0,
                state: RunState::Running,
                ended: false,
                failed: None,
            }),
        }))
    }
}

/// A run read from its store as it grows: each refresh decodes the bytes stored since the last
/// one into the incremental `ProfileBuilder` (the same decoding `run_source` + `Loader` does in
/// one go).
struct StoreRun {
    id: i64,
    symbols: Symbolizer,
    inner: Mutex<Follow>,
}

struct Follow {
    tail: RunTail,
    decoder: StreamDecoder,
    builder: ProfileBuilder,
    batch: Vec<Record>,
    generation: u64,
    bytes: u64,
    state: RunState,
    /// The run ended and the decoder was finished: nothing more will come.
    ended: bool,
    /// The stored bytes stopped decoding here (kept: the profile is what was read before).
    failed: Option<String>,
}

impl ProfileSource for StoreRun {
    fn profile(&self, range: TimeRange) -> Profile {
        let f = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f.builder.profile(range, &mut *self.symbols.resolver())
    }
}

impl LiveRun for StoreRun {
    fn refresh(&self) -> Result<RunStatus, String> {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let f = &mut *guard;
        if !f.ended {
            let (bytes, info) = f.tail.poll().map_err(|e| format!("run {}: {e}", self.id))?;
            let info = info.ok_or_else(|| format!("run {} is no longer in the store", self.id))?;
            let mut changed = info.state != f.state;
            if !bytes.is_empty() && f.failed.is_none() {
                f.bytes += bytes.len() as u64;
                changed = true;
                if let Err(e) = f.decoder.push(&bytes, &mut f.batch) {
                    let msg =
                        format!("run {}: stored trace unreadable after {} records: {e}", self.id, f.builder.records());
                    f.builder.warn(msg.clone());
                    f.failed = Some(msg);
                }
                for r in f.batch.drain(..) {
                    f.builder.add(&r);
                }
            }
            f.state = info.state;
            if info.state != RunState::Running {
                // Everything stored before the state said "ended" was read above.
                f.ended = true;
                if f.failed.is_none() {
                    match f.decoder.finish() {
                        Ok(Some(t)) => f.builder.warn(t.to_string()),
                        Ok(None) => {}
                        Err(e) => f.builder.warn(format!("run {}: the stored trace ends badly: {e}", self.id)),
                    }
                }
            }
            if changed {
                f.generation += 1;
            }
        }
        Ok(RunStatus {
            id: self.id,
            generation: f.generation,
            bytes: f.bytes,
            records: f.builder.records(),
            state: f.state.name().to_string(),
        })
    }
}
