//! Test support shared by the pusher's tests, the CLI's end-to-end Pyroscope test and
//! `bench/push.rs` (included with `#[path]`): a loopback receiver standing in for Pyroscope, and
//! the replay of a recorded trace as a longer live run.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use clrprof_trace::Record;

/// Requests received: (request line, head, body).
pub type Received = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// Reads one HTTP request from any stream (plain or TLS): its request line, whole head and body
/// (by Content-Length).
pub fn read_request(s: &mut impl Read) -> Option<(String, String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = head.lines().next().unwrap_or("").to_string();
    Some((line, head, buf[head_end..head_end + len].to_vec()))
}

/// A loopback receiver answering 200 to every request, keeping what it got.
pub fn receiver() -> (u16, Received) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let got: Received = Arc::default();
    let g = got.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let mut s = s.unwrap();
            if let Some(r) = read_request(&mut s) {
                g.lock().unwrap().push(r);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            }
        }
    });
    (port, got)
}

/// Moves a per-sample or per-event record `d` later; false for the others (definitions, names),
/// which a replay sends once.
pub fn shift(r: &mut Record, d: u64) -> bool {
    use Record as R;
    let ts = match r {
        R::CpuSample(x) => &mut x.ts,
        R::WallSample(x) => &mut x.ts,
        R::ExceptionThrown(x) => &mut x.ts,
        R::ExceptionPhase(x) => &mut x.ts,
        R::ExceptionCaught(x) => &mut x.ts,
        R::GcStarted(x) => &mut x.ts,
        R::GcFinished(x) => &mut x.ts,
        R::GcInfo(x) => &mut x.ts,
        R::GcEnd(x) => &mut x.ts,
        R::RuntimeSuspended(x) => &mut x.ts,
        R::RuntimeResumed(x) => &mut x.ts,
        R::AllocationCounts(x) => &mut x.ts,
        R::AllocationSample(x) => &mut x.ts,
        R::ContentionStarted(x) => &mut x.ts,
        R::ContentionEnded(x) => &mut x.ts,
        R::ContentionCounts(x) => &mut x.ts,
        R::ExceptionCounts(x) => &mut x.ts,
        R::AllocationSamples(x) => &mut x.ts,
        R::CallTreeDelta(x) => &mut x.ts,
        R::CallTreeCosts(x) => &mut x.ts,
        _ => return false,
    };
    *ts += d;
    true
}

/// Records a replay leaves out: the run goes on (no end), and the runtime's cumulative throw
/// count would go backwards when repeated.
pub fn replay_skips(r: &Record) -> bool {
    matches!(
        r,
        Record::ProcessExit(_) | Record::AgentStop(_) | Record::ExceptionMonitoring(_) | Record::ExceptionCount(_)
    )
}
