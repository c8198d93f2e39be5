//! `clrprof collect` (the server agents stream to) and `clrprof runs` (what a store holds). Reading
//! a run (`run:ID`, `run:latest`) is `clrprof_load::store`'s.

use std::sync::Arc;

use anyhow::{Context, Result};
use clrprof_collect::{open_store, Collector, RunId, RunInfo, RunState};
use clrprof_load::store::{open, redact, store_spec};

/// Options of `clrprof collect`.
#[derive(Clone, Debug)]
pub struct CollectCommand {
    pub listen: String,
    pub store: Option<String>,
    pub token: Option<String>,
    pub max_run_bytes: u64,
    /// `CLRPROF_*=value` lines sent to every agent that takes settings (the triggers of
    /// `collect --trigger`); empty: none.
    pub agent_settings: String,
    /// Push every run to Pyroscope.
    pub pyroscope: Option<PushOptions>,
    /// Push every run as OTLP profiles.
    pub otlp: Option<PushOptions>,
    /// Serve TLS: certificate chain, key, and the CA of client certificates (mutual TLS).
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf, Option<std::path::PathBuf>)>,
}

/// `--pyroscope URL [--pyroscope-token T]` or `--otlp URL [--otlp-header H]`, with
/// `[--interval 10s] [--tls-ca FILE]`.
#[derive(Clone, Debug)]
pub struct PushOptions {
    pub url: String,
    pub token: Option<String>,
    pub headers: Vec<(String, String)>,
    pub interval: std::time::Duration,
    pub format: clrprof_pyroscope::Format,
    pub tls_ca: Option<std::path::PathBuf>,
}

impl PushOptions {
    /// The pusher's name in the log.
    fn name(&self) -> &'static str {
        match self.format {
            clrprof_pyroscope::Format::Pyroscope => "pyroscope",
            clrprof_pyroscope::Format::Otlp => "otlp",
        }
    }
}

/// A pusher (Pyroscope or OTLP) as one of the collector's sinks: it copies the bytes and returns
/// (its threads decode, build and send).
struct PyroscopeSink(clrprof_pyroscope::Pyroscope, &'static str);

impl clrprof_collect::RunObserver for PyroscopeSink {
    fn run_started(&self, run: &RunInfo) {
        self.0.run_started(run.id.0 as u64);
    }
    fn run_data(&self, run: RunId, bytes: &[u8]) {
        self.0.run_data(run.0 as u64, bytes);
    }
    fn run_ended(&self, run: RunId, _complete: bool) {
        self.0.run_ended(run.0 as u64);
    }
}

fn pusher(o: &PushOptions) -> Result<Arc<PyroscopeSink>> {
    let name = o.name();
    let mut endpoint = clrprof_pyroscope::Endpoint::parse(&o.url, o.token.as_deref())
        .with_context(|| format!("--{name} {}", redact(&o.url)))?;
    endpoint.headers = o.headers.clone();
    if let Some(ca) = &o.tls_ca {
        endpoint = endpoint.trust_ca(ca)?;
    }
    let mut cfg = clrprof_pyroscope::Config::new(endpoint);
    cfg.interval = o.interval;
    cfg.format = o.format;
    // A closed standard error must not stop the collector: write errors are ignored.
    let log: clrprof_pyroscope::Log = Arc::new(move |m: &str| {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "clrprof collect: {name}: {m}");
    });
    let p = clrprof_pyroscope::Pyroscope::start(cfg, log).with_context(|| format!("cannot start the {name} pusher"))?;
    Ok(Arc::new(PyroscopeSink(p, name)))
}

