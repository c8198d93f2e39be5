//! Per-thread record buffers and the one writer thread that streams them to the sink.
//!
//! A thread encodes records into its own buffer (a mutex only the writer ever contends for). Every
//! flush interval the writer swaps each buffer out, frames the bytes as one block and writes it, so
//! a crash loses at most one interval. If the sink fails (disk full) the agent keeps running: data
//! is dropped and counted.
//!
//! A buffer that reaches its cap is handled by who fills it. The writer thread's own records (what
//! its ticks publish: call trees, deferred names) are written out at once, so one large tick never
//! loses any. In exact modes ([`Writer::set_exact`]) another thread waits, with backoff, for the
//! writer to drain its buffer (at most [`MAX_WAIT`] at a time; the writer never waits for an app
//! thread, so this cannot deadlock); sampled modes drop and count, as they do at process exit and
//! once the sink is gone.
//!
//! Written bytes go straight to the file (no user-space buffer), so what was written survives any
//! death of the process. [`Writer::flush_urgently`] makes the writer thread do a full round at
//! once (publishing everything its ticks hold) for a thread that knows the process is about to die. Streaming to a collector ([`Remote`]) that becomes unreachable, the
//! writer falls back to the local trace file, which it starts with the header and the definition
//! records (names, loads, stacks, …) already sent, so that the file is readable on its own.

use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use clrprof_trace::{encode_block, Record};

/// Bytes a thread may hold before the writer drains it (see the module's notes for what happens
/// beyond).
const THREAD_BUFFER_CAP: usize = 32 << 20;
/// Longest an app thread waits at a time for the writer to drain its full buffer, in exact modes;
/// beyond it the record is dropped and counted, and later records of a full buffer are dropped
/// without waiting until the writer completes another round (it is stuck, not slow).
pub const MAX_WAIT: Duration = Duration::from_secs(5);
/// Largest block written at once.
const BLOCK_TARGET: usize = 4 << 20;

struct ThreadBuf {
    data: Mutex<Vec<u8>>,
}

/// Where blocks go.
pub enum Sink {
    File(std::fs::File),
    /// A collector (`CLRPROF_SERVER`), with the local file to fall back to.
    Remote(Remote),
}

impl Sink {
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::File(f) => f.write_all(b),
            Sink::Remote(r) => r.send(b),
        }
    }
}

/// The TLS files of a `tls://` collector (`CLRPROF_TLS_CA`, `CLRPROF_TLS_CERT`, `CLRPROF_TLS_KEY`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
}

/// The socket as rustls reads and writes it: writes through [`send_all`] (no SIGPIPE in the host).
struct Sock<'a>(&'a std::net::TcpStream);

impl std::io::Read for Sock<'_> {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        std::io::Read::read(&mut &*self.0, b)
    }
}

impl Write for Sock<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        send_all(self.0, b).map(|_| b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Encrypts all of `b` and sends it; never reads (a write never waits for the collector to speak).
fn tls_send(c: &mut rustls::ClientConnection, stream: &std::net::TcpStream, mut b: &[u8]) -> std::io::Result<()> {
    let mut sock = Sock(stream);
    while !b.is_empty() {
        let n = c.writer().write(b)?;
        b = &b[n..];
        let mut sent = false;
        while c.wants_write() {
            c.write_tls(&mut sock)?;
            sent = true;
        }
        if n == 0 && !sent {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
    }
    // What is still queued (a close_notify).
    while c.wants_write() {
        c.write_tls(&mut sock)?;
    }
    Ok(())
}

/// The PEM certificates of a file.
fn pem_certs(path: &str) -> std::io::Result<Vec<rustls::Certificate>> {
    let f = std::fs::File::open(path).map_err(|e| std::io::Error::new(e.kind(), format!("{path}: {e}")))?;
    let certs = rustls_pemfile::certs(&mut std::io::BufReader::new(f))?;
    if certs.is_empty() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{path}: no CERTIFICATE")));
    }
    Ok(certs.into_iter().map(rustls::Certificate).collect())
}

/// The client configuration of a `tls://` collector: the CA of `CLRPROF_TLS_CA` (else the
/// system's bundle) and, for mutual TLS, the client certificate and key.
fn tls_config(files: &TlsFiles) -> std::io::Result<std::sync::Arc<rustls::ClientConfig>> {
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    let mut roots = rustls::RootCertStore::empty();
    let ca = files.ca.as_deref().unwrap_or("/etc/ssl/certs/ca-certificates.crt");
    for c in pem_certs(ca)? {
        // A system bundle may hold certificates rustls cannot parse: skipped, as browsers do.
        if roots.add(&c).is_err() && files.ca.is_some() {
            return Err(bad(format!("{ca}: an invalid certificate")));
        }
    }
    let b = rustls::ClientConfig::builder().with_safe_defaults().with_root_certificates(roots);
    let cfg = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let f = std::fs::File::open(key).map_err(|e| std::io::Error::new(e.kind(), format!("{key}: {e}")))?;
            let k = rustls_pemfile::read_all(&mut std::io::BufReader::new(f))?
                .into_iter()
                .find_map(|i| match i {
                    rustls_pemfile::Item::PKCS8Key(k)
                    | rustls_pemfile::Item::RSAKey(k)
                    | rustls_pemfile::Item::ECKey(k) => Some(rustls::PrivateKey(k)),
                    _ => None,
                })
                .ok_or_else(|| bad(format!("{key}: no PRIVATE KEY")))?;
            b.with_single_cert(pem_certs(cert)?, k).map_err(|e| bad(format!("{cert}: {e}")))?
        }
        _ => b.with_no_client_auth(),
    };
    Ok(std::sync::Arc::new(cfg))
}

