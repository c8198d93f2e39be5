//! `clrprof record`: the classic launcher. Sets the profiling environment for one child only,
//! passes stdin/stdout/stderr and the exit code through, survives Ctrl-C so the trace is kept,
//! then appends the exit status to the trace and says where it is.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::{bail, Context, Result};
use clrprof_trace::{encode_records, ProcessExit, Record, AGENT_CLSID};

use crate::agent_env::{AgentEnv, InstrumentOptions, Recording};

/// Options of `clrprof record`.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RecordOptions {
    /// Trace path; `None` = `<program>-<pid>.clrprof`.
    pub output: Option<PathBuf>,
    /// Agent library; `None` = found next to the executable.
    pub agent: Option<PathBuf>,
    /// Agent diagnostics file.
    pub log: Option<PathBuf>,
    /// What the agent records (sampling and runtime events).
    pub recording: Recording,
    /// Enter/leave instrumentation.
    pub instrument: InstrumentOptions,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Stream to this collector (`CLRPROF_SERVER`) instead of writing the file.
    pub server: Option<String>,
    /// The collector's token (`CLRPROF_TOKEN`); `None` keeps the inherited variable.
    pub token: Option<String>,
    /// TLS files for a `tls://` collector.
    pub tls: crate::agent_env::TlsFiles,
    /// `CLRPROF_PROCESS`: only processes matching these globs are profiled.
    pub process: Option<String>,
}

/// The agent library could not be found.
#[derive(Debug)]
pub struct AgentMissing(pub String);

impl std::fmt::Display for AgentMissing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "agent library not found: {}", self.0)
    }
}

impl std::error::Error for AgentMissing {}

pub const AGENT_FILE: &str = "libclrprof_agent.so";

