//! The .NET runtime's diagnostics IPC, client side (Linux): the Unix socket
//! `$TMPDIR/dotnet-diagnostic-{pid}-{key}-socket`, the 20-byte `DOTNET_IPC_V1` header and the
//! Profiler command set's `AttachProfiler` (research: attach-and-fleet.md §1).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 14] = b"DOTNET_IPC_V1\0";
const HEADER_LEN: usize = 20;
const PROFILER_SET: u8 = 0x03;
const ATTACH_PROFILER: u8 = 0x01;
const SERVER_SET: u8 = 0xFF;
const OK_ID: u8 = 0x00;
const ERROR_ID: u8 = 0xFF;

/// Known HRESULTs of the diagnostics server and of profiler loading.
pub mod hr {
    pub const BAD_ENCODING: u32 = 0x8013_1384;
    pub const UNKNOWN_COMMAND: u32 = 0x8013_1385;
    pub const UNKNOWN_MAGIC: u32 = 0x8013_1386;
    pub const NOT_SUPPORTED: u32 = 0x8013_1515;
    pub const NOT_YET_AVAILABLE: u32 = 0x8013_135B;
    pub const RUNTIME_UNINITIALIZED: u32 = 0x8013_1371;
    pub const PROFILER_ALREADY_ACTIVE: u32 = 0x8013_136A;
    pub const PROFILER_NOT_ATTACHABLE: u32 = 0x8013_1368;
    /// The agent's class factory declined: the clrprof agent is already loaded there.
    pub const PROFILER_CANCEL_ACTIVATION: u32 = 0x8013_1375;
    pub const MOD_NOT_FOUND: u32 = 0x8007_007E;
    pub const ACCESS_DENIED: u32 = 0x8007_0005;
}

/// A 16-byte CLSID in its in-memory layout (`Guid.ToByteArray()`), from `{xxxxxxxx-xxxx-…}`.
pub fn guid_bytes(text: &str) -> Option<[u8; 16]> {
    let hex: String = text.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    if hex.len() != 32 {
        return None;
    }
    let b = |i: usize| u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).ok();
    let mut raw = [0u8; 16];
    for (i, r) in raw.iter_mut().enumerate() {
        *r = b(i)?;
    }
    // Data1 (u32), Data2 (u16), Data3 (u16) little-endian; Data4 as is.
    let mut out = raw;
    out[0..4].copy_from_slice(&[raw[3], raw[2], raw[1], raw[0]]);
    out[4..6].copy_from_slice(&[raw[5], raw[4]]);
    out[6..8].copy_from_slice(&[raw[7], raw[6]]);
    Some(out)
}

/// The `AttachProfiler` message: header, then timeout (ms), CLSID, path (UTF-16 with its NUL,
/// length in chars first) and the client data. None when it exceeds the protocol's 64 KiB.
pub fn attach_message(timeout_ms: u32, clsid: &[u8; 16], path: &str, client_data: &[u8]) -> Option<Vec<u8>> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&timeout_ms.to_le_bytes());
    payload.extend_from_slice(clsid);
    let chars: Vec<u16> = path.encode_utf16().chain(std::iter::once(0)).collect();
    payload.extend_from_slice(&(chars.len() as u32).to_le_bytes());
    for c in chars {
        payload.extend_from_slice(&c.to_le_bytes());
    }
    payload.extend_from_slice(&(client_data.len() as u32).to_le_bytes());
    payload.extend_from_slice(client_data);
    let size = u16::try_from(HEADER_LEN + payload.len()).ok()?;
    let mut m = Vec::with_capacity(size as usize);
    m.extend_from_slice(MAGIC);
    m.extend_from_slice(&size.to_le_bytes());
    m.push(PROFILER_SET);
    m.push(ATTACH_PROFILER);
    m.extend_from_slice(&0u16.to_le_bytes());
    m.extend_from_slice(&payload);
    Some(m)
}

/// The server's answer: `Ok(code)` or `Err(HRESULT)`.
pub fn parse_reply(b: &[u8]) -> Result<Result<u32, u32>, String> {
    if b.len() < HEADER_LEN + 4 || &b[..14] != MAGIC {
        return Err(format!("unexpected reply from the diagnostics server ({} bytes)", b.len()));
    }
    let code = u32::from_le_bytes([b[20], b[21], b[22], b[23]]);
    match (b[16], b[17]) {
        (SERVER_SET, OK_ID) => Ok(Ok(code)),
        (SERVER_SET, ERROR_ID) => Ok(Err(code)),
        (s, i) => Err(format!("unexpected reply from the diagnostics server (command {s:#04x}/{i:#04x})")),
    }
}

/// The diagnostics socket of process `pid` in `dir`: `dotnet-diagnostic-{inner}-{key}-socket`, where
/// `inner` is the pid the process has in its own PID namespace (the runtime's `getpid()`; `pid`
/// itself unless it runs in another container). The key is the process's start time (jiffies since
/// boot, `/proc/{pid}/stat` field 22), so a socket left by an earlier process with the same
/// (reused) pid is told apart: it is never chosen. Without a readable start time, the newest
/// socket of the pid.
pub fn find_socket(dir: &Path, pid: u32, inner: u32) -> Option<PathBuf> {
    find_socket_with_key(dir, inner, start_time(pid))
}