/// Opens the local trace file when the collector goes: the file and its path.
pub type OpenFallback = Box<dyn Fn() -> std::io::Result<(std::fs::File, String)> + Send + Sync>;

/// Time to connect to the collector and to get its answer, at start-up.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
const ANSWER_TIMEOUT: Duration = Duration::from_millis(2000);
/// A write the collector does not take within this time ends the stream (fallback to the file).
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Definition records kept for the fallback file, at most; beyond, the fallback file may lack
/// names of what was sent before (it stays readable).
const KEEP_CAP: usize = 256 << 20;

/// A stream to the collector.
pub struct Remote {
    stream: std::net::TcpStream,
    /// The TLS session of a `tls://` collector (boxed: a session is large, a plain stream is not).
    tls: Option<Box<rustls::ClientConnection>>,
    server: String,
    fallback: OpenFallback,
    /// The definition records sent so far, encoded (see `clrprof_trace::wire::is_definition`).
    kept: Vec<u8>,
    keeping: bool,
    /// Settings the collector sent with its answer (`CLRPROF_*=value` lines), taken by start-up.
    pub settings: Option<String>,
}

/// Writes all of `b` to the socket without raising SIGPIPE in the host process; the socket's send
/// timeout bounds each write.
fn send_all(stream: &std::net::TcpStream, mut b: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    while !b.is_empty() {
        // Safety: `b` is a live buffer of `b.len()` bytes; the fd belongs to `stream`.
        let n =
            unsafe { libc::send(stream.as_raw_fd(), b.as_ptr() as *const libc::c_void, b.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        b = &b[n as usize..];
    }
    Ok(())
}

impl Remote {
    /// Connects to `server` (`ADDR:PORT`, or `tls://ADDR:PORT` for TLS checked against `tls`'s
    /// CA), sends the hello and waits for the collector's answer. Bounded by [`CONNECT_TIMEOUT`]
    /// per address and [`ANSWER_TIMEOUT`] (the TLS handshake included). A failed handshake is an
    /// error like an unreachable collector: the caller writes the file instead.
    pub fn connect(
        server: &str,
        tls: &TlsFiles,
        hello: &clrprof_trace::wire::Hello,
        fallback: OpenFallback,
    ) -> std::io::Result<Remote> {
        use std::net::ToSocketAddrs;
        let (server, secure) = match server.strip_prefix("tls://") {
            Some(s) => (s, true),
            None => (server, false),
        };
        let mut last = std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{server}: no address"));
        let mut stream = None;
        for a in server.to_socket_addrs()? {
            match std::net::TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let stream = stream.ok_or(last)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(ANSWER_TIMEOUT))?;
        stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        let mut answer = [0u8; 9];
        let mut session = None;
        let mut settings = None;
        if secure {
            let host = server.rsplit_once(':').map_or(server, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
            let name = rustls::ServerName::try_from(host)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{host}: {e}")))?;
            let mut c = rustls::ClientConnection::new(tls_config(tls)?, name).map_err(std::io::Error::other)?;
            let mut sock = Sock(&stream);
            while c.is_handshaking() {
                c.complete_io(&mut sock)
                    .map_err(|e| std::io::Error::new(e.kind(), format!("TLS handshake failed: {e}")))?;
            }
            tls_send(&mut c, &stream, &hello.encode())?;
            let mut s = rustls::Stream::new(&mut c, &mut sock);
            std::io::Read::read_exact(&mut s, &mut answer)?;
            if answer[0] == clrprof_trace::wire::status::ACCEPTED_WITH_SETTINGS {
                settings = Some(clrprof_trace::wire::read_settings(&mut s)?);
            }
            session = Some(Box::new(c));
        } else {
            send_all(&stream, &hello.encode())?;
            std::io::Read::read_exact(&mut &stream, &mut answer)?;
            if answer[0] == clrprof_trace::wire::status::ACCEPTED_WITH_SETTINGS {
                settings = Some(clrprof_trace::wire::read_settings(&mut &stream)?);
            }
        }
        let (status, run) = clrprof_trace::wire::decode_answer(&answer);
        if status != clrprof_trace::wire::status::ACCEPTED
            && status != clrprof_trace::wire::status::ACCEPTED_WITH_SETTINGS
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("the collector refused the run: {}", clrprof_trace::wire::status::name(status)),
            ));
        }
        stream.set_write_timeout(Some(SEND_TIMEOUT))?;
        let how = if secure { " over TLS" } else { "" };
        crate::log_info!("streaming to the collector at {server}{how} as run {run}");
        Ok(Remote {
            stream,
            tls: session,
            server: server.to_string(),
            fallback,
            kept: Vec::new(),
            keeping: true,
            settings,
        })
    }

    /// Sends bytes of the trace (encrypted on a `tls://` stream).
    fn send(&mut self, b: &[u8]) -> std::io::Result<()> {
        match &mut self.tls {
            None => send_all(&self.stream, b),
            Some(c) => tls_send(c, &self.stream, b),
        }
    }

    /// Keeps the definition records of a payload that was sent.
    fn keep(&mut self, payload: &[u8]) {
        if !self.keeping {
            return;
        }
        let kept = &mut self.kept;
        clrprof_trace::wire::for_each_record(payload, |tag, rec| {
            if clrprof_trace::wire::is_definition(tag) {
                kept.extend_from_slice(rec);
            }
        });
        if self.kept.len() > KEEP_CAP {
            crate::log_warn!("more than {} MiB of names sent; a fallback file would lack the oldest", KEEP_CAP >> 20);
            self.keeping = false;
            self.kept = Vec::new();
        }
    }

    /// The collector is gone: opens the local file and writes the header and the kept records.
    fn fall_back(&mut self, why: &std::io::Error) -> std::io::Result<std::fs::File> {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        let (mut f, path) = (self.fallback)()?;
        crate::log_warn!("the collector at {} is gone ({why}); writing the rest of the run to {path}", self.server);
        f.write_all(&clrprof_trace::header())?;
        let kept = std::mem::take(&mut self.kept);
        for block in blocks(&kept) {
            f.write_all(&encode_block(block))?;
        }
        Ok(f)
    }
}