/// Finds the agent: `--agent`, `$CLRPROF_AGENT_PATH`, next to the executable, `../lib/clrprof/`.
pub fn find_agent(explicit: Option<&Path>) -> Result<PathBuf> {
    let check = |p: PathBuf| -> Result<PathBuf> {
        if p.is_file() {
            Ok(std::fs::canonicalize(&p).with_context(|| format!("cannot resolve {}", p.display()))?)
        } else {
            Err(AgentMissing(format!("{} does not exist", p.display())).into())
        }
    };
    if let Some(p) = explicit {
        return check(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("CLRPROF_AGENT_PATH").filter(|v| !v.is_empty()) {
        return check(PathBuf::from(p)).context("$CLRPROF_AGENT_PATH");
    }
    let exe = std::env::current_exe().context("cannot locate the clrprof executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [dir.join(AGENT_FILE), dir.join("../lib/clrprof").join(AGENT_FILE)];
    for c in &candidates {
        if c.is_file() {
            return check(c.clone());
        }
    }
    Err(AgentMissing(format!("looked for {} next to {}", AGENT_FILE, exe.display())).into())
}

/// The program's name for default trace names: `app` for `dotnet app.dll`, else the file name.
pub fn program_name(command: &[String]) -> String {
    let base =
        |s: &str| Path::new(s).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| s.to_string());
    let first = command.first().map(|s| base(s)).unwrap_or_else(|| "app".into());
    let name = if first == "dotnet" {
        command
            .iter()
            .skip(1)
            .find(|a| a.ends_with(".dll"))
            .map(|a| base(a).trim_end_matches(".dll").to_string())
            .unwrap_or(first)
    } else {
        first
    };
    let clean: String = name.chars().map(|c| if c.is_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    if clean.is_empty() {
        "app".into()
    } else {
        clean
    }
}

static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // Terminal-generated signals (Ctrl-C) already reach the child through the process group;
    // signals sent to clrprof by a process (kill, systemd) are forwarded to the child.
    // Safety: `info` is valid in an SA_SIGINFO handler; kill is async-signal-safe.
    unsafe {
        let code = if info.is_null() { 0 } else { (*info).si_code };
        let child = CHILD.load(Ordering::SeqCst);
        if code <= 0 && child > 0 {
            libc::kill(child, sig);
        }
    }
}

fn install_forwarding() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // Safety: installs a handler that only calls async-signal-safe functions.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The trace's directory must exist and take new files before the program starts: otherwise the
/// agent could not write and the user would only learn it after the run.
pub fn check_output_dir(trace: &Path) -> Result<()> {
    let dir = match trace.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!("cannot write the trace {}: the directory {} does not exist", trace.display(), dir.display());
    }
    let probe = dir.join(format!(".clrprof-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").with_context(|| {
        format!("cannot write the trace {}: cannot create files in {}", trace.display(), dir.display())
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

pub fn record(opts: &RecordOptions) -> Result<ExitCode> {
    if opts.command.is_empty() {
        bail!("no command given: use `clrprof record -- dotnet app.dll`");
    }
    if opts.instrument.enabled && !cfg!(target_arch = "x86_64") {
        bail!("--instrument is supported on x86_64 only (the enter/leave hook stubs follow the x86_64 System V contract); use sampling instead");
    }
    let agent = find_agent(opts.agent.as_deref())?;
    let template = match &opts.output {
        Some(p) => {
            if p.exists() {
                std::fs::remove_file(p).with_context(|| format!("cannot replace {}", p.display()))?;
            }
            p.to_string_lossy().into_owned()
        }
        None => format!("{}-{{pid}}.clrprof", program_name(&opts.command)),
    };
    if template.contains("{name}") || template.contains("{time}") {
        bail!("-o takes `{{pid}}` only: `{{name}}` and `{{time}}` are for CLRPROF_OUTPUT without `clrprof record` (record names its trace <program>-<pid>.clrprof)");
    }
    check_output_dir(Path::new(&template))?;
    if std::env::var("DOTNET_EnableDiagnostics").as_deref() == Ok("0") {
        eprintln!("clrprof: warning: DOTNET_EnableDiagnostics=0 may stop the runtime from loading the profiler");
    }

    let mut cmd = Command::new(&opts.command[0]);
    cmd.args(&opts.command[1..])
        .env("CORECLR_ENABLE_PROFILING", "1")
        .env("CORECLR_PROFILER", AGENT_CLSID)
        .env("CORECLR_PROFILER_PATH", &agent)
        .env_remove("CORECLR_PROFILER_PATH_64")
        .envs(
            AgentEnv::default()
                .output(&template)
                .recording(&opts.recording)
                .instrument(&opts.instrument)
                .process(opts.process.as_deref())
                .log(opts.log.as_deref())
                .server(opts.server.as_deref(), opts.token.as_deref())
                .tls(&opts.tls)
                .vars(),
        );
    if opts.recording.events.alloc == "exact" {
        eprintln!("clrprof: note: --alloc exact counts every object and slows every allocation down");
    }
    let started_at = std::time::SystemTime::now();
    let mut child = cmd.spawn().with_context(|| format!("cannot start `{}`", opts.command[0]))?;
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    install_forwarding();
    let status = child.wait().context("waiting for the profiled process")?;
    let end_unix_ns =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);

    use std::os::unix::process::ExitStatusExt;
    let exit = ProcessExit { end_unix_ns, exit_code: status.code(), signal: status.signal() };
    let trace = PathBuf::from(template.replace("{pid}", &child.id().to_string()));
    let streamed = opts.server.as_deref().and_then(|server| {
        let code = match (exit.exit_code, exit.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => -s - 1,
            _ => -1,
        };
        let token = opts.token.clone().or_else(|| std::env::var("CLRPROF_TOKEN").ok()).unwrap_or_default();
        let run = exit_notice(server, &token, &opts.tls, child.id(), code, end_unix_ns);
        if let Some(run) = run {
            eprintln!("clrprof: run {run} streamed to the collector at {server} (`clrprof report run:{run}`)");
        }
        run
    });
    if !trace.is_file() && streamed.is_none() && opts.process.is_some() {
        // The process filter may have picked a descendant: its trace has its own pid.
        let others = traces_of_template(&template, started_at);
        if others.is_empty() {
            eprintln!(
                "clrprof: warning: no process matched --process {}: no trace was written",
                opts.process.as_deref().unwrap_or_default()
            );
        }
        for o in others {
            let size = std::fs::metadata(&o).map(|m| m.len()).unwrap_or(0);
            eprintln!("clrprof: trace written to {} ({})", o.display(), human_size(size));
        }
    } else if trace.is_file() {
        if opts.server.is_some() {
            eprintln!(
                "clrprof: warning: the collector at {} was unreachable or went away during the run; the rest of the trace is in the file below{}",
                opts.server.as_deref().unwrap_or_default(),
                if opts.log.is_some() { " (see the agent log)" } else { "" }
            );
        }
        append_exit(&trace, &exit)?;
        let size = std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0);
        eprintln!("clrprof: trace written to {} ({})", trace.display(), human_size(size));
        report_sibling_traces(&trace);
    } else if streamed.is_none() {
        eprintln!("clrprof: warning: no trace was written to {}: {}", trace.display(), no_trace_cause(opts, &exit));
    }
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(s)) => ExitCode::from(128u8.wrapping_add(s as u8)),
        _ => ExitCode::FAILURE,
    })
}

