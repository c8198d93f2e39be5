//! The collector against agent-like streams (the real agent is tested end to end in
//! crates/clrprof/tests/e2e/collect.rs): runs stored block by block, observers, tokens, limits, damage.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use clrprof_collect::{Collector, RunId, RunInfo, RunObserver, RunState, RunStore, SqliteStore};
use clrprof_trace::wire::{self, Hello};
use clrprof_trace::{encode_records, header, AgentStop, Message, ProcessStart, Record};

fn temp_db(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("clrprof-collect-{name}-{}.db", std::process::id()));
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", p.display()));
    }
    p
}

#[derive(Default)]
struct Seen {
    events: Mutex<Vec<String>>,
    data: Mutex<std::collections::HashMap<RunId, Vec<u8>>>,
}

impl RunObserver for Seen {
    fn run_started(&self, run: &RunInfo) {
        self.events.lock().unwrap().push(format!("start {} {}", run.id, run.pid));
    }
    fn run_data(&self, run: RunId, bytes: &[u8]) {
        self.data.lock().unwrap().entry(run).or_default().extend_from_slice(bytes);
    }
    fn run_ended(&self, run: RunId, complete: bool) {
        self.events.lock().unwrap().push(format!("end {run} {complete}"));
    }
}

fn hello(pid: u32, token: &str) -> Hello {
    Hello {
        kind: wire::kind::RUN,
        token: token.into(),
        host: "test-host".into(),
        pid,
        start_unix_ns: 1,
        command: format!("dotnet app{pid}.dll"),
        runtime: "10.0.0".into(),
        exit_code: 0,
        flags: 0,
    }
}

/// Connects and sends the hello; returns the stream and the answer.
fn open(addr: std::net::SocketAddr, h: &Hello) -> (TcpStream, u8, u64) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&h.encode()).unwrap();
    let mut a = [0u8; 9];
    s.read_exact(&mut a).unwrap();
    let (st, id) = wire::decode_answer(&a);
    (s, st, id)
}

fn trace(pid: u32, blocks: usize, stop: bool) -> Vec<u8> {
    let mut t = header().to_vec();
    t.extend(encode_records(&[ProcessStart { pid, command_line: "app".into(), ..Default::default() }.into()]));
    for i in 0..blocks {
        t.extend(encode_records(&[
            Message { ts: i as u64, level: 0, text: format!("block {i} {}", "x".repeat(100)) }.into()
        ]));
    }
    if stop {
        t.extend(encode_records(&[AgentStop { ts: 99, ..Default::default() }.into()]));
    }
    t
}

