//! `clrprof attach PID`: loads the agent into a running .NET process through the diagnostics IPC
//! (`AttachProfiler`), lets it record for `--duration` or until Ctrl-C, then ends the session
//! through a control socket: the agent completes the trace and detaches; the process runs on.
//!
//! The configuration travels as the client data of `AttachProfiler` (`CLRPROF_*=value` lines, the
//! variables `record` sets), plus `CLRPROF_CONTROL`, the Unix socket this command listens on and
//! the agent connects to. Protocol on that socket, one line each: agent `started PATH`; CLI
//! `stop`; agent `stopped RECORDS BYTES`, then `detached` once the runtime unloaded it.
//!
//! A target in another mount namespace (a container) is reached through `/proc/PID/root`
//! ([`crate::container`]): its diagnostics socket is looked up in its own temporary directory under
//! the pid it has in its PID namespace, and the agent copy, the control socket, the trace and the
//! agent's log are all placed in that directory, named by the paths the target sees; the trace is
//! moved out to the output path at the end, and nothing is left there.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clrprof_trace::AGENT_CLSID;

use crate::agent_env::{AgentEnv, Recording};
use crate::container::{Namespaces, Staging};
use crate::ipc::{self, hr, SendError};

/// Options of `clrprof attach`.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct AttachOptions {
    pub pid: u32,
    /// Stop after this long; `None` = at Ctrl-C.
    pub duration: Option<Duration>,
    /// Trace path; `None` = `<name>-<pid>-<unix time>.clrprof` in the current directory.
    pub output: Option<PathBuf>,
    pub agent: Option<PathBuf>,
    pub log: Option<PathBuf>,
    /// What the agent records (the same settings as `record`'s).
    pub recording: Recording,
    /// How long the runtime may take to load the agent.
    pub timeout: Duration,
    /// Stream to this `clrprof collect` (`ADDR:PORT`) instead of the file; the file is written only
    /// if the collector cannot be reached or goes away.
    pub server: Option<String>,
    /// The collector's token; `None` = `$CLRPROF_TOKEN` (the target does not inherit ours).
    pub token: Option<String>,
    /// TLS files for a `tls://` collector.
    pub tls: crate::agent_env::TlsFiles,
    /// `--count`: the patterns of the methods counted by ReJIT (empty: none).
    pub count: Vec<String>,
    /// `--count-top N`: count the N methods with the most CPU samples after `count_after`.
    pub count_top: Option<u32>,
    pub count_after: Duration,
}

impl AttachOptions {
    /// Whether the session counts calls by ReJIT (`--count` or `--count-top`).
    fn counting(&self) -> bool {
        !self.count.is_empty() || self.count_top.is_some()
    }
}

/// A process attach could not reach, with the reason in words.
#[derive(Debug)]
pub struct AttachError(pub String);

impl std::fmt::Display for AttachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AttachError {}

fn fail<T>(msg: String) -> Result<T> {
    Err(AttachError(msg).into())
}

/// What `/proc/PID` says about the target.
struct Target {
    pid: u32,
    /// Its `/proc/PID/status`.
    status: String,
    name: String,
    uid: u32,
    gid: u32,
    environ: Option<Vec<(String, String)>>,
    /// The directory of its `libcoreclr.so`, when loaded.
    coreclr: Option<PathBuf>,
}

