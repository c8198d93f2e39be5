//! Per-thread record buffers and the one writer thread that streams them to the sink.
//!
//! A thread encodes records into its own buffer (a mutex only the writer ever contends for). Every
//! flush interval the writer swaps each buffer out, frames the bytes as one block and writes it, so
//! a crash loses at most one interval. If the sink fails (disk full, collector gone) the agent keeps
//! running: data is dropped and counted.

use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use clrprof_trace::{encode_block, Record};

/// Bytes a thread may hold before the writer drains it; beyond this, records are dropped.
const THREAD_BUFFER_CAP: usize = 32 << 20;
/// Largest block written at once.
const BLOCK_TARGET: usize = 4 << 20;

struct ThreadBuf {
    data: Mutex<Vec<u8>>,
}

/// Where blocks go.
pub enum Sink {
    File(std::fs::File),
    Tcp(std::net::TcpStream),
}

impl Sink {
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::File(f) => f.write_all(b),
            Sink::Tcp(s) => s.write_all(b),
        }
    }
}

/// Work the writer thread runs before each flush.
pub type Tick = Box<dyn Fn(&Writer) + Send + Sync>;

pub struct Writer {
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
}

/// How long after start-up the writer flushes every [`EARLY_FLUSH`] at most.
const EARLY: Duration = Duration::from_secs(2);
const EARLY_FLUSH: Duration = Duration::from_millis(5);

thread_local! {
    static LOCAL: RefCell<Option<Arc<ThreadBuf>>> = const { RefCell::new(None) };
}

impl Writer {
    /// Writes the header synchronously and returns a writer that is not yet flushing.
    pub fn new(mut sink: Sink, flush_interval: Duration) -> std::io::Result<Writer> {
        sink.write_all(&clrprof_trace::header())?;
        Ok(Writer {
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
        })
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
            let buf = slot.get_or_insert_with(|| {
                let b = Arc::new(ThreadBuf { data: Mutex::new(Vec::with_capacity(4096)) });
                if let Ok(mut all) = self.buffers.lock() {
                    all.push(Arc::clone(&b));
                }
                b
            });
            self.append(&buf.data, record);
        });
        if done.is_err() {
            self.append(&self.orphan, record);
        }
    }

    fn append(&self, data: &Mutex<Vec<u8>>, record: &Record) {
        if let Ok(mut d) = data.lock() {
            if d.len() >= THREAD_BUFFER_CAP {
                self.dropped_records.fetch_add(1, Ordering::Relaxed);
                return;
            }
            record.encode(&mut d);
            self.records.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn run(&self) {
        loop {
            let stop = self.stopping.load(Ordering::Acquire);
            if let Ok(ticks) = self.ticks.lock() {
                for t in ticks.iter() {
                    t(self);
                }
            }
            self.flush();
            if stop {
                break;
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
                let _ = self.wake.wait_timeout(g, interval);
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
                self.write_block(&payload);
                payload.clear();
            }
        }
        take(&self.orphan, &mut payload);
        if !payload.is_empty() {
            self.write_block(&payload);
        }
    }

    fn write_block(&self, payload: &[u8]) {
        if payload.is_empty() {
            return;
        }
        let block = encode_block(payload);
        let Ok(mut sink) = self.sink.lock() else { return };
        let ok = match sink.as_mut() {
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
            if let Some(Sink::File(f)) = s.as_mut() {
                let _ = f.flush();
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
}
