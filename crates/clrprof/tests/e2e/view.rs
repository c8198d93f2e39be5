//! `clrprof view` without a browser: the real command serving real traces (testdata/traces/v1),
//! driven through its JSON API as the page drives it. The token is enforced, answers carry the
//! CSP, figures equal the report's and the exact call counts of apps/Calls, transforms and time
//! ranges change them exactly, hostile names come back verbatim, bad requests get one-line errors.

use crate::common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// A running `clrprof view --no-browser`; killed when dropped (also driven by `heap_views`).
pub(crate) struct Viewer {
    _child: KillOnDrop,
    /// `127.0.0.1:PORT`
    host: String,
    token: String,
}

impl Viewer {
    pub(crate) fn start(trace: &Path, extra: &[&str]) -> Viewer {
        let mut child = Command::new(clrprof_exe())
            .arg("view")
            .arg(trace)
            .arg("--no-browser")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start clrprof view");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.trim().to_string();
        let rest = url.strip_prefix("http://").unwrap_or_else(|| panic!("one URL line on stdout, got {url:?}"));
        let (host, token) = rest.split_once("/?token=").unwrap();
        assert_eq!(token.len(), 32, "{url}");
        assert!(host.starts_with("127.0.0.1:"), "loopback by default: {url}");
        let v = Viewer { _child: KillOnDrop(child), host: host.to_string(), token: token.to_string() };
        // The URL comes first; until the trace is read, the API answers 503 with the progress.
        let started = std::time::Instant::now();
        loop {
            let (status, _, body) = v.get("/api/meta");
            if status != 503 {
                break;
            }
            assert!(body.contains("loading"), "{body}");
            assert!(started.elapsed().as_secs() < 120, "still loading: {body}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        v
    }

    /// GET with the token: (status, headers, body).
    fn get(&self, path_and_query: &str) -> (u16, String, String) {
        let sep = if path_and_query.contains('?') { '&' } else { '?' };
        raw_get(&self.host, &format!("{path_and_query}{sep}token={}", self.token), &[])
    }

    /// GET /api/... expecting 200 and JSON.
    pub(crate) fn api(&self, what: &str, query: &[(&str, &str)]) -> Value {
        let (status, _, body) = self.get(&format!("/api/{what}?{}", encode(query)));
        assert_eq!(status, 200, "/api/{what} {query:?}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("JSON: {e}: {body}"))
    }

    /// GET /api/... expecting a 4xx error; its message.
    pub(crate) fn api_error(&self, what: &str, query: &[(&str, &str)]) -> String {
        let (status, _, body) = self.get(&format!("/api/{what}?{}", encode(query)));
        assert!((400..500).contains(&status), "/api/{what} {query:?}: {status} {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let m = v["error"].as_str().unwrap().to_string();
        assert!(!m.contains('\n') && !m.is_empty(), "one line: {m:?}");
        m
    }
}

fn encode(query: &[(&str, &str)]) -> String {
    query
        .iter()
        .map(|(k, v)| {
            let e: String = v
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
                    _ => format!("%{b:02X}"),
                })
                .collect();
            format!("{k}={e}")
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn raw_get(host: &str, path: &str, headers: &[&str]) -> (u16, String, String) {
    let mut s = TcpStream::connect(host).expect("connect");
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n");
    for h in headers {
        req += &format!("{h}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let resp = String::from_utf8(resp).expect("UTF-8 answer");
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

fn trace(name: &str) -> PathBuf {
    repo_root().join("testdata/traces/v1").join(name)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Hot-spot rows by name (weight and params as given), all of them.
fn hotspots(v: &Viewer, params: &[(&str, &str)]) -> Vec<Value> {
    let mut q = params.to_vec();
    q.push(("limit", "1000"));
    let r = v.api("hotspots", &q);
    let rows = r["page"]["rows"].as_array().unwrap().clone();
    assert_eq!(rows.len() as u64, u(&r["page"]["count"]), "one page holds them all");
    rows
}

fn row<'a>(rows: &'a [Value], name: &str) -> &'a Value {
    rows.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("no row {name:?}"))
}

#[test]
fn the_token_is_enforced_and_answers_carry_the_csp() {
    let v = Viewer::start(&trace("sampled.clrprof"), &[]);
    for path in ["/", "/api/meta", "/assets/app.js", "/api/hotspots?w=cpu", "/api/sites?fn=Main", "/nothing"] {
        let (status, _, body) = raw_get(&v.host, path, &[]);
        assert_eq!(status, 401, "{path}: {body}");
        assert!(!body.contains("Sampling"), "{path}");
        let (status, _, _) = raw_get(&v.host, &format!("{path}?token=0123456789abcdef0123456789abcdef"), &[]);
        assert_eq!(status, 401, "{path} with a wrong token");
        let wrong_length = format!("{path}?token={}", &v.token[..31]);
        assert_eq!(raw_get(&v.host, &wrong_length, &[]).0, 401, "{path} with a prefix of the token");
    }
    let (status, head, body) = v.get("/");
    assert_eq!(status, 200);
    assert!(body.contains("<script type=\"module\" src=\"/assets/app.js\">"), "{body}");
    let csp = head.lines().find(|l| l.starts_with("Content-Security-Policy:")).expect("CSP header");
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'") && !csp.contains("unsafe"),
        "{csp}"
    );
    assert!(!csp.contains("http"), "no outside source: {csp}");
    // The page's own requests carry the cookie set on the first load.
    let cookie = head.lines().find_map(|l| l.strip_prefix("Set-Cookie: ")).expect("cookie").split(';').next().unwrap();
    assert!(cookie.ends_with(&v.token), "{cookie}");
    let (status, head, body) = raw_get(&v.host, "/api/meta", &[&format!("Cookie: {cookie}")]);
    assert_eq!(status, 200, "{body}");
    assert!(head.contains("Content-Security-Policy: default-src 'none'"));
    let (status, _, _) = raw_get(&v.host, "/api/meta", &["Cookie: clrprof_token_1=nope"]);
    assert_eq!(status, 401);
    // An error answer of the call sites carries the CSP too.
    let (status, head, body) = v.get("/api/sites?fn=No.Such.Function");
    assert_eq!(status, 400, "{body}");
    assert!(body.starts_with("{\"error\":"), "{body}");
    assert!(head.contains("Content-Security-Policy: default-src 'none'"), "{head}");
    // Every embedded asset is served with a type; nothing refers outside.
    for a in ["app.js", "views.js", "util.js", "style.css"] {
        let (status, head, body) = v.get(&format!("/assets/{a}"));
        assert_eq!(status, 200, "{a}");
        assert!(head.contains("Content-Type: text/"), "{a}: {head}");
        assert!(!body.contains("http://") && !body.contains("https://"), "{a} loads nothing from outside");
    }
}

#[test]
fn sampled_figures_equal_the_report() {
    let t = trace("sampled.clrprof");
    let v = Viewer::start(&t, &[]);
    let meta = v.api("meta", &[]);
    assert_eq!(meta["default_weight"], "cpu");
    let weights: Vec<&str> = meta["weights"].as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert!(weights.contains(&"cpu") && weights.contains(&"wall"), "{weights:?}");
    let doc = report_json(&t);
    let functions = doc["functions"].as_array().unwrap();
    let rows = hotspots(&v, &[("w", "cpu")]);
    let mut compared = 0;
    for f in functions.iter().filter(|f| f["cpu_total_ns"].as_u64().unwrap_or(0) > 0) {
        let name = f["name"].as_str().unwrap();
        if functions.iter().filter(|g| g["name"] == name).count() > 1 {
            continue;
        }
        let r = row(&rows, name);
        assert_eq!(u(&r["self"]), u(&f["cpu_self_ns"]), "{name} self");
        assert_eq!(u(&r["total"]), u(&f["cpu_total_ns"]), "{name} total");
        assert_eq!(u(&r["self_count"]), u(&f["samples_self"]), "{name} samples");
        compared += 1;
    }
    assert!(compared >= 5, "{compared} functions compared");
    let spin = row(&rows, "Sampling.Many.Spin");
    let wall = hotspots(&v, &[("w", "wall")]);
    let f = functions.iter().find(|f| f["name"] == "Sampling.Many.Spin").unwrap();
    assert_eq!(u(&row(&wall, "Sampling.Many.Spin")["total"]), u(&f["wall_total_ns"]));

    // The butterfly's edges are exact: Spin's callers sum to its total (every stack through Spin
    // has one caller of its outermost call), and its callees are within it.
    let b = &v.api("butterfly", &[("w", "cpu"), ("fn", "Sampling.Many.Spin")])["function"];
    assert_eq!(u(&b["total"]), u(&spin["total"]));
    let callers: u64 = b["callers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] != "Sampling.Many.Spin")
        .map(|e| u(&e["value"]))
        .sum();
    assert_eq!(callers, u(&spin["total"]), "{b}");
    assert!(
        b["callers"].as_array().unwrap().iter().any(|e| e["name"] == "System.Threading.Thread.StartCallback"),
        "{b}"
    );
    // Entry points: stack roots, summing to the whole.
    let e = v.api("entries", &[("w", "cpu")]);
    let sum: u64 = e["entries"].as_array().unwrap().iter().map(|x| u(&x["value"])).sum();
    assert_eq!(sum, u(&e["total"]));

    // The tree: roots sum to the total; children pages count what they leave out.
    let page = &v.api("tree", &[("w", "cpu"), ("node", "0")])["page"];
    let roots: u64 = page["rows"].as_array().unwrap().iter().map(|r| u(&r["total"])).sum();
    assert_eq!(roots, u(&page["total"]));
    // The first node (breadth first, up to eight levels deep) with at least two children.
    let mut queue: Vec<String> = page["rows"].as_array().unwrap().iter().map(|r| u(&r["id"]).to_string()).collect();
    let mut first = None;
    for _ in 0..8 {
        let mut next = Vec::new();
        for id in &queue {
            let p = v.api("tree", &[("w", "cpu"), ("node", id)]);
            let rows = p["page"]["rows"].as_array().unwrap();
            if rows.len() >= 2 {
                first = Some(id.clone());
                break;
            }
            next.extend(rows.iter().map(|r| u(&r["id"]).to_string()));
        }
        if first.is_some() {
            break;
        }
        queue = next;
    }
    let first = first.expect("a node with two or more children");
    let all = &v.api("tree", &[("w", "cpu"), ("node", &first)])["page"];
    let one = &v.api("tree", &[("w", "cpu"), ("node", &first), ("limit", "1")])["page"];
    let n = all["rows"].as_array().unwrap().len();
    assert!(n >= 2, "{all}");
    assert_eq!(one["rows"].as_array().unwrap().len(), 1);
    assert_eq!(u(&one["more"]["count"]), n as u64 - 1);
    let rest: u64 = all["rows"].as_array().unwrap()[1..].iter().map(|r| u(&r["total"])).sum();
    assert_eq!(u(&one["more"]["value"]), rest);

    // Flame graph: nothing under a pixel is drawn alone; the drawn and the elided add up.
    let f = &v.api("flame", &[("w", "cpu"), ("width", "200"), ("q", "many.spin")])["flame"];
    let cells = f["cells"].as_array().unwrap();
    let top: u64 = cells.iter().filter(|c| c["depth"] == 0).map(|c| u(&c["width"])).sum();
    assert_eq!(top, u(&f["total"]));
    for c in cells.iter().filter(|c| c["more"] == 0) {
        assert!(u(&c["width"]) as f64 * 200.0 / u(&f["total"]) as f64 >= 1.0, "{c}");
    }
    assert_eq!(u(&f["matched"]), u(&spin["total"]), "search share counts nested matches once");

    // A time range: the figures are the report's for --from/--to.
    let ranged = hotspots(&v, &[("w", "cpu"), ("from", "200000000"), ("to", "400000000")]);
    let doc =
        serde_json::from_slice::<Value>(&report(&t, &["--format", "json", "--from", "200ms", "--to", "400ms"]).stdout)
            .unwrap();
    let f = doc["functions"].as_array().unwrap().iter().find(|f| f["name"] == "Sampling.Many.Spin").unwrap();
    assert_eq!(u(&row(&ranged, "Sampling.Many.Spin")["total"]), u(&f["cpu_total_ns"]));
    assert!(u(&f["cpu_total_ns"]) < u(&spin["total"]));

    // Timeline: every thread with samples, busiest first, markers per bucket.
    let tl = v.api("timeline", &[("buckets", "50")]);
    let threads = tl["threads"].as_array().unwrap();
    assert!(threads[0]["name"].as_str().unwrap().starts_with("many-"), "{}", threads[0]);
    assert_eq!(tl["markers"]["gc_pause_ns"].as_array().unwrap().len() as u64, u(&tl["buckets"]));
    let cpu: u64 = threads.iter().flat_map(|t| t["cpu_ns"].as_array().unwrap()).map(u).sum();
    assert_eq!(cpu, u(&meta["weights"].as_array().unwrap().iter().find(|w| w["name"] == "cpu").unwrap()["total"]));
}

#[test]
fn exact_calls_through_views_and_transforms() {
    let v = Viewer::start(&trace("instrumented.clrprof"), &[]);
    let rows = hotspots(&v, &[("w", "calls")]);
    assert_eq!(u(&row(&rows, "Calls.Counted.Tick")["self"]), 1000);
    assert_eq!(u(&row(&rows, "Calls.Counted.Run")["self"]), 1);
    assert_eq!(u(&row(&rows, "Calls.Counted.Run")["total"]), 1001);
    let b = &v.api("butterfly", &[("w", "calls"), ("fn", "Calls.Counted.Tick")])["function"];
    assert_eq!(b["callers"].as_array().unwrap().len(), 1, "{b}");
    assert_eq!(b["callers"][0]["name"], "Calls.Counted.Run");
    assert_eq!(u(&b["callers"][0]["value"]), 1000);
    let b = &v.api("butterfly", &[("w", "calls"), ("fn", "Calls.Counted.Run")])["function"];
    assert_eq!(b["callees"][0]["name"], "Calls.Counted.Tick");
    assert_eq!(u(&b["callees"][0]["value"]), 1000);
    // Exact time: the report's exclusive times.
    let doc = report_json(&trace("instrumented.clrprof"));
    let tick = find(&doc, "functions", "Calls.Counted.Tick");
    let time = hotspots(&v, &[("w", "time")]);
    assert_eq!(u(&row(&time, "Calls.Counted.Tick")["self"]), u(&tick["exclusive_ns"]), "{tick}");

    let tf = |t: &str| -> Vec<Value> { hotspots(&v, &[("w", "calls"), ("t", t)]) };
    let total = |rows: &[Value]| -> u64 { rows.iter().map(|r| u(&r["self"])).sum() };
    assert_eq!(total(&rows), 1004);
    // Drop: every stack through Tick goes.
    let dropped = tf(r#"[{"op":"drop","function":"Calls.Counted.Tick"}]"#);
    assert_eq!(total(&dropped), 4);
    assert!(dropped.iter().all(|r| r["name"] != "Calls.Counted.Tick"));
    // Merge: Tick's calls go to its caller.
    let merged = tf(r#"[{"op":"merge","function":"Calls.Counted.Tick"}]"#);
    assert_eq!(u(&row(&merged, "Calls.Counted.Run")["self"]), 1001);
    // Focus: only Run and below, Run the root.
    let focused = tf(r#"[{"op":"focus-function","function":"Calls.Counted.Run"}]"#);
    assert_eq!(total(&focused), 1001);
    let roots =
        &v.api("tree", &[("w", "calls"), ("t", r#"[{"op":"focus-function","function":"Calls.Counted.Run"}]"#)])["page"];
    assert_eq!(roots["rows"].as_array().unwrap().len(), 1);
    assert_eq!(roots["rows"][0]["name"], "Calls.Counted.Run");
    // Composed: focus, then merge.
    let both = tf(
        r#"[{"op":"focus-function","function":"Calls.Counted.Run"},{"op":"merge","function":"Calls.Counted.Tick"}]"#,
    );
    assert_eq!(both.len(), 1);
    assert_eq!(u(&both[0]["self"]), 1001);
    // Collapse the namespace: Calls.* becomes one frame holding everything.
    let ns = tf(r#"[{"op":"collapse-namespace","namespace":"Calls"}]"#);
    assert_eq!(u(&row(&ns, "Calls.*")["total"]), 1004);
    // Just my code keeps Calls.* (no framework frames in this trace's stacks change the sums).
    assert_eq!(total(&tf(r#"[{"op":"just-my-code"}]"#)), 1004);
}

#[test]
fn per_thread_trees_have_thread_roots() {
    let v = Viewer::start(&trace("counted.clrprof"), &[]);
    let page = &v.api("tree", &[("w", "calls"), ("threads", "each"), ("limit", "100")])["page"];
    let workers: Vec<&Value> = page["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"].as_str().unwrap().contains("(calls-worker-"))
        .collect();
    assert_eq!(workers.len(), 4, "{page}");
    let meta = v.api("meta", &[]);
    for t in
        meta["threads"].as_array().unwrap().iter().filter(|t| t["name"].as_str().unwrap().starts_with("calls-worker-"))
    {
        let tid = u(&t["os_tid"]).to_string();
        let rows = hotspots(&v, &[("w", "calls"), ("threads", &tid)]);
        assert_eq!(u(&row(&rows, "Calls.Shared.Work")["self"]), 2500, "thread {tid}");
    }
}

/// instrumented.clrprof with hostile function names.
fn hostile_trace(dir: &Path) -> (PathBuf, Vec<(String, String)>) {
    let (records, _) = clrprof_trace::read_all(std::fs::File::open(trace("instrumented.clrprof")).unwrap()).unwrap();
    let long = format!("Long.{}", "x".repeat(10_000));
    let renames = vec![
        ("Calls.Counted.Tick".to_string(), "<script>alert('x')</script>".to_string()),
        ("Calls.Counted.Run".to_string(), "Q\"uo'tes;semi;colons<b>&amp;".to_string()),
        ("Calls.Program.Main".to_string(), "Ünïcødé.名前.Émoji✓".to_string()),
        ("Calls.Program.<Main>".to_string(), long),
    ];
    let out: Vec<clrprof_trace::Record> = records
        .into_iter()
        .map(|r| match r {
            clrprof_trace::Record::FunctionCompiled(mut f) => {
                if let Some((_, to)) = renames.iter().find(|(from, _)| *from == f.name) {
                    f.name = to.clone();
                }
                f.into()
            }
            r => r,
        })
        .collect();
    let mut bytes = clrprof_trace::header().to_vec();
    bytes.extend(clrprof_trace::encode_records(out.iter()));
    let p = dir.join("hostile.clrprof");
    std::fs::write(&p, bytes).unwrap();
    (p, renames)
}

#[test]
fn hostile_names_come_back_verbatim() {
    let dir = scratch("view-hostile");
    let (t, renames) = hostile_trace(&dir);
    let v = Viewer::start(&t, &[]);
    let rows = hotspots(&v, &[("w", "calls")]);
    assert_eq!(u(&row(&rows, "<script>alert('x')</script>")["self"]), 1000);
    for (_, name) in &renames {
        row(&rows, name);
        let b = v.api("butterfly", &[("w", "calls"), ("fn", name)]);
        assert_eq!(b["function"]["name"].as_str().unwrap(), name);
    }
    let b = &v.api("butterfly", &[("w", "calls"), ("fn", "<script>alert('x')</script>")])["function"];
    assert_eq!(b["callers"][0]["name"], "Q\"uo'tes;semi;colons<b>&amp;");
    // Searches and transforms take them as plain text.
    let found = hotspots(&v, &[("w", "calls"), ("q", "<script>")]);
    assert_eq!(found.len(), 1);
    let found = hotspots(&v, &[("w", "calls"), ("q", "名前"), ("re", "1")]);
    assert_eq!(found.len(), 1);
    let t = serde_json::json!([{"op": "drop", "function": "<script>alert('x')</script>"}]).to_string();
    assert_eq!(hotspots(&v, &[("w", "calls"), ("t", &t)]).iter().map(|r| u(&r["self"])).sum::<u64>(), 4);
    // The answer is JSON with the names escaped as JSON strings, never raw HTML.
    let (_, head, body) = v.get("/api/hotspots?w=calls");
    assert!(head.contains("Content-Type: application/json"));
    assert!(body.contains(r#""<script>alert('x')</script>""#) && body.contains(r#"Q\"uo'tes"#), "{body}");
}

#[test]
fn bad_requests_get_one_line_errors() {
    let v = Viewer::start(&trace("sampled.clrprof"), &[]);
    assert!(v.api_error("hotspots", &[("w", "bogus")]).contains("unknown weight"));
    assert!(v.api_error("hotspots", &[("q", "(unclosed"), ("re", "1")]).contains("bad regular expression"));
    assert!(v.api_error("hotspots", &[("t", "[{\"op\":\"nope\"}]")]).contains("bad transform list"));
    assert!(v.api_error("hotspots", &[("t", "not json")]).contains("bad transform list"));
    assert!(v.api_error("tree", &[("node", "99999999")]).contains("no tree node"));
    assert!(v.api_error("tree", &[("node", "-1")]).contains("not a number"));
    assert!(v.api_error("butterfly", &[("fn", "No.Such.Function")]).contains("no function named"));
    assert!(v.api_error("butterfly", &[]).contains("'fn'"));
    assert!(v.api_error("table", &[("name", "nope")]).contains("unknown table"));
    assert!(v.api_error("diff", &[]).contains("--baseline"));
    assert!(v.api_error("nothing", &[]).contains("no API"));
    assert!(v.api_error("hotspots", &[("threads", "x")]).contains("'threads'"));
    // A transform naming nothing that exists keeps nothing (focus) or changes nothing (merge).
    let r = v.api("hotspots", &[("t", r#"[{"op":"focus-function","function":"No.Such"}]"#)]);
    assert_eq!(u(&r["page"]["count"]), 0);
    // Event and GCP tables answer in pages.
    let r = v.api("table", &[("name", "functions"), ("limit", "3"), ("q", "Spin")]);
    assert!(u(&r["count"]) >= 1);
    assert!(r["rows"].as_array().unwrap().len() <= 3);
}

#[test]
fn command_line_errors_are_one_line() {
    let dir = scratch("view-cli");
    let t = trace("sampled.clrprof");
    let run = |args: &[&str]| {
        Command::new(clrprof_exe()).arg("view").args(args).arg("--no-browser").stdin(Stdio::null()).output().unwrap()
    };
    let out = run(&[t.to_str().unwrap(), "--bind", "0.0.0.0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("give an explicit --token"), "{}", text(&out.stderr));
    let out = run(&[t.to_str().unwrap(), "--token", "short"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--token must be"), "{}", text(&out.stderr));
    let missing = dir.join("missing.clrprof");
    let out = run(&[missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("clrprof: error: cannot open trace"), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    let junk = dir.join("junk.clrprof");
    std::fs::write(&junk, b"this is not a trace at all").unwrap();
    let out = run(&[junk.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr).lines().count(), 1, "{}", text(&out.stderr));
    // Stores and runs: a missing store, an unknown run, a baseline without a trace.
    let store = dir.join("runs.db");
    clrprof_collect::SqliteStore::open(&store).unwrap();
    let missing_store = dir.join("typo.db");
    for (args, msg) in [
        (vec!["--store", missing_store.to_str().unwrap()], "no run store at"),
        (vec!["run:9", "--store", store.to_str().unwrap()], "no run 9 in the store"),
        (vec!["run:latest", "--store", store.to_str().unwrap()], "holds no runs"),
        (vec!["--store", store.to_str().unwrap(), "--baseline", t.to_str().unwrap()], "--baseline needs a TRACE"),
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(msg) && err.lines().count() == 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
    // No trace and no store: the default store, which is not there.
    let out = Command::new(clrprof_exe()).args(["view", "--no-browser"]).current_dir(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no run store at clrprof-runs.db"), "{}", text(&out.stderr));
    // An explicit token is used as given.
    let v = Viewer::start(&t, &["--token", "abcdefghijklmnopqrstuvwxyz012345"]);
    assert_eq!(v.token, "abcdefghijklmnopqrstuvwxyz012345");
}

#[test]
fn the_diff_view_compares_with_the_baseline() {
    // New: apps/Calls `threads`; baseline: apps/Calls `counted`.
    let v = Viewer::start(&trace("counted.clrprof"), &["--baseline", trace("instrumented.clrprof").to_str().unwrap()]);
    let meta = v.api("meta", &[]);
    assert!(meta["baseline"].as_str().unwrap().ends_with("instrumented.clrprof"));
    let d = v.api("diff", &[("w", "calls"), ("width", "800")]);
    assert_eq!(d["weight"], "calls");
    assert_eq!(d["instrumented"], true);
    let rows = d["functions"].as_array().unwrap();
    assert_eq!(rows[0]["name"], "Calls.Shared.Work", "sorted by |Δ|: {}", rows[0]);
    assert_eq!((u(&rows[0]["base"]), u(&rows[0]["new"]), rows[0]["delta"].as_i64().unwrap()), (0, 10000, 10000));
    assert_eq!(rows[0]["only"], "new");
    let tick = row(rows, "Calls.Counted.Tick");
    assert_eq!((u(&tick["base"]), u(&tick["new"]), tick["delta"].as_i64().unwrap()), (1000, 0, -1000));
    assert_eq!(tick["only"], "base");
    assert_eq!(tick["calls_delta"].as_i64().unwrap(), -1000);
    assert_eq!(u(&d["base_total"]), 1004);
    assert_eq!(u(&d["new_total"]), 10009);
    // Normalized: the baseline scaled to the new total.
    let n = v.api("diff", &[("w", "calls"), ("normalize", "1")]);
    assert_eq!(n["normalized"], true);
    assert_eq!(u(&n["base_total"]), 10009);
    // The differential flame graph has the new profile's shape and each cell's change.
    let cells = d["flame"]["cells"].as_array().unwrap();
    let work = cells.iter().find(|c| c["name"] == "Calls.Shared.Work").expect("Work drawn");
    assert!(work["delta"].as_i64().unwrap() > 0 && work["only"] == "new", "{work}");
    let top: u64 = cells.iter().filter(|c| c["depth"] == 0).map(|c| u(&c["width"])).sum();
    assert_eq!(top, 10009);
    // Search narrows the table.
    let s = v.api("diff", &[("w", "calls"), ("q", "counted")]);
    assert!(s["functions"].as_array().unwrap().iter().all(|r| r["name"].as_str().unwrap().contains("Counted")));
}

/// The browser end to end (crates/clrprof-view/e2e/e2e.mjs): Debian's chromium driven by
/// playwright-core opens a real trace, selects a function and checks the butterfly, zooms and
/// searches the flame graph, brushes a time range, applies and undoes a transform, reloads the
/// URL and finds the same state, renders hostile names as text, opens a diff (zooms its flame
/// graph, applies and undoes a transform on both sides), picks the exceptions and lock-wait
/// weights (their totals and notes), and lists a run store's runs and opens one. Set
/// CLRPROF_SCREENSHOTS=DIR to keep a screenshot of each view.
#[test]
fn browser_end_to_end() {
    let _machine = machine::shared();
    let dir = scratch("view-browser");
    let (hostile, _) = hostile_trace(&dir);
    // A run store for the runs list: run 1 complete (sampled.clrprof), run 2 still streaming.
    let store = dir.join("runs.db");
    {
        use clrprof_collect::{NewRun, RunEnd, RunState, RunStore, SqliteStore};
        let s = SqliteStore::open(&store).unwrap();
        for (name, complete) in [("sampled.clrprof", true), ("counted.clrprof", false)] {
            let start = clrprof_collect::now_ms() - 60_000;
            let new =
                NewRun { host: "e2e".into(), pid: 42, command: format!("dotnet {name}"), start, ..Default::default() };
            let id = s.create_run(&new).unwrap();
            s.append(id, &std::fs::read(trace(name)).unwrap()).unwrap();
            if complete {
                s.finish(id, &RunEnd { end: start + 2500, state: RunState::Complete, reason: None }).unwrap();
            }
        }
    }
    let traces = repo_root().join("testdata/traces/v1");
    run_browser_script(
        "e2e.mjs",
        "e2e: all checks passed",
        &[("TRACES", traces.as_os_str()), ("HOSTILE", hostile.as_os_str()), ("STORE", store.as_os_str())],
    );
}

/// Sum of `field` over the hot-spot rows.
fn sum(rows: &[Value], field: &str) -> u64 {
    rows.iter().map(|r| u(&r[field])).sum()
}

/// Checks an event weight (exceptions, lock wait) through every stack view: hot spots, the call
/// tree's roots, the inverted tree, the flame graph's top row and the entry points all add up
/// to `total` (and `count` contentions or exceptions behind it); per-thread views too.
fn check_event_weight(v: &Viewer, w: &str, total: u64, count: u64, estimated: bool) {
    let meta = v.api("meta", &[]);
    let m = meta["weights"].as_array().unwrap().iter().find(|x| x["name"] == w).unwrap_or_else(|| panic!("{meta}"));
    assert_eq!((u(&m["total"]), u(&m["count"]), &m["estimated"]), (total, count, &Value::Bool(estimated)), "{m}");
    assert!(m["note"].as_str().unwrap().contains(if estimated { "ESTIMATED" } else { "exact" }), "{m}");
    let r = v.api("hotspots", &[("w", w), ("limit", "1000")]);
    assert_eq!((u(&r["page"]["total"]), &r["estimated"]), (total, &Value::Bool(estimated)), "{r}");
    let rows = r["page"]["rows"].as_array().unwrap();
    assert_eq!(sum(rows, "self"), total);
    assert_eq!(sum(rows, "self_count"), count);
    for inv in ["", "1"] {
        let t = v.api("tree", &[("w", w), ("inv", inv), ("limit", "1000")]);
        assert_eq!(sum(t["page"]["rows"].as_array().unwrap(), "total"), total, "inv={inv}: {t}");
    }
    let f = v.api("flame", &[("w", w), ("width", "100000")]);
    let top: u64 =
        f["flame"]["cells"].as_array().unwrap().iter().filter(|c| c["depth"] == 0).map(|c| u(&c["width"])).sum();
    assert_eq!(top, total);
    let e = v.api("entries", &[("w", w), ("limit", "1000")]);
    assert_eq!(sum(e["entries"].as_array().unwrap(), "value"), total);
    // Not recorded per thread: the thread choice does not apply, and the answer says so.
    let each = v.api("hotspots", &[("w", w), ("threads", "each"), ("limit", "1000")]);
    assert_eq!(u(&each["page"]["total"]), total);
    assert!(each["note"].as_str().unwrap().contains("not recorded per thread"), "{each}");
}

/// Exceptions and lock wait are weights of every stack view and of the diff, and their totals are
/// the Events tables' totals: apps/Events throws exactly 20 (every throw stack walked: exact) and
/// 250 `BoomException`s (the agent walks the first 32 throw stacks of a type, then one in 100: the
/// count is exact, its spread over stacks estimated), and contends a Monitor 3 times.
#[test]
fn exceptions_and_lock_wait_are_weights_with_the_events_totals() {
    let _machine = machine::shared();
    let dir = scratch("view-event-weights");
    let rec = |name: &str, args: &[&str]| {
        let t = dir.join(format!("{name}.clrprof"));
        let out = record("Events", args, &t, &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        t
    };
    let (exc20, exc250, locks) = (
        rec("exc20", &["exceptions", "20"]),
        rec("exc250", &["exceptions", "250"]),
        rec("locks", &["contention", "3"]),
    );

    // 20 exceptions, every stack walked: exact, all at Thrower under Inner.
    let doc = report_json(&exc20);
    let g = check_boom_exceptions(&doc, 20);
    assert_eq!(g["sites"][0]["count"], 20, "every throw stack walked");
    let v = Viewer::start(&exc20, &[]);
    check_event_weight(&v, "exceptions", 20, 20, false);
    let rows = hotspots(&v, &[("w", "exceptions")]);
    let thrower = row(&rows, "EventsApp.Program.Thrower");
    assert_eq!((u(&thrower["self"]), u(&thrower["total"])), (20, 20));
    assert_eq!(u(&row(&rows, "EventsApp.Program.Catcher")["total"]), 20);
    let b = &v.api("butterfly", &[("w", "exceptions"), ("fn", "EventsApp.Program.Thrower")])["function"];
    assert_eq!((&b["callers"][0]["name"], u(&b["callers"][0]["value"])), (&Value::from("EventsApp.Program.Inner"), 20));
    drop(v);

    // 250 exceptions, 34 stacks walked: the weight's total is still the table's 250, marked estimated.
    let doc = report_json(&exc250);
    let g = check_boom_exceptions(&doc, 250);
    assert_eq!(g["sites"][0]["count"], 34);
    let v = Viewer::start(&exc250, &[]);
    check_event_weight(&v, "exceptions", 250, 250, true);
    assert_eq!(u(&row(&hotspots(&v, &[("w", "exceptions")]), "EventsApp.Program.Thrower")["self"]), 250);
    // Transforms apply: dropping the catcher's frame drops every exception.
    let dropped =
        v.api("hotspots", &[("w", "exceptions"), ("t", r#"[{"op":"drop","function":"EventsApp.Program.Catcher"}]"#)]);
    assert_eq!(u(&dropped["page"]["total"]), 0);
    drop(v);

    // Lock wait: the contention table's count and wait, per waiting stack.
    let doc = report_json(&locks);
    let sites = doc["contentions"].as_array().unwrap();
    let wait: u64 = sites.iter().map(|s| u(&s["wait_ns"])).sum();
    let n: u64 = sites.iter().map(|s| u(&s["count"])).sum();
    assert_eq!(n, 3, "{sites:?}");
    assert!(wait > 3_000_000, "the main thread holds the lock ~30 ms per round: {wait}");
    let gate = sites.iter().find(|s| s["site"] == "EventsApp.Program.WaitForGate").unwrap();
    let v = Viewer::start(&locks, &[]);
    check_event_weight(&v, "lock-wait", wait, 3, false);
    let rows = hotspots(&v, &[("w", "lock-wait")]);
    let w = row(&rows, "EventsApp.Program.WaitForGate");
    assert_eq!((u(&w["total"]), u(&w["count"])), (u(&gate["wait_ns"]), 3));
    let b = &v.api("butterfly", &[("w", "lock-wait"), ("fn", "EventsApp.Program.WaitForGate")])["function"];
    assert_eq!(u(&b["total"]), u(&gate["wait_ns"]));
    assert_eq!(b["callees"].as_array().unwrap().iter().map(|e| u(&e["value"])).sum::<u64>(), u(&gate["wait_ns"]));
    // A trace without exceptions has no exceptions weight.
    let meta = v.api("meta", &[]);
    assert!(meta["weights"].as_array().unwrap().iter().all(|x| x["name"] != "exceptions"), "{meta}");
    drop(v);

    // `clrprof diff --weight exceptions`: Thrower 20 → 250, the totals the tables'.
    let d = Command::new(clrprof_exe())
        .args(["diff", "--weight", "exceptions", "--format", "json"])
        .args([&exc20, &exc250])
        .output()
        .unwrap();
    assert!(d.status.success(), "{}", text(&d.stderr));
    let j: Value = serde_json::from_slice(&d.stdout).unwrap();
    assert_eq!(
        (&j["weight"], &j["unit"], &j["estimated"]),
        (&Value::from("exceptions"), &Value::from("exceptions"), &Value::Bool(true))
    );
    let f = j["functions"].as_array().unwrap();
    assert_eq!(f[0]["name"], "EventsApp.Program.Thrower");
    assert_eq!((u(&f[0]["base"]), u(&f[0]["new"]), f[0]["delta"].as_i64().unwrap()), (20, 250, 230));
    assert_eq!(f.iter().map(|r| u(&r["base"])).sum::<u64>(), 20);
    assert_eq!(f.iter().map(|r| u(&r["new"])).sum::<u64>(), 250);
    // `--weight lock-wait`: the waits of one side only; the text says which weight.
    let d =
        Command::new(clrprof_exe()).args(["diff", "--weight", "lock-wait"]).args([&exc20, &locks]).output().unwrap();
    assert!(d.status.success(), "{}", text(&d.stderr));
    let t = text(&d.stdout);
    assert!(t.starts_with("clrprof diff — weight: lock-wait (ms)"), "{t}");
    assert!(t.contains("EventsApp.Program.WaitForGate"), "{t}");
    // Not per thread: --thread with an event weight is a one-line error.
    let d = Command::new(clrprof_exe())
        .args(["diff", "--weight", "exceptions", "--thread", "1"])
        .args([&exc20, &exc250])
        .output()
        .unwrap();
    assert!(!d.status.success());
    let e = text(&d.stderr);
    assert!(e.contains("--thread does not apply to --weight exceptions") && e.trim().lines().count() == 1, "{e}");

    // The viewer's diff with the exceptions weight.
    let v = Viewer::start(&exc250, &["--baseline", exc20.to_str().unwrap()]);
    let d = v.api("diff", &[("w", "exceptions"), ("width", "100000")]);
    assert_eq!((u(&d["base_total"]), u(&d["new_total"]), &d["estimated"]), (20, 250, &Value::Bool(true)));
    let top: i64 = d["flame"]["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["depth"] == 0)
        .map(|c| c["delta"].as_i64().unwrap())
        .sum();
    assert_eq!(top, 230);
}

/// The diff view applies the transforms to both profiles alike: each row's base and new values
/// equal the hot spots of each trace viewed alone with the same transforms. The differential
/// flame graph zooms: a node's answer has its path (the breadcrumb) and the node as its top row.
#[test]
fn diff_transforms_apply_to_both_sides_and_the_flame_graph_zooms() {
    let (new, base) = (trace("counted.clrprof"), trace("instrumented.clrprof"));
    let d = Viewer::start(&new, &["--baseline", base.to_str().unwrap()]);
    let (vn, vb) = (Viewer::start(&new, &[]), Viewer::start(&base, &[]));
    for t in [
        "",
        r#"[{"op":"merge","function":"Calls.Shared.Work"}]"#,
        r#"[{"op":"drop","function":"Calls.Counted.Tick"}]"#,
        r#"[{"op":"focus-function","function":"Calls.Counted.Run"}]"#,
        r#"[{"op":"collapse-namespace","namespace":"Calls"}]"#,
        r#"[{"op":"just-my-code"},{"op":"collapse-recursion","function":"Calls.Counted.Run"}]"#,
    ] {
        let r = d.api("diff", &[("w", "calls"), ("t", t), ("limit", "5000")]);
        let hn = hotspots(&vn, &[("w", "calls"), ("t", t)]);
        let hb = hotspots(&vb, &[("w", "calls"), ("t", t)]);
        assert_eq!((u(&r["base_total"]), u(&r["new_total"])), (sum(&hb, "self"), sum(&hn, "self")), "t={t}");
        let rows = r["functions"].as_array().unwrap();
        let names: std::collections::BTreeSet<&str> =
            hn.iter().chain(&hb).map(|h| h["name"].as_str().unwrap()).collect();
        assert_eq!(rows.len(), names.len(), "t={t}: {rows:?}");
        for f in rows {
            let name = f["name"].as_str().unwrap();
            let side = |h: &[Value], k: &str| h.iter().find(|x| x["name"] == name).map(|x| u(&x[k])).unwrap_or(0);
            assert_eq!(
                (u(&f["base"]), u(&f["new"]), u(&f["base_total"]), u(&f["new_total"])),
                (side(&hb, "self"), side(&hn, "self"), side(&hb, "total"), side(&hn, "total")),
                "t={t}: {f}"
            );
        }
    }
    // Merge Work on both sides: its calls go to its caller, and Work is in no row.
    let m = d.api("diff", &[("w", "calls"), ("t", r#"[{"op":"merge","function":"Calls.Shared.Work"}]"#)]);
    let rows = m["functions"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["name"] != "Calls.Shared.Work"));
    assert_eq!(u(&rows[0]["new"]), 10004, "{}", rows[0]);

    // Zoom: the widest top cell, then its child.
    let all = d.api("diff", &[("w", "calls"), ("width", "800")]);
    let cells = all["flame"]["cells"].as_array().unwrap();
    let top = cells.iter().filter(|c| c["depth"] == 0 && c["more"] == 0).max_by_key(|c| u(&c["width"])).unwrap();
    let child = cells.iter().find(|c| c["depth"] == 1 && c["more"] == 0).unwrap();
    let z = d.api("diff", &[("w", "calls"), ("width", "800"), ("node", &child["id"].to_string())]);
    let fl = &z["flame"];
    let path: Vec<&str> = fl["path"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(path, [top["name"].as_str().unwrap(), child["name"].as_str().unwrap()]);
    assert_eq!(fl["path"][1]["id"], child["id"]);
    assert_eq!(u(&fl["total"]), u(&child["width"]));
    assert_eq!(u(&fl["view_total"]), u(&all["flame"]["total"]));
    let zc = fl["cells"].as_array().unwrap();
    assert_eq!((&zc[0]["name"], &zc[0]["depth"], &zc[0]["delta"]), (&child["name"], &Value::from(0), &child["delta"]));
    assert!(zc.iter().all(|c| c["depth"] == 0 || u(&c["width"]) <= u(&child["width"])));
    let e = d.api_error("diff", &[("w", "calls"), ("node", "99999")]);
    assert!(e.contains("no diff node 99999"), "{e}");
}
