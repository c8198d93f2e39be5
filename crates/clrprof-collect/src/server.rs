//! The TCP server: a thread per connection reads the hello, checks the token, opens a run, then
//! stores the trace's whole blocks as they arrive (validated by a [`StreamDecoder`]) and hands
//! them to the observers. A bad stream ends its own run only.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clrprof_trace::wire::{self, Hello, HelloError};
use clrprof_trace::{encode_records, ProcessExit, Record, StreamDecoder, HEADER_LEN};

use crate::{now_ms, tokens_equal, NewRun, RunEnd, RunId, RunInfo, RunObserver, RunState, RunStore};

/// Time a client has to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are refused.
const MAX_CONNECTIONS: usize = 4096;
/// How long an exit notice waits for its run's stream to end.
const EXIT_WAIT: Duration = Duration::from_secs(10);

type LogFn = dyn Fn(&str) + Send + Sync;

/// Settings of a collector; see [`Collector::builder`].
pub struct CollectorBuilder {
    listen: String,
    token: Option<String>,
    max_run_bytes: u64,
    agent_settings: Option<String>,
    store: Option<Arc<dyn RunStore>>,
    observers: Vec<Arc<dyn RunObserver>>,
    log: Option<Arc<LogFn>>,
    tls: Option<Arc<rustls::ServerConfig>>,
}

/// Why a collector cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {error}")]
    Listen { addr: String, error: std::io::Error },
    #[error("listening on {0} (not a loopback address) needs a token: pass --token or set CLRPROF_TOKEN")]
    TokenRequired(String),
    #[error("no store given")]
    NoStore,
    #[error("cannot recover the store: {0}")]
    Store(crate::StoreError),
}

// The messages above include their cause, so `source()` stays unset (printed once in a chain).
impl From<crate::StoreError> for StartError {
    fn from(e: crate::StoreError) -> Self {
        StartError::Store(e)
    }
}

impl CollectorBuilder {
    /// `ADDR:PORT` to listen on (default `127.0.0.1:7878`; port 0 picks a free one).
    pub fn listen(mut self, addr: impl Into<String>) -> Self {
        self.listen = addr.into();
        self
    }

    /// The token agents must present. Required unless the address is a loopback one.
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// Largest trace kept per run; a longer stream is cut at the last whole block that fits.
    pub fn max_run_bytes(mut self, n: u64) -> Self {
        self.max_run_bytes = n;
        self
    }

    /// Settings (`CLRPROF_*=value` lines) sent to every agent whose hello says it takes them: the
    /// triggers of `collect --trigger`.
    pub fn agent_settings(mut self, settings: Option<String>) -> Self {
        self.agent_settings = settings;
        self
    }

    pub fn store(mut self, store: Arc<dyn RunStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Adds a sink that sees every run (see [`RunObserver`]: implementations queue, never block).
    /// Serves TLS with this configuration ([`crate::tls::server_config`]) instead of plain TCP.
    pub fn tls(mut self, cfg: Option<Arc<rustls::ServerConfig>>) -> Self {
        self.tls = cfg;
        self
    }

    pub fn observer(mut self, o: Arc<dyn RunObserver>) -> Self {
        self.observers.push(o);
        self
    }

    /// Where the collector's one-line log messages go (default: standard error).
    pub fn log(mut self, f: Arc<LogFn>) -> Self {
        self.log = Some(f);
        self
    }

    /// Binds the address, refuses a non-loopback one without a token, and marks the runs this
    /// collector (same host and port) left running as cut off.
    pub fn build(self) -> Result<Collector, StartError> {
        let store = self.store.ok_or(StartError::NoStore)?;
        let addrs: Vec<SocketAddr> = self
            .listen
            .to_socket_addrs()
            .map_err(|error| StartError::Listen { addr: self.listen.clone(), error })?
            .collect();
        if self.token.is_none() && addrs.iter().any(|a| !a.ip().is_loopback()) {
            return Err(StartError::TokenRequired(self.listen));
        }
        let listener =
            TcpListener::bind(&addrs[..]).map_err(|error| StartError::Listen { addr: self.listen.clone(), error })?;
        let addr = listener.local_addr().map_err(|error| StartError::Listen { addr: self.listen.clone(), error })?;
        let identity = format!("{}:{}", clrprof_trace::wire::hostname(), addr.port());
        // Never `eprintln!`: it panics when standard error is a closed pipe, and a collector must
        // outlive the terminal or pipe that started it.
        let log: Arc<LogFn> = self.log.unwrap_or_else(|| {
            Arc::new(|m: &str| {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "clrprof collect: {m}");
            })
        });
        let recovered = store.recover(&identity)?;
        if recovered > 0 {
            log(&format!("{recovered} run(s) left streaming by a previous collector marked cut off"));
        }
        Ok(Collector {
            listener,
            inner: Arc::new(Inner {
                store,
                observers: self.observers,
                token: self.token,
                max_run_bytes: self.max_run_bytes,
                agent_settings: self.agent_settings,
                identity,
                log,
                active: Mutex::new(HashMap::new()),
                connections: AtomicUsize::new(0),
                tls: self.tls,
            }),
        })
    }
}

