//! TLS end to end with a throwaway CA made by the `openssl` CLI at test time: a real .NET program
//! (apps/Calls under `--instrument`, exact call counts) streams to `collect --tls-cert/--tls-key`
//! over `tls://` and is stored with the same counts as over plain TCP; an agent trusting another CA
//! is refused with a clear log line and the app runs on (its file written instead); mutual TLS
//! refuses an agent without a client certificate; the Pyroscope push reaches an HTTPS receiver of a
//! private CA with `--tls-ca`, and names the certificate problem when the CA is wrong.

use crate::common::*;
use crate::pyroscope::support::read_request;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The files of a throwaway PKI in `dir`.
struct Pki {
    ca: PathBuf,
    other_ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("the `openssl` command");
    assert!(out.status.success(), "openssl {args:?}: {}", text(&out.stderr));
}

/// A CA, another CA, a server certificate for localhost/127.0.0.1 and a client certificate, all
/// P-256, valid for a day.
fn pki(dir: &Path) -> Pki {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    for (name, cn) in [("ca", "clrprof test CA"), ("other", "another CA")] {
        let (key, pem, subj) = (format!("{name}.key"), format!("{name}.pem"), format!("/CN={cn}"));
        let mut a = vec!["req", "-x509"];
        a.extend(ec);
        a.extend(["-keyout", &key, "-out", &pem, "-days", "1", "-subj", &subj]);
        openssl(dir, &a);
    }
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.ext"), "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n").unwrap();
    for (name, cn) in [("server", "localhost"), ("client", "agent")] {
        let (key, csr, pem, ext, subj) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
            format!("/CN={cn}"),
        );
        let mut a = vec!["req"];
        a.extend(ec);
        a.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl(dir, &a);
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "1",
                "-extfile",
                &ext,
            ],
        );
    }
    Pki {
        ca: dir.join("ca.pem"),
        other_ca: dir.join("other.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client.key"),
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The exact call counts of apps/Calls' own functions under `--instrument` (the runtime's own
/// methods vary from run to run with timing).
const EXACT: [(&str, u64); 10] = [
    ("Calls.Counted.Tick", 1000),
    ("Calls.Counted.Run", 1),
    ("Calls.Recursion.Fib", 21891),
    ("Calls.Exceptions.Level3", 50),
    ("Calls.ProbeException.get_Depth", 50),
    ("Calls.Shape.Describe", 200),
    ("Calls.Generic.Identity<__Canon>", 100),
    ("Calls.Shared.Work", 10_000),
    ("Calls.AsyncWork.Step", 10),
    ("Calls.Spin.For", 1),
];

/// The calls of [`EXACT`]'s functions in a report.
fn all_calls(v: &serde_json::Value) -> Vec<(String, u64)> {
    EXACT.iter().map(|(f, _)| (f.to_string(), calls(v, f))).collect()
}

fn stored(store: &str) -> serde_json::Value {
    let out = Command::new(clrprof_exe())
        .args(["report", "run:latest", "--store", store, "--format", "json", "--no-native-symbols"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn an_agent_streams_over_tls_and_its_run_is_stored_as_over_tcp() {
    let _machine = machine::shared();
    let dir = scratch("tls-stream");
    let pki = pki(&dir);

    // Over plain TCP first: the reference counts.
    let plain_store = dir.join("plain.db").to_string_lossy().into_owned();
    let c = Collector::start(&plain_store, "127.0.0.1:0", &[]);
    let out = record("Calls", &[], &dir.join("plain.clrprof"), &["--instrument", "--server", &c.addr]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait_for("complete");
    let plain = all_calls(&stored(&plain_store));
    assert_eq!(plain, EXACT.iter().map(|(f, n)| (f.to_string(), *n)).collect::<Vec<_>>());
    drop(c);

    // Over TLS: the same calls, function by function; nothing written locally.
    let store = dir.join("tls.db").to_string_lossy().into_owned();
    let c =
        Collector::start(&store, "127.0.0.1:0", &["--tls-cert", s(&pki.server_cert), "--tls-key", s(&pki.server_key)]);
    assert!(c.log().contains("(TLS)"), "{}", c.log());
    let server = format!("tls://localhost:{}", c.port());
    let local = dir.join("tls.clrprof");
    let log = dir.join("agent.log");
    let out =
        record("Calls", &[], &local, &["--instrument", "--server", &server, "--tls-ca", s(&pki.ca), "--log", s(&log)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait_for("complete");
    assert!(std::fs::read_to_string(&log).unwrap().contains("over TLS as run 1"));
    assert_eq!(all_calls(&stored(&store)), plain, "calls over TLS against plain TCP");
    assert!(!local.exists(), "streamed, no local file");
    assert!(
        text(&out.stderr).contains("run 1 streamed to the collector"),
        "the exit notice went over TLS too: {}",
        text(&out.stderr)
    );

    // An agent trusting another CA: refused, said in the agent's log; the app runs on and its
    // trace is written locally with the same counts.
    let local = dir.join("wrong-ca.clrprof");
    let log = dir.join("wrong-ca.log");
    let out = record(
        "Calls",
        &[],
        &local,
        &["--instrument", "--server", &server, "--tls-ca", s(&pki.other_ca), "--log", s(&log)],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let l = std::fs::read_to_string(&log).unwrap();
    assert!(
        l.contains("unreachable (TLS handshake failed: invalid peer certificate") && l.contains("UnknownIssuer"),
        "{l}"
    );
    assert!(text(&out.stdout).lines().all(|x| !x.contains("TLS")), "nothing on the app's stdout");
    assert_eq!(all_calls(&report_json(&local)), plain);
    c.wait_for("dropped");
    drop(c);

    // Mutual TLS: without a client certificate refused; with one signed by the CA, stored.
    let store = dir.join("mtls.db").to_string_lossy().into_owned();
    let c = Collector::start(
        &store,
        "127.0.0.1:0",
        &["--tls-cert", s(&pki.server_cert), "--tls-key", s(&pki.server_key), "--tls-client-ca", s(&pki.ca)],
    );
    let server = format!("tls://localhost:{}", c.port());
    let local = dir.join("no-cert.clrprof");
    let out = record("Calls", &[], &local, &["--instrument", "--server", &server, "--tls-ca", s(&pki.ca)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait_for("dropped");
    assert!(local.exists(), "refused without a client certificate: the file is written");
    let local = dir.join("cert.clrprof");
    let tls = ["--tls-ca", s(&pki.ca), "--tls-cert", s(&pki.client_cert), "--tls-key", s(&pki.client_key)];
    let mut extra = vec!["--instrument", "--server", &server];
    extra.extend(tls);
    let out = record("Calls", &[], &local, &extra);
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait_for("complete");
    assert_eq!(all_calls(&stored(&store)), plain);
    assert!(!local.exists());
    let _ = std::fs::remove_dir_all(dir);
}

/// Requests received: (head, body).
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An HTTPS receiver on loopback with the PKI's server certificate, answering 200.
fn https_receiver(pki: &Pki) -> (u16, Received) {
    let cfg = clrprof_collect::tls::server_config(&pki.server_cert, &pki.server_key, None).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let got: Received = Arc::default();
    let g = got.clone();
    std::thread::spawn(move || {
        for tcp in l.incoming() {
            let Ok(tcp) = tcp else { continue };
            let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
            let mut s = rustls::StreamOwned::new(rustls::ServerConnection::new(cfg.clone()).unwrap(), tcp);
            if let Some((_, head, body)) = read_request(&mut s) {
                let r = (head, body);
                g.lock().unwrap().push(r);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                let _ = s.flush();
                s.conn.send_close_notify();
                let _ = s.flush();
            }
        }
    });
    (port, got)
}

#[test]
fn pyroscope_pushes_over_https_to_a_private_ca() {
    let _machine = machine::shared();
    let dir = scratch("tls-pyroscope");
    let pki = pki(&dir);
    let (port, got) = https_receiver(&pki);
    let url = format!("https://localhost:{port}");
    for (ca, ok) in [(&pki.ca, true), (&pki.other_ca, false)] {
        let store = dir.join(if ok { "ok.db" } else { "bad.db" }).to_string_lossy().into_owned();
        let c = Collector::start(
            &store,
            "127.0.0.1:0",
            &["--pyroscope", &url, "--pyroscope-token", "tenant:secret", "--tls-ca", s(ca), "--interval", "1s"],
        );
        let out = record("Sampling", &["ratio", "600"], &dir.join("x.clrprof"), &["--server", &c.addr]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        c.wait_for("complete");
        if ok {
            // The run's last window goes out when it ends.
            let t = std::time::Instant::now();
            while got.lock().unwrap().is_empty() {
                assert!(t.elapsed() < Duration::from_secs(30), "nothing pushed: {}", c.log());
                std::thread::sleep(Duration::from_millis(50));
            }
            let g = got.lock().unwrap();
            for (head, body) in g.iter() {
                assert!(head.starts_with("POST /ingest?name=Sampling.") && head.contains("format=pprof"), "{head}");
                assert!(head.contains("Authorization: Basic dGVuYW50OnNlY3JldA==\r\n"), "{head}");
                assert_eq!(&body[..2], &[0x1f, 0x8b], "a gzip-compressed pprof body");
            }
            assert!(g.iter().any(|r| r.0.contains("name=Sampling.cpu")), "a CPU profile arrived");
        } else {
            let n = got.lock().unwrap().len();
            c.wait_for("given up");
            let log = c.log();
            assert!(log.contains("invalid peer certificate") && log.contains("UnknownIssuer"), "{log}");
            assert_eq!(got.lock().unwrap().len(), n, "nothing reached the receiver with the wrong CA");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}