pub fn collect(c: &CollectCommand) -> Result<()> {
    // Before any thread starts (the Pyroscope pusher's): every thread inherits the mask, so only
    // the signal-waiting thread takes SIGINT/SIGTERM.
    block_stop_signals();
    let sinks: Vec<Arc<PyroscopeSink>> = c.pyroscope.iter().chain(&c.otlp).map(pusher).collect::<Result<_>>()?;
    let spec = store_spec(c.store.as_deref());
    let store = open_store(&spec).with_context(|| format!("cannot open the run store {}", redact(&spec)))?;
    let tls = match &c.tls {
        Some((cert, key, ca)) => Some(clrprof_collect::tls::server_config(cert, key, ca.as_deref())?),
        None => None,
    };
    let mut builder = Collector::builder()
        .tls(tls)
        .listen(c.listen.clone())
        .token(c.token.clone())
        .max_run_bytes(c.max_run_bytes)
        .agent_settings(Some(c.agent_settings.clone()).filter(|s| !s.is_empty()))
        .store(store);
    for p in &sinks {
        builder = builder.observer(p.clone());
    }
    let collector = builder.build()?;
    let addr = collector.local_addr();
    let stop = collector.stopper();
    let stopping = sinks.clone();
    // Set once a signal stops the collector; then `serve` returns, and the process waits for the
    // Pyroscope summary before it exits (it used to race the signal thread's last writes).
    let (summary_tx, summary_rx) = std::sync::mpsc::channel::<()>();
    let signalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let signalled_by = signalled.clone();
    stop_on_signals(move || {
        signalled_by.store(true, std::sync::atomic::Ordering::SeqCst);
        stop();
        // The runs' last windows go out before the collector exits (a dead receiver gets 5 s).
        for p in &stopping {
            let s = p.0.stop(std::time::Duration::from_secs(5));
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "clrprof collect: {}: {} profiles sent ({} bytes), {} dropped, {} failed",
                p.1,
                s.sent,
                s.bytes_sent,
                s.dropped,
                s.failed
            );
        }
        let _ = summary_tx.send(());
    });
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "clrprof collect: listening on {addr}{}{}, store {}{}",
        match &c.tls {
            Some((_, _, Some(_))) => " (TLS, client certificates required)",
            Some(_) => " (TLS)",
            None => "",
        },
        if c.token.is_some() { " (token required)" } else { "" },
        redact(&store_spec(c.store.as_deref())),
        c.pyroscope
            .as_ref()
            .map(|p| format!(", pushing to Pyroscope at {} every {:?}", redact(&p.url), p.interval))
            .unwrap_or_default()
            + &c.otlp
                .as_ref()
                .map(|p| format!(", pushing OTLP profiles to {} every {:?}", redact(&p.url), p.interval))
                .unwrap_or_default()
    );
    collector.serve();
    if signalled.load(std::sync::atomic::Ordering::SeqCst) {
        // The pusher gets 5 s for its last windows; the summary follows.
        let _ = summary_rx.recv_timeout(std::time::Duration::from_secs(15));
    }
    Ok(())
}

/// Blocks SIGINT and SIGTERM in the calling thread (and the threads it starts later); returns
/// that set.
fn block_stop_signals() -> libc::sigset_t {
    // Safety: plain signal-mask calls on a zeroed set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// On SIGINT/SIGTERM: marks the runs still streaming as cut off, then exits.
fn stop_on_signals(stop: impl Fn() + Send + 'static) {
    // Blocked before any other thread starts, so every thread inherits the mask and only the
    // waiting thread takes these signals.
    let set = block_stop_signals();
    std::thread::spawn(move || {
        let mut sig = 0;
        // Safety: waits on a valid, initialised signal set.
        unsafe { libc::sigwait(&set, &mut sig) };
        stop();
        // Standard error may be a closed pipe by now: a failed write must not stop the exit.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "clrprof collect: stopped");
        std::process::exit(0);
    });
}

/// Options of `clrprof runs`.
#[derive(Clone, Debug)]
pub struct RunsCommand {
    pub store: Option<String>,
    pub json: bool,
}

pub fn runs(c: &RunsCommand) -> Result<()> {
    let runs = open(c.store.as_deref())?.list()?;
    let text = if c.json {
        let mut s = serde_json::to_string_pretty(&runs)?;
        s.push('\n');
        s
    } else {
        runs_table(&runs)
    };
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
    Ok(())
}

fn runs_table(runs: &[RunInfo]) -> String {
    if runs.is_empty() {
        return "no runs\n".into();
    }
    let header = ["ID", "HOST", "PID", "STARTED (UTC)", "DURATION", "BYTES", "STATE", "EXIT", "COMMAND"];
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                r.host.clone(),
                r.pid.to_string(),
                utc(r.start),
                r.end.map(|e| format!("{:.1}s", (e - r.start) as f64 / 1000.0)).unwrap_or_else(|| "-".into()),
                crate::record::human_size(r.bytes),
                match (&r.state, &r.reason) {
                    (RunState::CutOff, Some(reason)) => format!("cut off ({reason})"),
                    (s, _) => s.name().replace('_', " "),
                },
                r.exit_status.map(|e| e.to_string()).unwrap_or_else(|| "-".into()),
                r.command.clone(),
            ]
        })
        .collect();
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(w[i] - c.chars().count() + 2));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for r in &rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of a Unix time in milliseconds.
fn utc(ms: i64) -> String {
    let (y, m, d, h, min, sec) = clrprof_trace::utc_from_unix(ms.div_euclid(1000));
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{sec:02}")
}

/// Parses a size: bytes, or with a K/M/G suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("`{s}`: expected a size in bytes, e.g. 500M or 2G"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_795_370_434_000), "2026-11-22 18:00:34");
        assert_eq!(parse_size("500M"), Ok(500 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0").is_err() && parse_size("lots").is_err());
    }
}