/// `records` cut into blocks: whole records up to [`BLOCK_TARGET`] bytes a block, at least one
/// (a larger record is a block alone); the rest as one block where it does not start with a whole
/// record.
fn blocks(records: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = records;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = clrprof_trace::wire::records_within(rest, BLOCK_TARGET);
        let (block, after) = rest.split_at(if end == 0 { rest.len() } else { end });
        rest = after;
        Some(block)
    })
}

/// Work the writer thread runs before each flush.
pub type Tick = Box<dyn Fn(&Writer) + Send + Sync>;

pub struct Writer {
    id: u64,
    buffers: Mutex<Vec<Arc<ThreadBuf>>>,
    /// Records of threads whose thread-local storage is gone (thread teardown).
    orphan: Mutex<Vec<u8>>,
    sink: Mutex<Option<Sink>>,
    wake: Condvar,
    wake_lock: Mutex<bool>,
    stopping: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    flush_interval: Duration,
    /// When the writer was created: it flushes more often in the process's first moments.
    created: std::time::Instant,
    /// Work the writer thread does before each flush (deferred lookups, publishing aggregates).
    ticks: Mutex<Vec<Tick>>,
    pub records: AtomicU64,
    pub dropped_records: AtomicU64,
    pub dropped_bytes: AtomicU64,
    pub written_bytes: AtomicU64,
    /// Bytes a thread's buffer may hold ([`THREAD_BUFFER_CAP`] unless set).
    cap: std::sync::atomic::AtomicUsize,
    /// Exact modes: a full buffer makes its (app) thread wait for the writer instead of dropping.
    exact: AtomicBool,
    /// Rounds (ticks and flush) the writer thread completed.
    rounds: AtomicU64,
    /// The round at which a wait for room last timed out (`u64::MAX`: none): until the writer
    /// completes another, full buffers drop without waiting.
    stuck_at: AtomicU64,
    /// Threads waiting for room now: the writer then drains every buffer between its ticks and
    /// whenever it writes out its own records, not only at the end of a round.
    waiting: std::sync::atomic::AtomicUsize,
    /// Times a thread waited for room, and the time it waited in all.
    pub waits: AtomicU64,
    pub waited_ns: AtomicU64,
    /// Urgent rounds asked for ([`Writer::flush_urgently`]) and the last one the writer did.
    urgent_asked: AtomicU64,
    urgent_done: AtomicU64,
    /// Set while the writer does an urgent round: ticks publish everything, as at the end.
    urgent: AtomicBool,
}

/// How long after start-up the writer flushes every [`EARLY_FLUSH`] at most.
const EARLY: Duration = Duration::from_secs(2);
const EARLY_FLUSH: Duration = Duration::from_millis(5);