impl Target {
    fn inspect(pid: u32) -> Result<Target> {
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let status = match std::fs::read_to_string(proc.join("status")) {
            Ok(s) => s,
            Err(_) => return fail(format!("no process with id {pid}")),
        };
        let field = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().to_string());
        let name = field("Name:").unwrap_or_default();
        let id = |k: &str| field(k).and_then(|v| v.split_whitespace().next().and_then(|u| u.parse().ok())).unwrap_or(0);
        let (uid, gid) = (id("Uid:"), id("Gid:"));
        let environ = std::fs::read(proc.join("environ")).ok().map(|b| {
            b.split(|&c| c == 0)
                .filter_map(|kv| {
                    let s = String::from_utf8_lossy(kv);
                    s.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect()
        });
        let coreclr = std::fs::read_to_string(proc.join("maps")).ok().and_then(|m| {
            m.lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .find(|p| p.ends_with("/libcoreclr.so"))
                .map(|p| Path::new(p).parent().unwrap_or(Path::new("/")).to_path_buf())
        });
        Ok(Target { pid, status, name, uid, gid, environ, coreclr })
    }

    fn env(&self, key: &str) -> Option<&str> {
        self.environ.as_ref()?.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The runtime's major version, from the directory of its `libcoreclr.so` (`…/8.0.11/`).
    fn runtime_major(&self) -> Option<u32> {
        let dir = self.coreclr.as_ref()?.file_name()?.to_string_lossy().into_owned();
        dir.split('.').next()?.parse().ok()
    }

    /// The directory of its diagnostics socket: its `TMPDIR`, else /tmp.
    fn tmpdir(&self) -> PathBuf {
        match self.env("TMPDIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => PathBuf::from("/tmp"),
        }
    }
}

fn euid() -> u32 {
    // Safety: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Why a process has no diagnostics socket.
fn explain_no_socket(t: &Target, dir: &str) -> String {
    let pid = t.pid;
    if t.coreclr.is_none() && t.environ.is_some() {
        return format!("process {pid} ({}) is not a .NET process (no CoreCLR runtime loaded)", t.name);
    }
    for k in ["DOTNET_EnableDiagnostics", "COMPlus_EnableDiagnostics", "DOTNET_EnableDiagnostics_IPC"] {
        if t.env(k) == Some("0") {
            return format!("diagnostics are disabled in process {pid} ({k}=0): the runtime opened no diagnostics socket, so a profiler cannot attach; restart it without {k}=0, or use `clrprof record`");
        }
    }
    if t.coreclr.is_none() {
        return format!("process {pid} ({}) has no .NET diagnostics socket in {dir}: not a .NET process?", t.name);
    }
    format!(
        "process {pid} ({}) runs .NET but has no diagnostics socket in {dir} (diagnostics disabled, or another TMPDIR)",
        t.name,
    )
}

fn explain_hresult(code: u32, t: &Target, agent: &Path, copied: bool) -> String {
    let pid = t.pid;
    match code {
        hr::UNKNOWN_COMMAND | hr::NOT_SUPPORTED => format!(
            "the runtime of process {pid} is too old for attach (it does not know AttachProfiler); clrprof attaches to .NET 8 or newer"
        ),
        hr::PROFILER_ALREADY_ACTIVE => format!(
            "a profiler is already loaded in process {pid} (another `clrprof attach` session, a start-up profiler such as `clrprof record`, or another tool); one profiler per process"
        ),
        hr::PROFILER_CANCEL_ACTIVATION => format!(
            "a profiler is already loaded in process {pid}: the clrprof agent itself (the process runs under `clrprof record`, or another `clrprof attach` session is still active)"
        ),
        hr::NOT_YET_AVAILABLE | hr::RUNTIME_UNINITIALIZED => {
            format!("the runtime of process {pid} is still starting; try again in a moment")
        }
        hr::MOD_NOT_FOUND if copied => format!(
            "process {pid} could not load the agent copied into its container at {}: a C library other than glibc (musl, as in Alpine images), or a temporary directory mounted noexec? see --log FILE",
            agent.display()
        ),
        hr::MOD_NOT_FOUND => format!(
            "process {pid} could not load the agent {}: the file is not visible there (another container or mount namespace?)",
            agent.display()
        ),
        hr::ACCESS_DENIED => format!("process {pid} may not read the agent {}", agent.display()),
        hr::BAD_ENCODING | hr::UNKNOWN_MAGIC => {
            format!("the runtime of process {pid} rejected the attach request (HRESULT 0x{code:08X})")
        }
        hr::PROFILER_NOT_ATTACHABLE => format!("the agent refused to attach to process {pid}"),
        _ => format!(
            "the agent could not start in process {pid} (HRESULT 0x{code:08X}); re-run with --log FILE for the agent's diagnostics"
        ),
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_stop_handler() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // Safety: installs a handler that only stores to an atomic.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The pid at the other end of a Unix socket (`SO_PEERCRED`).
fn peer_pid(s: &UnixStream) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // Safety: getsockopt writes at most `len` bytes into `cred`.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some(cred.pid as u32)
}

/// Removes the control socket's file when the command ends, however it ends.
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub fn attach(opts: &AttachOptions) -> Result<()> {
    let t = Target::inspect(opts.pid)?;
    let me = euid();
    if me != 0 && t.uid != me {
        return fail(format!(
            "process {} ({}) belongs to user id {}, not to you (user id {me}): attach as that user or as root",
            t.pid, t.name, t.uid
        ));
    }
    if let Some(major) = t.runtime_major() {
        if major < 8 {
            return fail(format!("process {} runs .NET {major}, too old: clrprof attaches to .NET 8 or newer", t.pid));
        }
        if major == 9 && opts.counting() {
            return fail(format!(
                "process {} runs .NET 9: --count and --count-top are refused there, ReJIT after attach can crash .NET 9 (runtime issues #100024, #112636; fixed by runtime PR #117765 in .NET 10 only). Use .NET 8 or 10, or `clrprof record --count` at start-up",
                t.pid
            ));
        }
    }
    let ns = Namespaces::of(t.pid, &t.status).map_err(AttachError)?;
    // In another mount namespace (a container), everything the agent must see is placed in the
    // target's own temporary directory, reached through /proc/PID/root.
    let mut staging = match ns.mount {
        true => Some(Staging::open(t.pid, &t.tmpdir(), ns.user.then_some((t.uid, t.gid))).map_err(AttachError)?),
        false => None,
    };
    let log_inside = match (&mut staging, &opts.log) {
        (Some(s), Some(_)) => {
            let name = format!("clrprof-log-{}-{}.log", std::process::id(), unix_nanos());
            s.place(&name);
            Some(s.inside(&name))
        }
        _ => None,
    };
    let result = session(opts, &t, &ns, &mut staging, log_inside.as_deref());
    // The agent's log comes out of the container whatever happened: it says why, on errors.
    if let (Some(s), Some(inside), Some(log)) = (&mut staging, &log_inside, &opts.log) {
        if s.exists(inside) {
            if let Err(e) = s.append_out(inside, log) {
                eprintln!(
                    "clrprof: warning: cannot copy the agent's log out of the container to {}: {e}",
                    log.display()
                );
            }
        }
    }
    result
}

fn unix_nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// The session proper: `staging` is the target's temporary directory when it runs in another
/// mount namespace (`log_inside`: the agent's log there).
fn session(
    opts: &AttachOptions,
    t: &Target,
    ns: &Namespaces,
    staging: &mut Option<Staging>,
    log_inside: Option<&Path>,
) -> Result<()> {
    let me = euid();
    let (dir, shown_dir) = match staging {
        Some(s) => (s.host(""), format!("{} (process {}'s filesystem)", t.tmpdir().display(), t.pid)),
        None => (t.tmpdir(), t.tmpdir().display().to_string()),
    };
    let Some(socket) = ipc::find_socket(&dir, t.pid, ns.inner_pid) else {
        return fail(explain_no_socket(t, &shown_dir));
    };
    let agent = crate::record::find_agent(opts.agent.as_deref())?;
    let agent_inside = match staging {
        Some(s) => s.agent(&agent).map_err(AttachError)?,
        None => agent.clone(),
    };

    let output = match &opts.output {
        Some(p) => {
            if p.exists() {
                std::fs::remove_file(p).with_context(|| format!("cannot replace {}", p.display()))?;
            }
            std::path::absolute(p).unwrap_or_else(|_| p.clone())
        }
        None => {
            let name: String =
                t.name.chars().map(|c| if c.is_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
            std::path::absolute(format!("{name}-{}-{}.clrprof", t.pid, unix_secs()))?
        }
    };
    crate::record::check_output_dir(&output)?;
    // In a container, the agent writes in the target's temporary directory; the trace is moved
    // out to `output` at the end.
    let output_inside = match staging {
        Some(s) => {
            let name = format!("clrprof-trace-{}-{}.clrprof", std::process::id(), unix_nanos());
            s.place(&name);
            s.inside(&name)
        }
        None => output.clone(),
    };

    // The control socket, next to the runtime's own (visible to the target, short enough).
    let sock_name = format!("clrprof-attach-{}-{}.sock", std::process::id(), unix_secs());
    let (control, control_inside, listener) = match staging {
        Some(s) => {
            let l = s.listen(&sock_name);
            (s.host(&sock_name), s.inside(&sock_name), l)
        }
        None => {
            let c = std::env::temp_dir().join(&sock_name);
            let _ = std::fs::remove_file(&c);
            (c.clone(), c.clone(), UnixListener::bind(&c))
        }
    };
    let listener = listener.with_context(|| format!("cannot listen on {}", control_inside.display()))?;
    let _cleanup = staging.is_none().then(|| SocketFile(control.clone()));
    if t.uid != me || ns.user {
        // The agent runs as the target's user: it must be able to connect (the peer is checked).
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o666));
    }

    let token = opts.token.clone().or_else(|| std::env::var("CLRPROF_TOKEN").ok()).filter(|t| !t.is_empty());
    let mut env = AgentEnv::default();
    env.output(&output_inside)
        .control(&control_inside)
        .log(log_inside.or(opts.log.as_deref()))
        .recording(&opts.recording)
        .server(opts.server.as_deref(), token.as_deref())
        .tls(&opts.tls);
    if staging.is_some() {
        env.no_cache();
    }
    if opts.counting() {
        env.instrument(&crate::agent_env::InstrumentOptions {
            count: true,
            include: opts.count.clone(),
            ..Default::default()
        });
    }
    if let Some(n) = opts.count_top {
        env.count_top(n, opts.count_after);
    }
    let data = env.lines();
    let clsid = ipc::guid_bytes(AGENT_CLSID).context("the agent's CLSID")?;
    let agent_text = agent_inside.to_string_lossy();
    let Some(message) = ipc::attach_message(10_000, &clsid, &agent_text, data.as_bytes()) else {
        bail!("the attach request is too large (over 64 KiB): shorten the paths or patterns");
    };

    install_stop_handler();
    let t0 = Instant::now();
    let reply = ipc::send(&socket, &message, opts.timeout);
    match reply {
        Ok(Ok(_)) => {}
        Ok(Err(code)) => {
            let mut why = explain_hresult(code, t, &agent_inside, staging.is_some());
            if !opts.count.is_empty() {
                why += " (--count: the agent refuses .NET 9, and needs patterns)";
            } else if opts.count_top.is_some() {
                why += " (--count-top: the agent refuses .NET 9, and needs the sampler)";
            }
            return fail(why);
        }
        Err(SendError::Connect(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return fail(format!(
                "permission denied on the diagnostics socket of process {} ({}): it belongs to another user; attach as that user or as root",
                t.pid,
                socket.display()
            ))
        }
        Err(SendError::Connect(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return fail(format!(
                "process {} does not answer on its diagnostics socket {} (it exited, or the socket is stale)",
                t.pid,
                socket.display()
            ))
        }
        Err(SendError::Connect(e)) => {
            return Err(e).with_context(|| format!("cannot connect to {}", socket.display()))
        }
        Err(SendError::TimedOut) => {
            return fail(format!(
                "attach to process {} timed out after {} s: the runtime did not answer (suspended, or busy); try --timeout",
                t.pid,
                opts.timeout.as_secs()
            ))
        }
        Err(SendError::Io(e)) => {
            return Err(e).with_context(|| format!("talking to the diagnostics socket of process {}", t.pid))
        }
        Err(SendError::Protocol(m)) => return fail(m),
    }
    let loaded = t0.elapsed();

    // The agent's control thread connects once the catch-up is done.
    listener.set_nonblocking(true)?;
    let conn = loop {
        match listener.accept() {
            Ok((s, _)) if peer_pid(&s) == Some(t.pid) => break s,
            Ok(_) => continue, // not the target: ignored
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if t0.elapsed() > opts.timeout + Duration::from_secs(5) {
                    return fail(format!(
                        "the agent loaded in process {} but never reported back; see --log FILE",
                        t.pid
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e).context("waiting for the agent"),
        }
    };
    conn.set_nonblocking(false)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line).context("reading from the agent")?;
    let mut trace = line.trim().strip_prefix("started ").map(PathBuf::from).unwrap_or(output_inside.clone());
    if staging.is_some() {
        // Written inside the container at `trace`, moved out to `output` at the end.
        if trace.parent() != output_inside.parent() {
            trace = output_inside.clone();
        }
        if let Some(s) = staging.as_mut() {
            if trace != output_inside {
                s.place(&trace.file_name().unwrap_or_default().to_string_lossy());
            }
        }
    }
    let shown = if staging.is_some() { output.clone() } else { trace.clone() };
    let who = match ns.pid {
        true => format!("{} ({}; pid {} in its container)", t.pid, t.name, ns.inner_pid),
        false => format!("{} ({})", t.pid, t.name),
    };
    if opts.recording.heap.on_attach && opts.duration == Some(Duration::ZERO) {
        eprintln!(
            "clrprof: attached to process {who} in {} ms and took a heap snapshot into {}",
            loaded.as_millis(),
            shown.display()
        );
    } else {
        eprintln!(
            "clrprof: attached to process {who} in {} ms, recording to {}{}",
            loaded.as_millis(),
            match &opts.server {
                Some(s) => format!("the collector at {s} (or {} if it cannot be reached)", shown.display()),
                None => shown.display().to_string(),
            },
            match opts.duration {
                Some(d) => format!(" for {} s", d.as_secs_f64()),
                None => "; Ctrl-C to stop".into(),
            }
        );
        if let Some(n) = opts.count_top {
            eprintln!(
                "clrprof: the {n} methods with the most CPU samples are counted from {} s into the session on (the trace's messages name them)",
                opts.count_after.as_secs_f64()
            );
        }
    }

    // Wait for the duration, Ctrl-C, or the process ending (the agent closes the connection).
    conn.set_read_timeout(Some(Duration::from_millis(100)))?;
    let started = Instant::now();
    let mut exited = false;
    loop {
        if STOP.load(Ordering::SeqCst) || opts.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        let mut l = String::new();
        match reader.read_line(&mut l) {
            Ok(0) => {
                exited = true;
                break;
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => {
                exited = true;
                break;
            }
        }
    }
    if exited {
        eprintln!("clrprof: process {} ended during the session", t.pid);
    } else {
        let mut w = conn.try_clone()?;
        let _ = writeln!(w, "stop");
        conn.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut detached = false;
        let mut stopped = false;
        loop {
            let mut l = String::new();
            match reader.read_line(&mut l) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let l = l.trim();
                    if l.starts_with("stopped") {
                        stopped = true;
                        conn.set_read_timeout(Some(Duration::from_secs(15)))?;
                    } else if l == "detached" {
                        detached = true;
                        break;
                    } else if let Some(code) = l.strip_prefix("detach-refused ") {
                        eprintln!("clrprof: note: the runtime kept the agent loaded (detach refused, {code}); it stays idle, and a later attach to this process is refused");
                        break;
                    }
                }
            }
        }
        if !stopped {
            eprintln!("clrprof: warning: the agent did not confirm the end of the session; the trace may be cut off");
        } else if !detached {
            eprintln!("clrprof: note: the agent has not detached yet; a new attach may have to wait a moment");
        }
    }
    let written = match staging {
        Some(s) if s.exists(&trace) => {
            s.bring_out(&trace, &output).with_context(|| {
                format!(
                    "cannot move the trace out of process {}'s filesystem ({}) to {}",
                    t.pid,
                    trace.display(),
                    output.display()
                )
            })?;
            trace = output.clone();
            true
        }
        Some(_) => false,
        None => trace.is_file(),
    };
    if let (Some(server), false) = (&opts.server, written) {
        eprintln!("clrprof: trace streamed to the collector at {server} (`clrprof runs`, `clrprof report run:latest`)");
        return Ok(());
    }
    if let Some(server) = &opts.server {
        eprintln!(
            "clrprof: warning: the collector at {server} was unreachable or went away during the session; the rest of the trace is in the file below"
        );
    }
    let size = std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0);
    eprintln!("clrprof: trace written to {} ({})", trace.display(), crate::record::human_size(size));
    Ok(())
}