/// Why a run left no trace, as far as `record` can tell: the program was killed by a signal before
/// the agent loaded (nothing could be written), exited with an error before it loaded, or ran to its
/// end without loading it (not a .NET program, or the runtime ignored the profiler).
fn no_trace_cause(opts: &RecordOptions, exit: &ProcessExit) -> String {
    let program = &opts.command[0];
    let hint =
        if opts.log.is_some() { "see the agent log" } else { "re-run with --log FILE for the agent's diagnostics" };
    match (exit.exit_code, exit.signal) {
        (_, Some(s)) => format!("`{program}` was killed by signal {s}{} before the profiler loaded", signal_name(s)),
        (Some(c), _) if c != 0 => format!(
            "`{program}` exited with code {c} before the profiler loaded (is `{program}` a .NET program? {hint})"
        ),
        _ => format!("the profiler did not load (is `{program}` a .NET program? {hint})"),
    }
}

/// ` (SIGKILL)` for the signals a process commonly dies of, else nothing.
fn signal_name(s: i32) -> &'static str {
    match s {
        1 => " (SIGHUP)",
        2 => " (SIGINT)",
        3 => " (SIGQUIT)",
        4 => " (SIGILL)",
        6 => " (SIGABRT)",
        7 => " (SIGBUS)",
        8 => " (SIGFPE)",
        9 => " (SIGKILL)",
        11 => " (SIGSEGV)",
        13 => " (SIGPIPE)",
        15 => " (SIGTERM)",
        _ => "",
    }
}

/// Tells the collector how the child ended (it appends `ProcessExit` to the run); the run's id,
/// or `None` when the collector has no run of this process or cannot be reached.
fn exit_notice(
    server: &str,
    token: &str,
    tls: &crate::agent_env::TlsFiles,
    pid: u32,
    exit_code: i32,
    end_unix_ns: u64,
) -> Option<u64> {
    use clrprof_trace::wire::{self, Hello};
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    let timeout = std::time::Duration::from_secs(15);
    let (addr_text, secure) = clrprof_collect::tls::split_scheme(server);
    let addr = addr_text.to_socket_addrs().ok()?.next()?;
    let tcp = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)).ok()?;
    tcp.set_read_timeout(Some(timeout)).ok()?;
    tcp.set_write_timeout(Some(timeout)).ok()?;
    let mut s: Box<dyn ReadWrite> = if secure {
        let client = tls.cert.as_deref().zip(tls.key.as_deref());
        let cfg = match clrprof_collect::tls::client_config(tls.ca.as_deref(), client) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("clrprof: cannot tell the collector how the process ended: {e}");
                return None;
            }
        };
        let name = rustls::ServerName::try_from(clrprof_collect::tls::host_of(addr_text)).ok()?;
        Box::new(rustls::StreamOwned::new(rustls::ClientConnection::new(cfg, name).ok()?, tcp))
    } else {
        Box::new(tcp)
    };
    let hello = Hello {
        kind: wire::kind::EXIT,
        token: token.to_string(),
        host: clrprof_collect::hostname(),
        pid,
        start_unix_ns: end_unix_ns,
        exit_code,
        ..Default::default()
    };
    s.write_all(&hello.encode()).ok()?;
    let mut a = [0u8; 9];
    s.read_exact(&mut a).ok()?;
    match wire::decode_answer(&a) {
        (wire::status::ACCEPTED, run) => Some(run),
        _ => None,
    }
}

trait ReadWrite: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> ReadWrite for T {}