thread_local! {
    /// The thread's buffer and the id of the writer it belongs to: after an attach session ends
    /// and a new one starts in the same process, a thread's old buffer is replaced.
    static LOCAL: RefCell<Option<(u64, Arc<ThreadBuf>)>> = const { RefCell::new(None) };
    /// The id of the writer whose thread this is (0: an app thread).
    static WRITER_THREAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

static NEXT_WRITER_ID: AtomicU64 = AtomicU64::new(1);

impl Writer {
    /// Writes the header synchronously and returns a writer that is not yet flushing.
    pub fn new(mut sink: Sink, flush_interval: Duration) -> std::io::Result<Writer> {
        sink.write_all(&clrprof_trace::header())?;
        Ok(Writer {
            id: NEXT_WRITER_ID.fetch_add(1, Ordering::Relaxed),
            buffers: Mutex::new(Vec::new()),
            orphan: Mutex::new(Vec::new()),
            sink: Mutex::new(Some(sink)),
            wake: Condvar::new(),
            wake_lock: Mutex::new(false),
            stopping: AtomicBool::new(false),
            thread: Mutex::new(None),
            flush_interval,
            created: std::time::Instant::now(),
            ticks: Mutex::new(Vec::new()),
            records: AtomicU64::new(0),
            dropped_records: AtomicU64::new(0),
            dropped_bytes: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
            cap: std::sync::atomic::AtomicUsize::new(THREAD_BUFFER_CAP),
            exact: AtomicBool::new(false),
            rounds: AtomicU64::new(0),
            stuck_at: AtomicU64::new(u64::MAX),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            waits: AtomicU64::new(0),
            waited_ns: AtomicU64::new(0),
            urgent_asked: AtomicU64::new(0),
            urgent_done: AtomicU64::new(0),
            urgent: AtomicBool::new(false),
        })
    }

    /// A writer past its start-up phase of frequent flushes whose threads' buffers hold `cap`
    /// bytes (tests of full buffers and urgent rounds).
    #[cfg(test)]
    fn for_test(sink: Sink, flush_interval: Duration, cap: usize) -> std::io::Result<Writer> {
        let w = Writer::new(sink, flush_interval)?;
        let created = w.created.checked_sub(EARLY).unwrap_or(w.created);
        w.set_buffer_cap(cap);
        Ok(Writer { created, ..w })
    }

    /// Bytes each thread's buffer holds (`CLRPROF_BUFFER_KB`): smaller buffers bound the agent's
    /// memory and make a busy machine's pressure on the writer visible sooner.
    pub fn set_buffer_cap(&self, bytes: usize) {
        self.cap.store(bytes.max(1), Ordering::Relaxed);
    }

    /// Exact modes (call counts, every exception, every allocation): threads wait for room rather
    /// than drop records (see the module's notes).
    pub fn set_exact(&self, exact: bool) {
        self.exact.store(exact, Ordering::Relaxed);
    }

    /// Whether the ticks should publish everything they hold now: the writer is stopping, or doing
    /// an urgent round for a process about to die.
    pub fn wants_everything(&self) -> bool {
        self.is_stopping() || self.urgent.load(Ordering::Acquire)
    }

    /// Makes the writer thread do a full round now — its ticks publish everything, as at the end,
    /// and every buffer is written — and waits for it, `timeout` at most. For a thread that knows
    /// the process is about to die (the runtime's FailFast path), which keeps its last moments.
    /// Returns whether the round was done. Not from the writer thread (it returns at once).
    pub fn flush_urgently(&self, timeout: Duration) -> bool {
        if self.is_stopping() || self.on_writer_thread() {
            return false;
        }
        let ticket = self.urgent_asked.fetch_add(1, Ordering::AcqRel) + 1;
        self.wake_writer();
        let deadline = std::time::Instant::now() + timeout;
        while self.urgent_done.load(Ordering::Acquire) < ticket {
            if std::time::Instant::now() >= deadline || self.is_stopping() {
                return self.urgent_done.load(Ordering::Acquire) >= ticket;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        true
    }

    /// Writes records immediately as one block (used for the first record, before the thread runs).
    pub fn write_now(&self, records: &[Record]) {
        let mut payload = Vec::new();
        for r in records {
            r.encode(&mut payload);
        }
        self.records.fetch_add(records.len() as u64, Ordering::Relaxed);
        self.write_block(&payload);
    }

    /// Starts the writer thread.
    pub fn start(self: &Arc<Self>) -> std::io::Result<()> {
        let me = Arc::clone(self);
        let h = std::thread::Builder::new().name("clrprof-writer".into()).spawn(move || me.run())?;
        if let Ok(mut t) = self.thread.lock() {
            *t = Some(h);
        }
        Ok(())
    }

    /// Adds work for the writer thread to do before each flush.
    pub fn add_tick(&self, f: Tick) {
        if let Ok(mut t) = self.ticks.lock() {
            t.push(f);
        }
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Appends a record to the calling thread's buffer.
    pub fn emit(&self, record: &Record) {
        let done = LOCAL.try_with(|l| {
            let mut slot = l.borrow_mut();
            if slot.as_ref().is_none_or(|(id, _)| *id != self.id) {
                let b = Arc::new(ThreadBuf { data: Mutex::new(Vec::with_capacity(4096)) });
                if let Ok(mut all) = self.buffers.lock() {
                    all.push(Arc::clone(&b));
                }
                *slot = Some((self.id, b));
            }
            if let Some((_, buf)) = slot.as_ref() {
                self.append(&buf.data, record);
            }
        });
        if done.is_err() {
            self.append(&self.orphan, record);
        }
    }

    fn append(&self, data: &Mutex<Vec<u8>>, record: &Record) {
        let Ok(mut d) = data.lock() else { return };
        let cap = self.cap.load(Ordering::Relaxed);
        if d.len() >= cap {
            if self.on_writer_thread() {
                // The writer's own records (a large tick): written out now, in order.
                let full = std::mem::take(&mut *d);
                drop(d);
                self.write_blocks(&full);
                self.drain_for_waiters();
                let Ok(again) = data.lock() else { return };
                d = again;
            } else if self.exact.load(Ordering::Relaxed) {
                drop(d);
                self.waiting.fetch_add(1, Ordering::AcqRel);
                let again = self.wait_for_room(data);
                self.waiting.fetch_sub(1, Ordering::AcqRel);
                let Some(again) = again else { return };
                d = again;
            }
            if d.len() >= cap {
                self.dropped_records.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        record.encode(&mut d);
        self.records.fetch_add(1, Ordering::Relaxed);
    }

    /// Wakes the writer thread for a round now.
    fn wake_writer(&self) {
        if let Ok(mut g) = self.wake_lock.lock() {
            *g = true;
        }
        self.wake.notify_all();
    }

    /// Whether the calling thread is this writer's own thread.
    fn on_writer_thread(&self) -> bool {
        WRITER_THREAD.try_with(|w| w.get() == self.id).unwrap_or(false)
    }

    /// Writer thread: drains every buffer now if a thread waits for room (between ticks, and when
    /// a long tick writes out its own records).
    fn drain_for_waiters(&self) {
        if self.waiting.load(Ordering::Acquire) > 0 {
            self.flush();
        }
    }

    /// Waits, with backoff, until the writer has drained `data` below the cap; gives up (the
    /// buffer is returned still full) at [`MAX_WAIT`], when the writer stops, when the sink is
    /// gone, or at once when a wait already timed out since the writer's last round.
    #[cold]
    fn wait_for_room<'a>(&self, data: &'a Mutex<Vec<u8>>) -> Option<std::sync::MutexGuard<'a, Vec<u8>>> {
        let start = std::time::Instant::now();
        let mut pause = Duration::from_micros(50);
        let mut waited = false;
        loop {
            let d = data.lock().ok()?;
            let sink_gone = self.sink.try_lock().map(|s| s.is_none()).unwrap_or(false);
            let stuck = self.stuck_at.load(Ordering::Relaxed) == self.rounds.load(Ordering::Acquire);
            if d.len() < self.cap.load(Ordering::Relaxed) || self.is_stopping() || sink_gone || stuck {
                if waited {
                    self.waits.fetch_add(1, Ordering::Relaxed);
                    self.waited_ns.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }
                return Some(d);
            }
            if start.elapsed() >= MAX_WAIT {
                self.stuck_at.store(self.rounds.load(Ordering::Acquire), Ordering::Relaxed);
                crate::log_warn!(
                    "a thread waited {} ms for the trace writer to make room; dropping records until it does",
                    MAX_WAIT.as_millis()
                );
                continue;
            }
            drop(d);
            waited = true;
            self.wake_writer();
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    fn run(&self) {
        let _ = WRITER_THREAD.try_with(|w| w.set(self.id));
        loop {
            let stop = self.stopping.load(Ordering::Acquire);
            // Urgent rounds asked for before this point are served by this round.
            let asked = self.urgent_asked.load(Ordering::Acquire);
            let urgent = asked > self.urgent_done.load(Ordering::Acquire);
            if urgent {
                self.urgent.store(true, Ordering::Release);
            }
            if let Ok(ticks) = self.ticks.lock() {
                for t in ticks.iter() {
                    t(self);
                    self.drain_for_waiters();
                }
            }
            self.flush();
            if urgent {
                self.urgent.store(false, Ordering::Release);
                self.urgent_done.store(asked, Ordering::Release);
            }
            self.rounds.fetch_add(1, Ordering::AcqRel);
            if stop {
                break;
            }
            if self.urgent_asked.load(Ordering::Acquire) > self.urgent_done.load(Ordering::Acquire) {
                continue;
            }
            if let Ok(g) = self.wake_lock.lock() {
                // A process that dies in its first moments (`Environment.FailFast`, an unhandled
                // exception: the runtime aborts without `Shutdown`, and resets signal handlers first)
                // keeps what the last flush wrote, so start-up flushes often: its assemblies and the
                // names of its first functions reach the file within a few ms.
                let interval = if self.created.elapsed() < EARLY {
                    self.flush_interval.min(EARLY_FLUSH)
                } else {
                    self.flush_interval
                };
                // Woken early by a thread waiting for room, an urgent round or the stop.
                let woken = self.wake.wait_timeout_while(g, interval, |woken| !*woken && !self.is_stopping());
                if let Ok((mut g, _)) = woken {
                    *g = false;
                }
            }
        }
    }

    /// Drains every buffer and writes the bytes as blocks.
    pub fn flush(&self) {
        let bufs: Vec<Arc<ThreadBuf>> = match self.buffers.lock() {
            Ok(mut all) => {
                // Forget buffers of exited threads once drained below.
                let v = all.clone();
                all.retain(|b| Arc::strong_count(b) > 2);
                v
            }
            Err(_) => return,
        };
        let mut payload = Vec::new();
        let take = |m: &Mutex<Vec<u8>>, payload: &mut Vec<u8>| {
            if let Ok(mut d) = m.lock() {
                if !d.is_empty() {
                    payload.extend_from_slice(&d);
                    d.clear();
                    if d.capacity() > (1 << 20) {
                        d.shrink_to(64 << 10);
                    }
                }
            }
        };
        for b in &bufs {
            take(&b.data, &mut payload);
            if payload.len() >= BLOCK_TARGET {
                self.write_blocks(&payload);
                payload.clear();
            }
        }
        take(&self.orphan, &mut payload);
        self.write_blocks(&payload);
    }

    /// Writes whole records as blocks of at most [`BLOCK_TARGET`] bytes (a larger record alone):
    /// a reader holds a block whole while it checks and decodes it, so one flush of a busy tick
    /// (the call trees' records of every thread) must not make one block of tens of MB.
    fn write_blocks(&self, payload: &[u8]) {
        for block in blocks(payload) {
            self.write_block(block);
        }
    }

    fn write_block(&self, payload: &[u8]) {
        if payload.is_empty() {
            return;
        }
        let block = encode_block(payload);
        let Ok(mut sink) = self.sink.lock() else { return };
        let ok = match sink.as_mut() {
            Some(Sink::Remote(r)) => match r.send(&block) {
                Ok(()) => {
                    r.keep(payload);
                    true
                }
                Err(e) => match r.fall_back(&e) {
                    Ok(mut f) => {
                        let ok = f.write_all(&block).is_ok();
                        *sink = Some(Sink::File(f));
                        ok
                    }
                    Err(fe) => {
                        crate::log_error!("the collector is gone ({e}) and the local trace file cannot be written ({fe}); dropping data from now on");
                        *sink = None;
                        false
                    }
                },
            },
            Some(s) => s.write_all(&block).is_ok(),
            None => false,
        };
        if ok {
            self.written_bytes.fetch_add(block.len() as u64, Ordering::Relaxed);
        } else {
            if sink.is_some() {
                crate::log_error!("trace sink failed; dropping data from now on");
                *sink = None;
            }
            self.dropped_bytes.fetch_add(block.len() as u64, Ordering::Relaxed);
            let n = clrprof_trace::decode_payload(payload).map(|v| v.len() as u64).unwrap_or(0);
            self.dropped_records.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Stops the writer thread after a last flush, then writes `last` records.
    pub fn stop(&self, last: impl FnOnce(&Writer) -> Vec<Record>) {
        if self.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        self.wake.notify_all();
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
        self.flush();
        let recs = last(self);
        self.write_now(&recs);
        if let Ok(mut s) = self.sink.lock() {
            match s.as_mut() {
                Some(Sink::File(f)) => {
                    let _ = f.flush();
                }
                // The collector sees the end of a complete stream.
                Some(Sink::Remote(r)) => {
                    if let Some(c) = &mut r.tls {
                        c.send_close_notify();
                        let _ = tls_send(c, &r.stream, &[]);
                    }
                    let _ = r.stream.shutdown(std::net::Shutdown::Write);
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_trace::{ThreadCreated, ThreadNamed};

    #[test]
    fn records_from_many_threads_all_arrive_and_a_dead_sink_is_survived() {
        let dir = std::env::temp_dir().join(format!("clrprof-writer-test-{}", std::process::id()));
        let file = std::fs::File::create(&dir).unwrap();
        let w = Arc::new(Writer::new(Sink::File(file), Duration::from_millis(5)).unwrap());
        w.start().unwrap();
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let w = Arc::clone(&w);
                std::thread::spawn(move || {
                    for i in 0..1000u64 {
                        w.emit(&ThreadCreated { ts: i, id: t }.into());
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        w.stop(|_| vec![ThreadNamed { ts: 1, id: 9, name: "last".into() }.into()]);
        let (recs, trunc) = clrprof_trace::read_all(std::fs::File::open(&dir).unwrap()).unwrap();
        assert!(trunc.is_none());
        assert_eq!(recs.len(), 4001);
        for t in 0..4u64 {
            let mine: Vec<u64> = recs
                .iter()
                .filter_map(|r| match r {
                    Record::ThreadCreated(c) if c.id == t => Some(c.ts),
                    _ => None,
                })
                .collect();
            assert_eq!(mine, (0..1000).collect::<Vec<_>>(), "per-thread order is kept");
        }
        let _ = std::fs::remove_file(&dir);

        // A sink that fails: emitting keeps working and drops are counted.
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let w = Writer::new(Sink::File(full), Duration::from_millis(5));
        // /dev/full fails the header write already.
        assert!(w.is_err());
    }

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("clrprof-writer-{name}-{}", std::process::id()))
    }

    fn created(ts: u64, id: u64) -> Record {
        ThreadCreated { ts, id }.into()
    }

    /// One tick that publishes far more than a buffer holds (a large call tree): the writer writes
    /// its own records out as they come, and none is dropped.
    #[test]
    fn a_tick_larger_than_a_buffer_loses_nothing() {
        let path = temp("big-tick");
        let w = Arc::new(
            Writer::for_test(Sink::File(std::fs::File::create(&path).unwrap()), Duration::from_millis(5), 1024)
                .unwrap(),
        );
        let done = Arc::new(AtomicBool::new(false));
        let d2 = Arc::clone(&done);
        w.add_tick(Box::new(move |w| {
            if !d2.swap(true, Ordering::AcqRel) {
                for i in 0..20_000u64 {
                    w.emit(&created(i, 7));
                }
            }
        }));
        w.start().unwrap();
        while !done.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        w.stop(|_| vec![]);
        assert_eq!(w.dropped_records.load(Ordering::Relaxed), 0);
        let (recs, trunc) = clrprof_trace::read_all(std::fs::File::open(&path).unwrap()).unwrap();
        assert!(trunc.is_none());
        let ts: Vec<u64> = recs
            .iter()
            .filter_map(|r| match r {
                Record::ThreadCreated(c) if c.id == 7 => Some(c.ts),
                _ => None,
            })
            .collect();
        assert_eq!(ts, (0..20_000).collect::<Vec<_>>(), "all, in order");
        let _ = std::fs::remove_file(&path);
    }

    /// Threads that fill their buffers faster than a slow writer drains them: in exact mode they
    /// wait for room and every record arrives; in sampled mode the excess is dropped and counted.
    #[test]
    fn full_buffers_wait_in_exact_mode_and_drop_in_sampled_mode() {
        for exact in [true, false] {
            let path = temp(&format!("full-{exact}"));
            let file = std::fs::File::create(&path).unwrap();
            // A writer that flushes every 200 ms only, with 4 KiB buffers.
            let w = Arc::new(Writer::for_test(Sink::File(file), Duration::from_millis(200), 4096).unwrap());
            w.set_exact(exact);
            w.start().unwrap();
            let per_thread = 20_000u64;
            let hs: Vec<_> = (0..3u64)
                .map(|t| {
                    let w = Arc::clone(&w);
                    std::thread::spawn(move || {
                        for i in 0..per_thread {
                            w.emit(&created(i, t));
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            w.stop(|_| vec![]);
            let (recs, _) = clrprof_trace::read_all(std::fs::File::open(&path).unwrap()).unwrap();
            let dropped = w.dropped_records.load(Ordering::Relaxed);
            if exact {
                assert_eq!(dropped, 0);
                assert_eq!(recs.len() as u64, 3 * per_thread);
                assert!(w.waits.load(Ordering::Relaxed) > 0, "the threads had to wait");
            } else {
                assert!(dropped > 0, "sampled mode drops");
                assert_eq!(recs.len() as u64 + dropped, 3 * per_thread, "and counts what it drops");
                assert_eq!(w.waits.load(Ordering::Relaxed), 0);
            }
            let _ = std::fs::remove_file(&path);
        }
    }

    /// A thread about to die asks for an urgent round: the ticks publish everything (as at the
    /// end) and every buffer reaches the file before the call returns, long before the next flush.
    #[test]
    fn an_urgent_round_writes_everything_before_returning() {
        let path = temp("urgent");
        let file = std::fs::File::create(&path).unwrap();
        let w = Arc::new(Writer::for_test(Sink::File(file), Duration::from_secs(60), THREAD_BUFFER_CAP).unwrap());
        w.add_tick(Box::new(|w| {
            if w.wants_everything() {
                w.emit(&created(2, 2));
            }
        }));
        w.start().unwrap();
        // Let the first round pass, then emit: the next regular flush is a minute away.
        std::thread::sleep(Duration::from_millis(50));
        w.emit(&created(1, 1));
        assert!(w.flush_urgently(Duration::from_secs(5)));
        let (recs, _) = clrprof_trace::read_all(std::fs::File::open(&path).unwrap()).unwrap();
        assert!(recs.contains(&created(1, 1)), "the thread's own buffer: {recs:?}");
        assert!(recs.contains(&created(2, 2)), "what the ticks publish at the end: {recs:?}");
        w.stop(|_| vec![]);
        let _ = std::fs::remove_file(&path);
    }

    /// A collector that takes the hello and `keep` bytes of trace, then vanishes: the writer goes on
    /// into the local file, which starts with the header and the definitions sent before.
    #[test]
    fn a_collector_gone_mid_run_leaves_a_local_file_readable_on_its_own() {
        use clrprof_trace::wire::{self, Hello};
        use clrprof_trace::{CpuSample, ProcessStart, ThreadNamed};
        use std::io::Read;
        let start: Record = ProcessStart { pid: 9, ..Default::default() }.into();
        let named: Record = ThreadNamed { ts: 1, id: 1, name: "main".into() }.into();
        let sample: Record = CpuSample { ts: 2, os_tid: 1, stack: 0, count: 1, cpu_ns: 10, activity: 0 }.into();
        // The collector takes the header and the first two blocks, then vanishes.
        let sent =
            16 + clrprof_trace::encode_records([&start]).len() + clrprof_trace::encode_records([&named, &sample]).len();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let h = Hello::read(&mut s).unwrap();
            s.write_all(&wire::encode_answer(wire::status::ACCEPTED, 5)).unwrap();
            let mut got = vec![0u8; sent];
            s.read_exact(&mut got).unwrap();
            (h, got)
        });
        let path = std::env::temp_dir().join(format!("clrprof-fallback-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let p2 = path.clone();
        let hello = Hello { host: "h".into(), pid: 9, command: "app".into(), ..Default::default() };
        let remote = Remote::connect(
            &addr,
            &TlsFiles::default(),
            &hello,
            Box::new(move || Ok((std::fs::File::create(&p2)?, p2.display().to_string()))),
        )
        .unwrap();
        let w = Writer::new(Sink::Remote(remote), Duration::from_secs(60)).unwrap();
        w.write_now(std::slice::from_ref(&start));
        w.emit(&named);
        w.emit(&sample);
        w.flush();
        let (h, got) = server.join().unwrap();
        assert_eq!((h.pid, h.command.as_str()), (9, "app"));
        let (recs, _) = clrprof_trace::read_all(&got[..]).unwrap();
        assert_eq!(recs, vec![start, named, sample], "the trace follows the hello");
        // The collector is gone: keep writing until the socket reports it.
        for i in 0..200u64 {
            w.emit(&CpuSample { ts: 10 + i, os_tid: 1, stack: 0, count: 1, cpu_ns: 10, activity: 0 }.into());
            w.flush();
            if path.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        w.stop(|_| vec![]);
        let (recs, trunc) = clrprof_trace::read_all(std::fs::File::open(&path).unwrap()).unwrap();
        assert!(trunc.is_none());
        // Definitions first (process, thread name), never the samples sent before the cut.
        assert!(matches!(&recs[0], Record::ProcessStart(p) if p.pid == 9), "{recs:?}");
        assert!(matches!(&recs[1], Record::ThreadNamed(t) if t.name == "main"), "{recs:?}");
        assert!(!recs.iter().any(|r| matches!(r, Record::CpuSample(c) if c.ts == 2)));
        assert!(recs.iter().any(|r| matches!(r, Record::CpuSample(_))), "the rest of the run is in the file");
        let _ = std::fs::remove_file(&path);
    }

    /// A node record of `n` nodes (20 bytes a node).
    fn nodes(first: u32, n: u32) -> Record {
        clrprof_trace::CallTreeNodes {
            os_tid: 7,
            first,
            parents: (0..n).collect(),
            functions: vec![1; n as usize],
            tree: 1,
            sites: vec![2; n as usize],
        }
        .into()
    }

    /// A tick of large records (a call tree's first publication): blocks of whole records, none
    /// over BLOCK_TARGET unless one record alone, in order, and a small record after one that did
    /// not fit goes in the next block, not past it.
    #[test]
    fn a_tick_of_large_records_is_written_in_blocks_of_whole_records() {
        let path = temp("large-records");
        let w =
            Arc::new(Writer::new(Sink::File(std::fs::File::create(&path).unwrap()), Duration::from_millis(5)).unwrap());
        // 1 MB, 3.5 MB, 5 KB, 5 MB (alone), 5 KB: records of 20-byte nodes plus their heads.
        let sizes = [50_000u32, 175_000, 250, 250_000, 250];
        let done = Arc::new(AtomicBool::new(false));
        let d2 = Arc::clone(&done);
        w.add_tick(Box::new(move |w| {
            if !d2.swap(true, Ordering::AcqRel) {
                let mut first = 0;
                for n in sizes {
                    w.emit(&nodes(first, n));
                    first += n;
                }
            }
        }));
        w.start().unwrap();
        while !done.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        w.stop(|_| vec![]);
        let bytes = std::fs::read(&path).unwrap();
        let mut pos = clrprof_trace::HEADER_LEN;
        let mut blocks: Vec<Vec<u32>> = Vec::new();
        while pos < bytes.len() {
            let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
            let payload = &bytes[pos + 8..pos + 8 + len];
            let mut firsts = Vec::new();
            clrprof_trace::decode_payload_each(payload, |r| {
                if let Record::CallTreeNodes(n) = r {
                    firsts.push(n.parents.len() as u32);
                }
            })
            .unwrap();
            assert!(len <= BLOCK_TARGET || firsts.len() == 1, "a block of {len} bytes holds {firsts:?}");
            if !firsts.is_empty() {
                blocks.push(firsts);
            }
            pos += 8 + len;
        }
        assert_eq!(blocks, vec![vec![50_000], vec![175_000, 250], vec![250_000], vec![250]]);
        let _ = std::fs::remove_file(&path);
    }
}
