//! One live run's profiles, interval by interval: its trace bytes are decoded as they arrive into
//! a `ProfileBuilder`, and each interval's window becomes one pprof profile per kind (CPU, wall,
//! allocations, lock contention, exceptions). No threads and no clock of its own: the caller says
//! what time it is, so tests drive it with a recorded trace and a chosen clock.

use std::io::Write;

use clrprof_model::{Metric, NoSymbols, Process, ProfileBuilder, TimeRange};
use clrprof_query::Threads;
use clrprof_trace::{Record, StreamDecoder};

/// A kind of profile pushed: its name suffix (`<service>.<suffix>`), the pprof sample types it
/// carries and the default one.
pub struct Kind {
    pub suffix: &'static str,
    pub types: &'static [&'static str],
    pub default: &'static str,
}

/// The kinds pushed for every interval (a kind with no samples in the window is not pushed).
pub const KINDS: [Kind; 5] = [
    Kind { suffix: "cpu", types: &[Metric::Cpu.pprof_name(), "samples"], default: Metric::Cpu.pprof_name() },
    Kind { suffix: "wall", types: &[Metric::Wall.pprof_name()], default: Metric::Wall.pprof_name() },
    Kind {
        suffix: "alloc",
        types: &[Metric::AllocCount.pprof_name(), Metric::AllocBytes.pprof_name()],
        default: Metric::AllocBytes.pprof_name(),
    },
    Kind { suffix: "lock", types: &["contentions", "delay"], default: "delay" },
    Kind { suffix: "exceptions", types: &[Metric::Exceptions.pprof_name()], default: Metric::Exceptions.pprof_name() },
];

/// What a pusher sends: Pyroscope's pprof ingest (one profile per kind), or OpenTelemetry
/// profiles over OTLP/HTTP (one request per window with every sample type).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Pyroscope,
    Otlp,
}

/// One profile to send: `POST /ingest?name=<name>&from=..&until=..&format=pprof`, or an OTLP
/// `ExportProfilesServiceRequest` to the receiver's profiles path.
#[derive(Clone, Debug)]
pub struct Push {
    /// The application name with its labels: `service.cpu{service_name=service,host=..,pid=..}`.
    pub name: String,
    /// The window, ns since the Unix epoch.
    pub from_unix_ns: u64,
    pub until_unix_ns: u64,
    /// The gzip-compressed pprof profile, or the OTLP request.
    pub body: Vec<u8>,
    /// Samples in the profile.
    pub samples: usize,
    pub format: Format,
}

impl Push {
    /// The request's path and query at `ep`: Pyroscope's `{prefix}/ingest?…`; for OTLP the URL's
    /// path when it names the profiles signal (ends in `/profiles`), else
    /// `{prefix}/v1development/profiles` (a receiver's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn target(&self, ep: &crate::Endpoint) -> String {
        match self.format {
            Format::Pyroscope => format!("{}/ingest?{}", ep.prefix, self.query()),
            Format::Otlp if ep.prefix.ends_with("/profiles") => ep.prefix.clone(),
            Format::Otlp => format!("{}{}", ep.prefix, clrprof_export::otlp::HTTP_PATH),
        }
    }

    pub fn content_type(&self) -> &'static str {
        match self.format {
            Format::Pyroscope => "application/octet-stream",
            Format::Otlp => clrprof_export::otlp::CONTENT_TYPE,
        }
    }

    /// The query string of the ingest request (times in ns: Pyroscope reads 19-digit times as ns).
    pub fn query(&self) -> String {
        format!(
            "name={}&from={}&until={}&format=pprof&spyName=clrprof",
            percent_encode(&self.name),
            self.from_unix_ns,
            self.until_unix_ns
        )
    }
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3 / 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The name of a process from its command line: `dotnet /app/Shop.dll --x` → `Shop`,
/// `/app/Shop --x` → `Shop`.
pub fn process_name(command_line: &str) -> String {
    let mut words = command_line.split_whitespace();
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    let first = match words.next() {
        Some(w) => base(w),
        None => return String::new(),
    };
    if first == "dotnet" || first == "dotnet.exe" {
        if let Some(dll) = words.find(|w| !w.starts_with('-')) {
            let b = base(dll);
            return b.strip_suffix(".dll").map(str::to_string).unwrap_or(b);
        }
    }
    first
}

/// A service or application name Pyroscope accepts: letters, digits, `_`, `-`, `.`; others `_`.
fn clean_name(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || "_-.".contains(c) { c } else { '_' }).collect()
}