/// Trace files written since `since` whose names fit `template` with `{pid}` as digits.
fn traces_of_template(template: &str, since: std::time::SystemTime) -> Vec<PathBuf> {
    let path = Path::new(template);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let Some((pre, post)) = name.split_once("{pid}") else { return Vec::new() };
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let mid = n.strip_prefix(pre).and_then(|r| r.strip_suffix(post));
            mid.is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
                && e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t >= since)
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Appends the process's end to its trace. A process that died while its agent wrote a block
/// (FailFast, a fatal signal: a short write) leaves that block cut off at the end of the file; a
/// block appended after it would be read as the rest of the cut one and lost with it. So the cut
/// block is dropped first — readers discard it anyway (they read everything before it) — and
/// `record` says so.
fn append_exit(trace: &Path, exit: &ProcessExit) -> Result<()> {
    use std::io::Write;
    let block = encode_records([&Record::ProcessExit(exit.clone())]);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .open(trace)
        .with_context(|| format!("cannot append to {}", trace.display()))?;
    if let Some(cut) = clrprof_trace::cut_last_block(&f) {
        f.set_len(cut.offset).with_context(|| format!("cannot append to {}", trace.display()))?;
        eprintln!(
            "clrprof: warning: the process died while its last block was written ({} of {} bytes at byte {}); that block was dropped",
            cut.have, cut.need, cut.offset
        );
    }
    f.write_all(&block).with_context(|| format!("cannot append to {}", trace.display()))?;
    Ok(())
}

/// Child .NET processes of the profiled program write `<trace>.<pid>` next to it.
fn report_sibling_traces(trace: &Path) {
    let (Some(dir), Some(name)) = (trace.parent(), trace.file_name()) else { return };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let prefix = format!("{}.", name.to_string_lossy());
    if let Ok(rd) = std::fs::read_dir(dir) {
        let mut others: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix) && n[prefix.len()..].bytes().all(|b| b.is_ascii_digit()))
            .collect();
        others.sort();
        for o in others {
            eprintln!("clrprof: a child .NET process wrote {}", dir.join(o).display());
        }
    }
}

pub fn human_size(n: u64) -> String {
    if n >= 10 << 20 {
        format!("{} MB", n >> 20)
    } else if n >= 10 << 10 {
        format!("{} KB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_names() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(program_name(&v(&["dotnet", "bin/Release/App.dll", "x"])), "App");
        assert_eq!(program_name(&v(&["dotnet", "run"])), "dotnet");
        assert_eq!(program_name(&v(&["./bin/My App"])), "My_App");
        assert_eq!(program_name(&v(&["/usr/bin/dotnet", "--roll-forward", "Major", "a.dll"])), "a");
    }

    /// The end of a process is appended after the last complete block: a block the process's
    /// death cut short is dropped, so the exit is read; a trace that ends on a boundary keeps every
    /// byte.
    #[test]
    fn the_exit_is_appended_after_a_block_cut_short() {
        use clrprof_trace::{encode_records, header, read_all, ProcessStart};
        let dir = std::env::temp_dir().join(format!("clrprof-append-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let start = Record::ProcessStart(ProcessStart { pid: 7, ..Default::default() });
        let whole = [header().to_vec(), encode_records([&start])].concat();
        let second = encode_records([&start, &start]);
        let exit = ProcessExit { end_unix_ns: 5, exit_code: None, signal: Some(6) };
        for cut in [0, 3, 8, 20, second.len() - 1] {
            let path = dir.join(format!("t{cut}.clrprof"));
            std::fs::write(&path, [whole.clone(), second[..cut].to_vec()].concat()).unwrap();
            append_exit(&path, &exit).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            let (records, truncation) = read_all(&bytes[..]).unwrap();
            assert_eq!(truncation, None, "cut at {cut}");
            assert_eq!(records.len(), 2, "cut at {cut}: {records:?}");
            assert!(matches!(&records[1], Record::ProcessExit(e) if e.signal == Some(6)), "cut at {cut}");
            assert_eq!(bytes.len(), whole.len() + encode_records([&Record::ProcessExit(exit.clone())]).len());
        }
        // A trace ending on a block boundary loses nothing.
        let path = dir.join("whole.clrprof");
        std::fs::write(&path, [whole.clone(), second.clone()].concat()).unwrap();
        append_exit(&path, &exit).unwrap();
        let (records, _) = read_all(&std::fs::read(&path).unwrap()[..]).unwrap();
        assert_eq!(records.len(), 4);
        // Damage that is not a cut (an impossible block length) is never cut away.
        let mut bad = whole.clone();
        bad.extend_from_slice(&u32::MAX.to_le_bytes());
        bad.extend_from_slice(&[0; 12]);
        let path = dir.join("bad.clrprof");
        std::fs::write(&path, &bad).unwrap();
        append_exit(&path, &exit).unwrap();
        assert!(std::fs::read(&path).unwrap().starts_with(&bad));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn missing_agent_is_a_typed_error() {
        let e = find_agent(Some(Path::new("/nonexistent/libclrprof_agent.so"))).unwrap_err();
        assert!(e.downcast_ref::<AgentMissing>().is_some());
    }
}