fn wait_ended(store: &dyn RunStore, id: RunId) -> RunInfo {
    for _ in 0..500 {
        let r = store.get(id).unwrap().unwrap();
        if r.state != RunState::Running {
            return r;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("run {id} never ended");
}

/// `collect --trigger`: the settings go to agents that say they take them (status 4, then the
/// text), never to older ones (status 0, nothing after the answer).
#[test]
fn settings_go_only_to_agents_that_take_them() {
    let db = temp_db("settings");
    let store: Arc<dyn RunStore> = Arc::new(SqliteStore::open(&db).unwrap());
    let c = Collector::builder()
        .listen("127.0.0.1:0")
        .agent_settings(Some("CLRPROF_TRIGGER=gc-pause>50ms\n".into()))
        .store(Arc::clone(&store))
        .log(Arc::new(|_: &str| {}))
        .build()
        .unwrap()
        .spawn();
    let (mut s, st, _) = open(c.addr, &Hello { flags: wire::flags::TAKES_SETTINGS, ..hello(21, "") });
    assert_eq!(st, wire::status::ACCEPTED_WITH_SETTINGS);
    assert_eq!(wire::read_settings(&mut s).unwrap(), "CLRPROF_TRIGGER=gc-pause>50ms\n");
    s.write_all(&trace(21, 1, true)).unwrap();
    drop(s);
    let (mut old, st, _) = open(c.addr, &hello(22, ""));
    assert_eq!(st, wire::status::ACCEPTED);
    old.write_all(&trace(22, 1, true)).unwrap();
    old.set_read_timeout(Some(std::time::Duration::from_millis(200))).unwrap();
    let mut b = [0u8; 1];
    assert!(!matches!(old.read(&mut b), Ok(1)), "bytes after an old agent's answer");
}

#[test]
fn streams_are_stored_observed_limited_and_checked() {
    let db = temp_db("main");
    let store: Arc<dyn RunStore> = Arc::new(SqliteStore::open(&db).unwrap());
    let seen = Arc::new(Seen::default());
    let logs = Arc::new(Mutex::new(Vec::<String>::new()));
    let l2 = Arc::clone(&logs);
    let c = Collector::builder()
        .listen("127.0.0.1:0")
        .token(Some("right".into()))
        .max_run_bytes(2000)
        .store(Arc::clone(&store))
        .observer(seen.clone())
        .log(Arc::new(move |m: &str| l2.lock().unwrap().push(m.to_string())))
        .build()
        .unwrap()
        .spawn();

    // A good run, sent in awkward pieces: stored whole, complete, observed byte for byte.
    let t = trace(11, 5, true);
    let (mut s, st, id) = open(c.addr, &hello(11, "right"));
    assert_eq!(st, wire::status::ACCEPTED);
    // Meanwhile a malformed stream on another connection is dropped without disturbing it.
    let (mut bad, st2, bad_id) = open(c.addr, &hello(12, "right"));
    assert_eq!(st2, wire::status::ACCEPTED);
    let mut garbage = trace(12, 1, false);
    let good_len = garbage.len();
    garbage.extend_from_slice(&[0xff; 64]);
    bad.write_all(&garbage).unwrap();
    for piece in t.chunks(7) {
        s.write_all(piece).unwrap();
    }
    drop(s);
    let r = wait_ended(store.as_ref(), RunId(id as i64));
    assert_eq!((r.state, r.complete, r.bytes, r.pid), (RunState::Complete, true, t.len() as u64, 11));
    assert_eq!(r.command, "dotnet app11.dll");
    assert_eq!(r.runtime.as_deref(), Some("10.0.0"));
    assert_eq!(store.read(r.id, 0).unwrap(), t);
    assert_eq!(store.read(r.id, 20).unwrap(), t[20..]);
    let b = wait_ended(store.as_ref(), RunId(bad_id as i64));
    assert_eq!(b.state, RunState::CutOff);
    assert!(b.reason.as_deref().unwrap().contains("malformed"), "{b:?}");
    assert_eq!(store.read(b.id, 0).unwrap(), garbage[..good_len], "whole blocks before the damage are kept");
    let (recs, trunc) = clrprof_trace::read_all(&store.read(b.id, 0).unwrap()[..]).unwrap();
    assert!(trunc.is_none() && recs.len() == 2);

    // Oversized: cut at the last whole block within the limit, readable.
    let big = trace(13, 40, true);
    let (mut s, _, big_id) = open(c.addr, &hello(13, "right"));
    let _ = s.write_all(&big);
    drop(s);
    let r = wait_ended(store.as_ref(), RunId(big_id as i64));
    assert_eq!(r.state, RunState::CutOff);
    assert!(r.bytes <= 2000 && r.bytes > 1500, "{r:?}");
    assert!(r.reason.as_deref().unwrap().contains("size limit"));
    let (recs, trunc) = clrprof_trace::read_all(&store.read(r.id, 0).unwrap()[..]).unwrap();
    assert!(trunc.is_none());
    assert!(matches!(recs[0], Record::ProcessStart(_)) && recs.len() > 10);

    // Wrong token: answered and closed before anything is stored.
    let before = store.list().unwrap().len();
    let (mut s, st, _) = open(c.addr, &hello(14, "wrong"));
    assert_eq!(st, wire::status::BAD_TOKEN);
    let _ = s.write_all(&trace(14, 1, true));
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty());
    // A foreign client (an HTTP request) is dropped too.
    let mut h = TcpStream::connect(c.addr).unwrap();
    h.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = h.read_to_end(&mut rest);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(store.list().unwrap().len(), before);
    let logs = logs.lock().unwrap().join("\n");
    assert!(logs.contains("wrong or missing token") && logs.contains("bad magic"), "{logs}");

    // Observers saw the good run's bytes (plus the others'), and starts and ends in order.
    let ev = seen.events.lock().unwrap().clone();
    assert!(ev.contains(&format!("start {id} 11")) && ev.contains(&format!("end {id} true")), "{ev:?}");
    assert!(ev.contains(&format!("end {bad_id} false")));
    let data = seen.data.lock().unwrap().clone();
    assert_eq!(data.len(), 3);
    for (run, bytes) in &data {
        assert_eq!(bytes, &store.read(*run, 0).unwrap(), "observers see exactly what is stored");
    }
    assert_eq!(data[&RunId(id as i64)], t);
    let _ = std::fs::remove_file(&db);
}

#[test]
fn a_restarted_collector_keeps_runs_and_marks_open_ones_cut_off() {
    let db = temp_db("restart");
    let store: Arc<dyn RunStore> = Arc::new(SqliteStore::open(&db).unwrap());
    let c = Collector::builder().listen("127.0.0.1:0").store(Arc::clone(&store)).build().unwrap();
    let addr = c.local_addr();
    let c = c.spawn();
    let (mut s, _, done) = open(c.addr, &hello(21, ""));
    s.write_all(&trace(21, 2, true)).unwrap();
    drop(s);
    wait_ended(store.as_ref(), RunId(done as i64));
    let (mut s, _, open_id) = open(c.addr, &hello(22, ""));
    let partial = trace(22, 2, false);
    s.write_all(&partial).unwrap();
    // Wait until it is stored, then "restart": a new store handle and a collector on the same port
    // identity recovers the run left open (the old one still holds the port, so recover directly).
    for _ in 0..200 {
        if store.get(RunId(open_id as i64)).unwrap().unwrap().bytes == partial.len() as u64 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // A live reader follows the open run: what was stored so far, then nothing new.
    let mut tail = clrprof_collect::RunTail::new(Arc::clone(&store), RunId(open_id as i64));
    let (first, info) = tail.poll().unwrap();
    assert_eq!((first, info.unwrap().state), (partial.clone(), RunState::Running));
    assert!(tail.poll().unwrap().0.is_empty());
    let again = SqliteStore::open(&db).unwrap();
    let identity = format!("{}:{}", clrprof_collect::hostname(), addr.port());
    assert_eq!(again.recover(&identity).unwrap(), 1);
    let runs = again.list().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].state, RunState::Complete);
    assert_eq!(runs[1].state, RunState::CutOff);
    let (recs, _) = clrprof_trace::read_all(&again.read(runs[1].id, 0).unwrap()[..]).unwrap();
    assert_eq!(recs.len(), 3, "readable up to the cut");
    drop(s);
    let _ = std::fs::remove_file(&db);
}