/// A label name: letters, digits and `_`, not starting with a digit.
fn clean_key(s: &str) -> String {
    let mut k: String = s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if k.starts_with(|c: char| c.is_ascii_digit()) {
        k.insert(0, '_');
    }
    k
}

/// A label value without the characters that delimit labels in an application name.
fn clean_value(s: &str) -> String {
    s.chars().map(|c| if "{},=\"".contains(c) || c.is_whitespace() || c.is_control() { '_' } else { c }).collect()
}

/// The service and labels of a run: `service_name` (`CLRPROF_SERVICE` or the process name),
/// `host`, `pid`, `runtime_version`, then the user's `CLRPROF_LABELS` (which may override the
/// built-in ones).
pub fn labels(p: &Process) -> (String, Vec<(String, String)>) {
    let service = if p.service.is_empty() { process_name(&p.command_line) } else { p.service.clone() };
    let service = if service.is_empty() { format!("pid{}", p.pid) } else { clean_name(&service) };
    let mut l: Vec<(String, String)> = vec![("service_name".into(), service.clone())];
    if !p.host.is_empty() {
        l.push(("host".into(), p.host.clone()));
    }
    l.push(("pid".into(), p.pid.to_string()));
    if !p.runtime_version.is_empty() {
        l.push(("runtime_version".into(), p.runtime_version.clone()));
    }
    for (k, v) in &p.labels {
        let k = clean_key(k);
        l.retain(|(x, _)| *x != k);
        l.push((k, v.clone()));
    }
    let l = l.into_iter().map(|(k, v)| (k, clean_value(&v))).collect();
    (service, l)
}

/// `service.kind{k=v,...}`.
pub fn app_name(service: &str, kind: &str, labels: &[(String, String)]) -> String {
    let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{service}.{kind}{{{}}}", l.join(","))
}

/// One live run. Once a window is pushed, the builder forgets the samples and events before its
/// end ([`ProfileBuilder::forget_before`]): memory and the cost of a window stay the same however
/// long the run (names, stack definitions and open state are kept, and they grow only with the
/// code the app runs).
pub struct RunPusher {
    decoder: StreamDecoder,
    builder: ProfileBuilder,
    records: Vec<Record>,
    /// From the run's `ProcessStart` (0 until it arrived).
    start_unix_ns: u64,
    /// Trace time up to which the run was pushed.
    pushed_until: u64,
    /// Why decoding stopped (the records before the damage are kept and pushed).
    broken: Option<String>,
    bytes: u64,
    /// Keep every record (what a pusher did before forgetting: for comparisons and benchmarks).
    keep_all: bool,
    format: Format,
}

impl Default for RunPusher {
    fn default() -> Self {
        RunPusher::new()
    }
}

impl RunPusher {
    pub fn new() -> RunPusher {
        RunPusher {
            decoder: StreamDecoder::new(),
            builder: ProfileBuilder::new(),
            records: Vec::new(),
            start_unix_ns: 0,
            pushed_until: 0,
            broken: None,
            bytes: 0,
            keep_all: false,
            format: Format::Pyroscope,
        }
    }

    /// A pusher of `format`'s pushes.
    pub fn with_format(format: Format) -> RunPusher {
        RunPusher { format, ..RunPusher::new() }
    }

    /// A pusher that never forgets (the whole run stays in its builder): pushes the same profiles
    /// at a cost growing with the run's length. For comparisons and benchmarks.
    pub fn keeping_everything() -> RunPusher {
        RunPusher { keep_all: true, ..RunPusher::new() }
    }

    /// Per-sample and per-event records retained by the run's builder (bounded by what one
    /// window holds, unless [`RunPusher::keeping_everything`]).
    pub fn retained(&self) -> u64 {
        self.builder.retained()
    }

    /// Bytes fed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Why decoding stopped, if it did.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Trace time (ns since the process started) up to which the run was pushed.
    pub fn pushed_until(&self) -> u64 {
        self.pushed_until
    }

    /// Decodes the next bytes of the run's trace. Returns the error that stopped decoding, once.
    pub fn feed(&mut self, bytes: &[u8]) -> Option<String> {
        self.bytes += bytes.len() as u64;
        if self.broken.is_some() {
            return None;
        }
        let r = self.decoder.push(bytes, &mut self.records);
        for rec in self.records.drain(..) {
            if let Record::ProcessStart(s) = &rec {
                if self.start_unix_ns == 0 {
                    self.start_unix_ns = s.start_unix_ns;
                }
            }
            // No pushed kind is made of flow events (`record --flow`): not kept at all.
            if !matches!(rec, Record::FlowEvents(_)) {
                self.builder.add(&rec);
            }
        }
        match r {
            Ok(()) => None,
            Err(e) => {
                let msg = e.to_string();
                self.broken = Some(msg.clone());
                Some(msg)
            }
        }
    }