/// A bound collector; [`Collector::serve`] runs it.
pub struct Collector {
    listener: TcpListener,
    inner: Arc<Inner>,
}

/// A collector serving on a thread of its own.
pub struct CollectorHandle {
    pub addr: SocketAddr,
}

struct Inner {
    store: Arc<dyn RunStore>,
    observers: Vec<Arc<dyn RunObserver>>,
    token: Option<String>,
    max_run_bytes: u64,
    agent_settings: Option<String>,
    identity: String,
    log: Arc<LogFn>,
    /// Streams being received, by (host, pid).
    active: Mutex<HashMap<(String, u32), RunId>>,
    connections: AtomicUsize,
    tls: Option<Arc<rustls::ServerConfig>>,
}

/// A connection's byte stream: the TCP stream itself, or TLS over it.
trait Conn: Read + Write + Send {}
impl<T: Read + Write + Send> Conn for T {}

impl Collector {
    pub fn builder() -> CollectorBuilder {
        CollectorBuilder {
            listen: "127.0.0.1:7878".into(),
            token: None,
            max_run_bytes: 1 << 30,
            agent_settings: None,
            store: None,
            observers: Vec::new(),
            log: None,
            tls: None,
        }
    }

    /// Marks the runs this collector is receiving as cut off (for a collector asked to stop: its
    /// streams end with the process). Safe to call from another thread while serving.
    pub fn stopper(&self) -> impl Fn() + Send + Sync + 'static {
        let inner = Arc::clone(&self.inner);
        move || {
            let _ = inner.store.recover(&inner.identity);
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener has an address")
    }

