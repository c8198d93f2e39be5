//! `clrprof collect --otlp`: a real .NET program streams into the collector, which pushes its
//! profiles every interval as OTLP/HTTP requests to a loopback receiver standing in for an OTLP
//! backend; every body is decoded by Debian's `protoc --decode` on the schema written from the
//! pinned specification. Checked: the path, content type and headers of the requests, the
//! resource (service and labels), and that the windows add up to the stored run's own export.

use crate::common::otlp::{decode, summarize};
use crate::common::*;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::pyroscope::support::receiver;

/// Sends SIGTERM to a child and waits for it.
fn terminate(c: &mut std::process::Child) -> std::process::ExitStatus {
    // Safety: kill(2) on the pid of a child this test started and has not reaped.
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    c.wait().unwrap()
}

/// A started `clrprof collect` with its stderr lines as they come.
pub struct Collector {
    pub child: std::process::Child,
    pub listen: String,
    pub lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Collector {
    pub fn start(dir: &std::path::Path, args: &[&str]) -> Collector {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let listen = format!("127.0.0.1:{port}");
        let mut child = Command::new(clrprof_exe())
            .args(["collect", "--listen", &listen, "--store"])
            .arg(dir.join("runs.db"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let l = lines.clone();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        let t = std::time::Instant::now();
        while !lines.lock().unwrap().iter().any(|l| l.contains("listening on")) {
            if let Some(s) = child.try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(100));
                panic!("the collector exited ({s}): {lines:?}");
            }
            assert!(t.elapsed() < Duration::from_secs(30), "the collector did not start: {lines:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Collector { child, listen, lines, reader: Some(reader) }
    }

    /// Stops it (SIGTERM) and returns all its lines.
    pub fn stop(mut self) -> Vec<String> {
        let status = terminate(&mut self.child);
        assert!(status.success(), "{status:?}");
        self.reader.take().unwrap().join().unwrap();
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stored run's OTLP export, summarized.
pub fn stored_run(dir: &std::path::Path) -> crate::common::otlp::Summary {
    let whole = dir.join("whole.otlp.pb");
    let out = Command::new(clrprof_exe())
        .args(["export", "run:latest", "--store"])
        .arg(dir.join("runs.db"))
        .args(["-f", "otlp", "--no-native-symbols", "-o"])
        .arg(&whole)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    summarize(&decode(&std::fs::read(&whole).unwrap()))
}

#[test]
fn collect_pushes_otlp_profiles_that_add_up_to_the_stored_run() {
    let _machine = machine::shared();
    let dir = scratch("otlp-collect");
    let (rport, got) = receiver();
    let c = Collector::start(
        &dir,
        &[
            "--otlp",
            &format!("http://127.0.0.1:{rport}"),
            "--otlp-header",
            "Authorization: Bearer t0k3n",
            "--otlp-header",
            "X-Scope-OrgID: tenant-1",
            "--interval",
            "1s",
        ],
    );
    assert!(c.lines.lock().unwrap()[0].contains("pushing OTLP profiles to http://127.0.0.1:"), "{:?}", c.lines);
    let out = Command::new(clrprof_exe())
        .args(["record", "--server", &c.listen, "--agent"])
        .arg(agent_path())
        .args(["--", "dotnet"])
        .arg(app_dll("Sampling"))
        .args(["ratio", "1500"])
        .env("CLRPROF_SERVICE", "orders")
        .env("CLRPROF_LABELS", "env=ci")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "record failed: {}", text(&out.stderr));
    // The run's end is pushed as soon as the collector sees it end.
    let t = std::time::Instant::now();
    while !c.lines.lock().unwrap().iter().any(|l| l.contains("ended") || l.contains("complete"))
        || got.lock().unwrap().is_empty()
    {
        assert!(t.elapsed() < Duration::from_secs(90), "no OTLP request arrived: {:?}", c.lines);
        std::thread::sleep(Duration::from_millis(100));
    }
    let lines = c.stop();
    let summary = lines
        .iter()
        .find(|l| l.contains("otlp:") && l.contains("profiles sent"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(summary.contains(" 0 dropped, 0 failed"), "{summary}");
    let got = got.lock().unwrap();
    let (mut samples, mut cpu) = (0i64, 0i64);
    for (line, head, body) in got.iter() {
        assert_eq!(line, "POST /v1development/profiles HTTP/1.1");
        let head = head.to_ascii_lowercase();
        assert!(head.contains("content-type: application/x-protobuf\r\n"), "{head}");
        assert!(
            head.contains("authorization: bearer t0k3n\r\n") && head.contains("x-scope-orgid: tenant-1\r\n"),
            "{head}"
        );
        let s = summarize(&decode(body));
        assert!(s.resource.contains(&("service.name".into(), "orders".into())), "{:?}", s.resource);
        assert!(s.resource.contains(&("env".into(), "ci".into())), "{:?}", s.resource);
        samples += s.types.get("samples").map_or(0, |t| t.2);
        cpu += s.types.get("cpu").map_or(0, |t| t.2);
    }
    // Nothing lost on the way: the windows add up to the stored run's export.
    let whole = stored_run(&dir);
    assert!(whole.types["samples"].2 > 0);
    assert_eq!(samples, whole.types["samples"].2, "cpu samples pushed against the stored run's");
    assert_eq!(cpu, whole.types["cpu"].2, "cpu time pushed against the stored run's");
    let _ = std::fs::remove_dir_all(dir);
}