    /// The profiles of the window from the last push to `now - lag` (records reach the collector
    /// up to a flush interval after they happen: `lag` leaves them time to arrive).
    pub fn due(&mut self, now_unix_ns: u64, lag_ns: u64) -> Vec<Push> {
        if self.start_unix_ns == 0 {
            return Vec::new();
        }
        let until = now_unix_ns.saturating_sub(lag_ns).saturating_sub(self.start_unix_ns);
        if until <= self.pushed_until {
            return Vec::new();
        }
        let from = std::mem::replace(&mut self.pushed_until, until);
        let pushes = self.window(from, until);
        if !self.keep_all {
            // Later windows start at `until`: what came before is never read again.
            self.builder.forget_before(until);
        }
        pushes
    }

    /// The profiles of everything not pushed yet (the run ended).
    pub fn finish(&mut self) -> Vec<Push> {
        if self.start_unix_ns == 0 {
            return Vec::new();
        }
        let from = std::mem::replace(&mut self.pushed_until, u64::MAX);
        if from == u64::MAX {
            return Vec::new();
        }
        self.window(from, u64::MAX)
    }

    /// One push per kind with samples in `[from, until)` (trace time). Once windows were pushed by
    /// [`RunPusher::due`], what came before [`RunPusher::pushed_until`] is forgotten: only windows
    /// from there on are whole.
    pub fn window(&self, from: u64, until: u64) -> Vec<Push> {
        let p = self.builder.profile(TimeRange::new(from, until), &mut NoSymbols);
        let (service, labels) = labels(&p.process);
        let start = p.process.start_unix_ns;
        let end = if until == u64::MAX { p.process.duration_ns.max(from) } else { until };
        let threads = Threads::all();
        let mut out = Vec::new();
        if self.format == Format::Otlp {
            let (body, samples) = clrprof_export::otlp::encode(&p, &threads);
            if samples > 0 {
                let name = app_name(&service, "otlp", &labels);
                let (from_unix_ns, until_unix_ns) = (start + from, start + end);
                out.push(Push { name, from_unix_ns, until_unix_ns, body, samples, format: Format::Otlp });
            }
            return out;
        }
        for k in &KINDS {
            let (raw, samples) = clrprof_export::pprof::encode_types(&p, &threads, Some(k.types), k.default);
            if samples == 0 {
                continue;
            }
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            let body = match gz.write_all(&raw).and_then(|_| gz.finish()) {
                Ok(b) => b,
                Err(_) => continue,
            };
            out.push(Push {
                name: app_name(&service, k.suffix, &labels),
                from_unix_ns: start + from,
                until_unix_ns: start + end,
                body,
                samples,
                format: Format::Pyroscope,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_labels() {
        assert_eq!(process_name("dotnet /app/bin/Shop.Api.dll --urls http://x"), "Shop.Api");
        assert_eq!(process_name("/usr/bin/Shop --x"), "Shop");
        assert_eq!(process_name("dotnet"), "dotnet");
        assert_eq!(process_name(""), "");
        let p = Process {
            pid: 42,
            command_line: "dotnet /a/My App.dll".into(),
            runtime_version: "10.0.1".into(),
            host: "web-1".into(),
            labels: vec![("env".into(), "prod,eu".into()), ("host".into(), "h{2}".into()), ("1x".into(), "y".into())],
            ..Default::default()
        };
        let (s, l) = labels(&p);
        assert_eq!(s, "My");
        assert_eq!(
            app_name(&s, "cpu", &l),
            "My.cpu{service_name=My,pid=42,runtime_version=10.0.1,env=prod_eu,host=h_2_,_1x=y}"
        );
        let p = Process { pid: 7, service: "check out".into(), ..Default::default() };
        assert_eq!(app_name(&labels(&p).0, "wall", &labels(&p).1), "check_out.wall{service_name=check_out,pid=7}");
        let push = Push {
            name: "a.cpu{x=1}".into(),
            from_unix_ns: 1,
            until_unix_ns: 2,
            body: vec![],
            samples: 0,
            format: Format::Pyroscope,
        };
        assert_eq!(push.query(), "name=a.cpu%7Bx%3D1%7D&from=1&until=2&format=pprof&spyName=clrprof");
    }
}