    /// Accepts connections until the process ends.
    pub fn serve(self) {
        for conn in self.listener.incoming() {
            let Ok(stream) = conn else { continue };
            let inner = Arc::clone(&self.inner);
            if inner.connections.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                inner.connections.fetch_sub(1, Ordering::AcqRel);
                let _ = (&stream).write_all(&wire::encode_answer(wire::status::REFUSED, 0));
                continue;
            }
            let spawned = std::thread::Builder::new().name("clrprof-collect-conn".into()).spawn(move || {
                let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
                // A bug in one connection must not take the count (or anything else) with it.
                let _ = catch_unwind(AssertUnwindSafe(|| inner.connection(stream, &peer)));
                inner.connections.fetch_sub(1, Ordering::AcqRel);
            });
            if spawned.is_err() {
                self.inner.connections.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Serves on a background thread (tests, embedding).
    pub fn spawn(self) -> CollectorHandle {
        let addr = self.local_addr();
        std::thread::spawn(move || self.serve());
        CollectorHandle { addr }
    }
}

/// How a stream ended, as far as the reading loop knows.
enum Outcome {
    Eof,
    Failed(String),
}

impl Inner {
    fn log(&self, m: &str) {
        (self.log)(m);
    }

    fn observe(&self, f: impl Fn(&dyn RunObserver)) {
        for o in &self.observers {
            if catch_unwind(AssertUnwindSafe(|| f(o.as_ref()))).is_err() {
                self.log("an observer panicked; the run goes on");
            }
        }
    }

    fn connection(&self, tcp: TcpStream, peer: &str) {
        let _ = tcp.set_read_timeout(Some(HELLO_TIMEOUT));
        keepalive(&tcp);
        // With TLS the handshake happens on the first read, within the hello's time limit; a
        // failed handshake (wrong CA, no client certificate) is logged as the hello's error.
        let io: std::io::Result<Box<dyn Conn>> = match &self.tls {
            None => tcp.try_clone().map(|s| Box::new(s) as Box<dyn Conn>),
            Some(cfg) => match rustls::ServerConnection::new(cfg.clone()) {
                Ok(c) => tcp.try_clone().map(|s| Box::new(rustls::StreamOwned::new(c, s)) as Box<dyn Conn>),
                Err(e) => Err(std::io::Error::other(e)),
            },
        };
        let mut stream = match io {
            Ok(s) => s,
            Err(e) => {
                self.log(&format!("connection from {peer} dropped: {e}"));
                return;
            }
        };
        let hello = match Hello::read(&mut stream) {
            Ok(h) => h,
            Err(e) => {
                if let HelloError::Unsupported(_) = e {
                    let _ = stream.write_all(&wire::encode_answer(wire::status::UNSUPPORTED, 0));
                }
                self.log(&format!("connection from {peer} dropped: {e}"));
                return;
            }
        };
        if let Some(t) = &self.token {
            if !tokens_equal(t.as_bytes(), hello.token.as_bytes()) {
                let _ = stream.write_all(&wire::encode_answer(wire::status::BAD_TOKEN, 0));
                self.log(&format!(
                    "connection from {peer} (pid {} on {}) refused: wrong or missing token",
                    hello.pid, hello.host
                ));
                return;
            }
        }
        if hello.kind == wire::kind::EXIT {
            self.exit_notice(&mut stream, &hello);
            return;
        }
        let new = NewRun {
            host: hello.host.clone(),
            pid: hello.pid,
            command: hello.command.clone(),
            runtime: Some(hello.runtime.clone()).filter(|r| !r.is_empty()),
            start: now_ms(),
            collector: self.identity.clone(),
        };
        let id = match self.store.create_run(&new) {
            Ok(id) => id,
            Err(e) => {
                let _ = stream.write_all(&wire::encode_answer(wire::status::REFUSED, 0));
                self.log(&format!("connection from {peer} refused: {e}"));
                return;
            }
        };
        let answer = match &self.agent_settings {
            Some(s) if hello.flags & wire::flags::TAKES_SETTINGS != 0 => {
                wire::encode_answer_with_settings(id.0 as u64, s)
            }
            _ => wire::encode_answer(wire::status::ACCEPTED, id.0 as u64).to_vec(),
        };
        if stream.write_all(&answer).is_err() {
            let _ = self.store.finish(
                id,
                &RunEnd { end: now_ms(), state: RunState::CutOff, reason: Some("agent gone before the trace".into()) },
            );
            return;
        }
        if let Ok(mut a) = self.active.lock() {
            a.insert((hello.host.clone(), hello.pid), id);
        }
        let info = RunInfo {
            id,
            host: new.host,
            pid: new.pid,
            command: new.command,
            runtime: new.runtime,
            start: new.start,
            end: None,
            exit_status: None,
            bytes: 0,
            state: RunState::Running,
            complete: false,
            reason: None,
        };
        self.observe(|o| o.run_started(&info));
        self.log(&format!("run {id}: pid {} on {} started ({peer})", info.pid, info.host));
        let (state, reason, bytes) = self.receive(&mut stream, &tcp, id);
        drop(stream);
        let _ = tcp.shutdown(std::net::Shutdown::Both);
        if let Err(e) = self.store.finish(id, &RunEnd { end: now_ms(), state, reason: reason.clone() }) {
            self.log(&format!("run {id}: cannot record its end: {e}"));
        }
        if let Ok(mut a) = self.active.lock() {
            if a.get(&(hello.host.clone(), hello.pid)) == Some(&id) {
                a.remove(&(hello.host.clone(), hello.pid));
            }
        }
        self.observe(|o| o.run_ended(id, state == RunState::Complete));
        match reason {
            None => self.log(&format!("run {id}: complete, {bytes} bytes")),
            Some(r) => self.log(&format!("run {id}: cut off after {bytes} bytes: {r}")),
        }
    }

    /// Reads the trace to its end; returns how the run ended and the bytes stored.
    fn receive(&self, stream: &mut dyn Conn, tcp: &TcpStream, id: RunId) -> (RunState, Option<String>, u64) {
        // An agent may stay quiet for long stretches (an idle app): no read timeout once the
        // trace has begun.
        let _ = tcp.set_read_timeout(None);
        let mut decoder = StreamDecoder::new();
        let mut records = Vec::new();
        let mut buf = vec![0u8; 256 << 10];
        // Bytes received and not stored yet (the tail of an incomplete block).
        let mut pending: Vec<u8> = Vec::new();
        let mut stored = 0u64;
        let mut stopped = false;
        let outcome = loop {
            let n = match stream.read(&mut buf) {
                Ok(0) => break Outcome::Eof,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // A TLS stream closed without close_notify: the end of the stream like any other
                // (the trace's own blocks and its AgentStop record say whether it was whole).
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && self.tls.is_some() => break Outcome::Eof,
                Err(e) => break Outcome::Failed(format!("connection lost: {e}")),
            };
            pending.extend_from_slice(&buf[..n]);
            records.clear();
            if let Err(e) = decoder.push(&buf[..n], &mut records) {
                // Keep the whole blocks that came before the damage.
                let complete = ((decoder.offset() - stored) as usize).min(pending.len());
                let fit = fitting_prefix(&pending[..complete], stored, self.max_run_bytes);
                if fit > 0 && self.store.append(id, &pending[..fit]).is_ok() {
                    self.observe(|o| o.run_data(id, &pending[..fit]));
                    stored += fit as u64;
                }
                break Outcome::Failed(format!("malformed stream dropped: {e}"));
            }
            if records.iter().any(|r| matches!(r, Record::AgentStop(_))) {
                stopped = true;
            }
            let complete = (decoder.offset() - stored) as usize;
            if complete == 0 {
                continue;
            }
            let fit = fitting_prefix(&pending[..complete], stored, self.max_run_bytes);
            if fit > 0 {
                if let Err(e) = self.store.append(id, &pending[..fit]) {
                    break Outcome::Failed(format!("store failed: {e}"));
                }
                self.observe(|o| o.run_data(id, &pending[..fit]));
                stored += fit as u64;
            }
            if fit < complete {
                break Outcome::Failed(format!("size limit of {} bytes reached", self.max_run_bytes));
            }
            pending.drain(..complete);
        };
        let (state, reason) = match outcome {
            Outcome::Eof => match decoder.finish() {
                Ok(None) if stopped => (RunState::Complete, None),
                Ok(None) => (RunState::CutOff, Some("the stream ended before the agent stopped".to_string())),
                Ok(Some(t)) => (
                    RunState::CutOff,
                    Some(format!("the stream ended inside a block ({} of {} bytes)", t.have, t.need)),
                ),
                Err(e) => (RunState::CutOff, Some(format!("the stream ended early: {e}"))),
            },
            Outcome::Failed(r) => (RunState::CutOff, Some(r)),
        };
        (state, reason, stored)
    }

    fn exit_notice(&self, stream: &mut dyn Conn, hello: &Hello) {
        let key = (hello.host.clone(), hello.pid);
        let deadline = Instant::now() + EXIT_WAIT;
        while Instant::now() < deadline && self.active.lock().map(|a| a.contains_key(&key)).unwrap_or(false) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let (exit_code, signal) =
            if hello.exit_code < 0 { (None, Some(-hello.exit_code - 1)) } else { (Some(hello.exit_code), None) };
        let block = encode_records([&Record::ProcessExit(ProcessExit {
            end_unix_ns: (now_ms() as u64).saturating_mul(1_000_000),
            exit_code,
            signal,
        })]);
        match self.store.set_exit(&hello.host, hello.pid, hello.exit_code, &block) {
            Ok(Some(id)) => {
                let _ = stream.write_all(&wire::encode_answer(wire::status::ACCEPTED, id.0 as u64));
            }
            Ok(None) => {
                let _ = stream.write_all(&wire::encode_answer(wire::status::REFUSED, 0));
                self.log(&format!("exit notice for pid {} on {}: no such run", hello.pid, hello.host));
            }
            Err(e) => {
                let _ = stream.write_all(&wire::encode_answer(wire::status::REFUSED, 0));
                self.log(&format!("exit notice for pid {} on {}: {e}", hello.pid, hello.host));
            }
        }
    }
}

/// Of `bytes` (the trace's header when `stored` is 0, then whole blocks), the longest prefix of
/// whole pieces that keeps the run within `max` bytes.
fn fitting_prefix(bytes: &[u8], stored: u64, max: u64) -> usize {
    if stored + bytes.len() as u64 <= max {
        return bytes.len();
    }
    let mut pos = 0usize;
    if stored == 0 {
        if (HEADER_LEN as u64) > max {
            return 0;
        }
        pos = HEADER_LEN;
    }
    while bytes.len() - pos >= 8 {
        let len = u32::from_le_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]]) as usize;
        let next = pos + 8 + len;
        if next > bytes.len() || stored + next as u64 > max {
            break;
        }
        pos = next;
    }
    pos
}

/// TCP keep-alive probes after 60 s of silence, so that a stream whose host vanished (no FIN, no
/// RST) ends as cut off within minutes instead of holding its thread forever.
fn keepalive(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let fd = stream.as_raw_fd();
    let set = |level: libc::c_int, name: libc::c_int, v: libc::c_int| {
        // Safety: `v` outlives the call and its size is passed; `fd` belongs to `stream`.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                &v as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 60);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 10);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 6);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_limit_keeps_whole_blocks() {
        let mut t = clrprof_trace::header().to_vec();
        let b1 = clrprof_trace::encode_block(&[1, 2, 3, 4]);
        let b2 = clrprof_trace::encode_block(&[5; 10]);
        t.extend(&b1);
        t.extend(&b2);
        assert_eq!(fitting_prefix(&t, 0, 1000), t.len());
        assert_eq!(fitting_prefix(&t, 0, (16 + b1.len() + 3) as u64), 16 + b1.len());
        assert_eq!(fitting_prefix(&t, 0, 10), 0);
        assert_eq!(fitting_prefix(&b2, 100, 100 + b2.len() as u64 - 1), 0);
    }
}