fn find_socket_with_key(dir: &Path, pid: u32, key: Option<u64>) -> Option<PathBuf> {
    let prefix = format!("dotnet-diagnostic-{pid}-");
    let mut best: Option<(SystemTime, PathBuf)> = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&prefix).and_then(|r| r.strip_suffix("-socket")) else { continue };
        if rest.is_empty() || !rest.bytes().all(|c| c.is_ascii_digit()) {
            continue;
        }
        match key {
            Some(k) if rest.parse::<u64>().ok() == Some(k) => return Some(e.path()),
            Some(_) => continue,
            None => {}
        }
        let t = e.metadata().and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
        if best.as_ref().is_none_or(|(bt, _)| t > *bt) {
            best = Some((t, e.path()));
        }
    }
    best.map(|(_, p)| p)
}

/// A process's start time in jiffies since boot (`/proc/{pid}/stat` field 22), the runtime's
/// disambiguation key of its diagnostics socket.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ...`: comm may hold spaces and parentheses; fields resume after the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// How sending a command failed before the runtime answered.
#[derive(Debug)]
pub enum SendError {
    Connect(std::io::Error),
    TimedOut,
    Io(std::io::Error),
    Protocol(String),
}

/// Sends one message on a new connection and reads the 24-byte reply, waiting at most `wait`.
pub fn send(socket: &Path, message: &[u8], wait: Duration) -> Result<Result<u32, u32>, SendError> {
    let mut s = UnixStream::connect(socket).map_err(SendError::Connect)?;
    s.set_read_timeout(Some(wait)).map_err(SendError::Io)?;
    s.set_write_timeout(Some(wait)).map_err(SendError::Io)?;
    s.write_all(message).map_err(SendError::Io)?;
    let mut reply = [0u8; HEADER_LEN + 4];
    let mut got = 0;
    while got < reply.len() {
        match s.read(&mut reply[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(SendError::TimedOut)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(SendError::Io(e)),
        }
    }
    parse_reply(&reply[..got]).map_err(SendError::Protocol)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clsid_in_memory_layout() {
        let g = guid_bytes("{8A2F5B1E-3C4D-4E6F-9A0B-1C2D3E4F5A6B}").unwrap();
        assert_eq!(g, [0x1E, 0x5B, 0x2F, 0x8A, 0x4D, 0x3C, 0x6F, 0x4E, 0x9A, 0x0B, 0x1C, 0x2D, 0x3E, 0x4F, 0x5A, 0x6B]);
        assert!(guid_bytes("{nope}").is_none());
    }

    #[test]
    fn attach_message_layout() {
        let m = attach_message(10_000, &[7; 16], "/a", b"K=V").unwrap();
        assert_eq!(&m[..14], MAGIC);
        assert_eq!(u16::from_le_bytes([m[14], m[15]]) as usize, m.len());
        assert_eq!((m[16], m[17], m[18], m[19]), (3, 1, 0, 0));
        assert_eq!(&m[20..24], &10_000u32.to_le_bytes());
        assert_eq!(&m[24..40], &[7; 16]);
        assert_eq!(&m[40..44], &3u32.to_le_bytes()); // "/a" + NUL
        assert_eq!(&m[44..50], &[b'/', 0, b'a', 0, 0, 0]);
        assert_eq!(&m[50..54], &3u32.to_le_bytes());
        assert_eq!(&m[54..], b"K=V");
        assert!(attach_message(0, &[0; 16], "/a", &vec![0; 70_000]).is_none());
    }

    #[test]
    fn replies() {
        let mut ok = Vec::from(&MAGIC[..]);
        ok.extend_from_slice(&24u16.to_le_bytes());
        ok.extend_from_slice(&[0xFF, 0x00, 0, 0]);
        ok.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(parse_reply(&ok), Ok(Ok(0)));
        let mut err = ok.clone();
        err[17] = 0xFF;
        err[20..24].copy_from_slice(&hr::PROFILER_ALREADY_ACTIVE.to_le_bytes());
        assert_eq!(parse_reply(&err), Ok(Err(hr::PROFILER_ALREADY_ACTIVE)));
        assert!(parse_reply(&ok[..10]).is_err());
    }
}

#[cfg(test)]
mod socket_tests {
    use super::*;

    #[test]
    fn a_stale_socket_of_a_reused_pid_is_never_chosen() {
        let dir = std::env::temp_dir().join(format!("clrprof-ipc-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for name in
            ["dotnet-diagnostic-42-100-socket", "dotnet-diagnostic-42-200-socket", "dotnet-diagnostic-420-300-socket"]
        {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        let found =
            |key| find_socket_with_key(&dir, 42, key).map(|p| p.file_name().unwrap().to_string_lossy().into_owned());
        assert_eq!(found(Some(100)).as_deref(), Some("dotnet-diagnostic-42-100-socket"));
        assert_eq!(found(Some(200)).as_deref(), Some("dotnet-diagnostic-42-200-socket"));
        assert_eq!(found(Some(300)), None, "only other processes' sockets");
        assert!(found(None).is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_start_time_of_this_process_is_read() {
        let t = start_time(std::process::id()).expect("readable /proc/self/stat");
        assert!(t > 0);
    }
}
