//! The collector protocol (see `docs/collector.md`): what an agent sends before its trace when it
//! streams to `clrprof collect`, and the collector's one-message answer.
//!
//! ```text
//! client → hello  = "CLRPRUN\0" u32:protocol u32:len meta[len]
//!          meta   = u8:kind str:token str:host u32:pid u64:start_unix_ns str:command str:runtime i32:exit_code
//!                   [u8:flags]                      (flag 1: the agent takes settings from the collector)
//!          str    = u32:len utf8[len]
//! server → answer = u8:status u64:run_id            (status 0 accepted, then the client sends the trace)
//!                   [str:settings]                  (status 4 only: accepted, with `CLRPROF_*=value` lines)
//! client → trace  = the trace file format (header block*), unchanged, until the client closes
//! ```
//!
//! `kind` 0 opens a run (the trace follows). `kind` 1 is an exit notice from `clrprof record`: the
//! child with `pid` on `host` exited with `exit_code` (or died of signal `-exit_code - 1` when
//! negative); nothing follows. No `unsafe`; no allocation beyond the strings.

use std::io::{self, Read};

pub const HELLO_MAGIC: [u8; 8] = *b"CLRPRUN\0";
/// The protocol version this crate speaks.
pub const PROTOCOL: u32 = 1;
/// Largest metadata a hello may carry (a long command line fits; more is refused).
pub const MAX_META: usize = 64 << 10;

/// The collector's answer to a hello.
pub mod status {
    pub const ACCEPTED: u8 = 0;
    pub const BAD_TOKEN: u8 = 1;
    pub const UNSUPPORTED: u8 = 2;
    pub const REFUSED: u8 = 3;
    /// Accepted, and settings follow the answer (`str`, `CLRPROF_*=value` lines): sent only to an
    /// agent whose hello has [`super::flags::TAKES_SETTINGS`].
    pub const ACCEPTED_WITH_SETTINGS: u8 = 4;

    pub fn name(s: u8) -> &'static str {
        match s {
            ACCEPTED | ACCEPTED_WITH_SETTINGS => "accepted",
            BAD_TOKEN => "wrong or missing token",
            UNSUPPORTED => "unsupported protocol version",
            _ => "refused",
        }
    }
}

/// The hello's optional flags (a byte after `exit_code`; collectors before it ignore it).
pub mod flags {
    /// The agent reads settings after an [`super::status::ACCEPTED_WITH_SETTINGS`] answer.
    pub const TAKES_SETTINGS: u8 = 1;
}

/// Largest settings text a collector sends.
pub const MAX_SETTINGS: usize = 64 << 10;

/// The collector's answer with settings: the 9 bytes of [`encode_answer`] with
/// [`status::ACCEPTED_WITH_SETTINGS`], then the text as a `str`.
pub fn encode_answer_with_settings(run: u64, settings: &str) -> Vec<u8> {
    let mut out = encode_answer(status::ACCEPTED_WITH_SETTINGS, run).to_vec();
    put_str(&mut out, settings);
    out
}

/// Reads the settings that follow an [`status::ACCEPTED_WITH_SETTINGS`] answer.
pub fn read_settings(input: &mut impl Read) -> io::Result<String> {
    let mut len = [0u8; 4];
    input.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_SETTINGS {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("collector settings of {len} bytes")));
    }
    let mut b = vec![0u8; len];
    input.read_exact(&mut b)?;
    String::from_utf8(b).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "collector settings are not UTF-8"))
}

/// What a hello opens.
pub mod kind {
    pub const RUN: u8 = 0;
    pub const EXIT: u8 = 1;
}

/// The metadata of a hello.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hello {
    pub kind: u8,
    pub token: String,
    pub host: String,
    pub pid: u32,
    pub start_unix_ns: u64,
    pub command: String,
    /// Empty when not known.
    pub runtime: String,
    /// Exit notices only: the exit code, or `-signal - 1`.
    pub exit_code: i32,
    /// [`flags`] (0 in hellos of older agents).
    pub flags: u8,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Why a hello was not understood.
#[derive(Debug)]
pub enum HelloError {
    Io(io::Error),
    /// Not a clrprof agent (the first bytes are not the magic).
    Foreign,
    Unsupported(u32),
    Malformed(String),
}

impl std::fmt::Display for HelloError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HelloError::Io(e) => write!(f, "{e}"),
            HelloError::Foreign => write!(f, "not a clrprof agent (bad magic)"),
            HelloError::Unsupported(v) => {
                write!(f, "protocol version {v} is not supported (this collector speaks {PROTOCOL})")
            }
            HelloError::Malformed(m) => write!(f, "malformed hello: {m}"),
        }
    }
}

impl std::error::Error for HelloError {}

impl From<io::Error> for HelloError {
    fn from(e: io::Error) -> Self {
        HelloError::Io(e)
    }
}

impl Hello {
    /// The hello's bytes (magic, protocol, metadata). Strings longer than fit are shortened.
    pub fn encode(&self) -> Vec<u8> {
        let mut meta = Vec::new();
        meta.push(self.kind);
        let clip = |s: &str, n: usize| -> String {
            if s.len() <= n {
                return s.to_string();
            }
            let mut end = n;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s[..end].to_string()
        };
        put_str(&mut meta, &clip(&self.token, 1024));
        put_str(&mut meta, &clip(&self.host, 1024));
        meta.extend_from_slice(&self.pid.to_le_bytes());
        meta.extend_from_slice(&self.start_unix_ns.to_le_bytes());
        put_str(&mut meta, &clip(&self.command, MAX_META - 4096));
        put_str(&mut meta, &clip(&self.runtime, 256));
        meta.extend_from_slice(&self.exit_code.to_le_bytes());
        if self.flags != 0 {
            meta.push(self.flags);
        }
        let mut out = Vec::with_capacity(16 + meta.len());
        out.extend_from_slice(&HELLO_MAGIC);
        out.extend_from_slice(&PROTOCOL.to_le_bytes());
        out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        out.extend_from_slice(&meta);
        out
    }

    /// Reads a hello. Never reads more than the hello, never allocates more than [`MAX_META`].
    pub fn read(input: &mut impl Read) -> Result<Hello, HelloError> {
        let mut head = [0u8; 16];
        let mut got = 0;
        while got < head.len() {
            let n = match input.read(&mut head[got..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Err(if head[..got] == HELLO_MAGIC[..got.min(8)] {
                    HelloError::Malformed(format!("connection closed after {got} bytes of the hello"))
                } else {
                    HelloError::Foreign
                });
            }
            got += n;
            if head[..got.min(8)] != HELLO_MAGIC[..got.min(8)] {
                return Err(HelloError::Foreign);
            }
        }
        let version = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if version != PROTOCOL {
            return Err(HelloError::Unsupported(version));
        }
        let len = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as usize;
        if len > MAX_META {
            return Err(HelloError::Malformed(format!("metadata of {len} bytes (at most {MAX_META})")));
        }
        let mut meta = vec![0u8; len];
        input.read_exact(&mut meta).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => HelloError::Malformed("connection closed inside the metadata".into()),
            _ => HelloError::Io(e),
        })?;
        Hello::decode_meta(&meta)
    }

    fn decode_meta(m: &[u8]) -> Result<Hello, HelloError> {
        let mut c = Cursor { m, pos: 0 };
        let kind = c.take(1, "kind")?[0];
        if kind != self::kind::RUN && kind != self::kind::EXIT {
            return Err(HelloError::Malformed(format!("unknown kind {kind}")));
        }
        let token = c.string("token")?;
        let host = c.string("host")?;
        let pid = u32::from_le_bytes(c.array("pid")?);
        let start_unix_ns = u64::from_le_bytes(c.array("start")?);
        let command = c.string("command")?;
        let runtime = c.string("runtime")?;
        let exit_code = i32::from_le_bytes(c.array("exit code")?);
        // Optional, and anything after it is a newer agent's: ignored.
        let flags = c.take(1, "flags").map(|b| b[0]).unwrap_or(0);
        Ok(Hello { kind, token, host, pid, start_unix_ns, command, runtime, exit_code, flags })
    }
}

struct Cursor<'a> {
    m: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], HelloError> {
        if self.m.len() - self.pos < n {
            return Err(HelloError::Malformed(format!("metadata cut in {what}")));
        }
        self.pos += n;
        Ok(&self.m[self.pos - n..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], HelloError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn string(&mut self, what: &str) -> Result<String, HelloError> {
        let n = u32::from_le_bytes(self.array(what)?) as usize;
        let s = self.take(n, what)?;
        String::from_utf8(s.to_vec()).map_err(|_| HelloError::Malformed(format!("{what} is not UTF-8")))
    }
}

/// The collector's answer: status and run id.
pub fn encode_answer(status: u8, run: u64) -> [u8; 9] {
    let mut a = [0u8; 9];
    a[0] = status;
    a[1..].copy_from_slice(&run.to_le_bytes());
    a
}

/// Decodes a 9-byte answer.
pub fn decode_answer(a: &[u8; 9]) -> (u8, u64) {
    (a[0], u64::from_le_bytes([a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]]))
}

/// Records the agent keeps while streaming so that, should the collector go, the local file it
/// falls back to is readable on its own: the process, loads, names, threads, instrumentation
/// set-up, call-tree nodes, sampler settings, mappings, stacks (sampled, contention, exception
/// and allocation ones), exception types and code ranges — everything later records refer to. Costs and events (samples, deltas, exceptions, GCs) are not kept.
pub fn is_definition(tag: u16) -> bool {
    matches!(tag, 1 | 4 | 10..=31 | 34 | 50 | 51 | 52 | 56 | 85 | 87 | 88 | 94)
}

/// Calls `f(tag, record_bytes)` for every record of a block payload (tag, length and body), without
/// decoding the bodies. Stops at the first record that does not fit.
pub fn for_each_record(payload: &[u8], mut f: impl FnMut(u16, &[u8])) {
    let mut pos = 0usize;
    while let Some(n) = record_len(&payload[pos..]) {
        f(u16::from_le_bytes([payload[pos], payload[pos + 1]]), &payload[pos..pos + n]);
        pos += n;
    }
}

/// The bytes of the whole record `payload` starts with (tag, length and body), if it does.
fn record_len(payload: &[u8]) -> Option<usize> {
    let head = payload.get(..6)?;
    let len = u32::from_le_bytes([head[2], head[3], head[4], head[5]]) as usize;
    (payload.len() - 6 >= len).then_some(6 + len)
}

/// The bytes of the whole records at the start of `payload` that fit in `limit` bytes, or of the
/// first record alone when it is larger; 0 when `payload` does not start with a whole record. Reads
/// no further than the cut.
pub fn records_within(payload: &[u8], limit: usize) -> usize {
    let mut end = 0;
    while let Some(n) = record_len(&payload[end..]) {
        if end > 0 && end + n > limit {
            break;
        }
        end += n;
    }
    end
}

/// This machine's host name (the UTS name, as `gethostname` gives it), as agents and collectors
/// name themselves in the wire protocol; `unknown` when it cannot be read.
pub fn hostname() -> String {
    match std::fs::read_to_string("/proc/sys/kernel/hostname") {
        Ok(h) if !h.trim().is_empty() => h.trim().to_string(),
        _ => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_and_bad_input() {
        let h = Hello {
            kind: kind::RUN,
            token: "s3cret".into(),
            host: "web-1".into(),
            pid: 42,
            start_unix_ns: 7,
            command: "dotnet app.dll --port 80".into(),
            runtime: "10.0.1".into(),
            exit_code: 0,
            flags: 0,
        };
        let b = h.encode();
        assert_eq!(Hello::read(&mut &b[..]).unwrap(), h);
        // The flags byte is optional: an older collector ignores it, this one reads it.
        let with = Hello { flags: flags::TAKES_SETTINGS, ..h.clone() };
        assert_eq!(Hello::read(&mut &with.encode()[..]).unwrap(), with);
        assert_eq!(with.encode().len(), b.len() + 1);
        let a = encode_answer_with_settings(7, "CLRPROF_TRIGGER=gc-pause>1s\n");
        assert_eq!(decode_answer(a[..9].try_into().unwrap()), (status::ACCEPTED_WITH_SETTINGS, 7));
        assert_eq!(read_settings(&mut &a[9..]).unwrap(), "CLRPROF_TRIGGER=gc-pause>1s\n");
        for cut in 0..b.len() {
            assert!(Hello::read(&mut &b[..cut]).is_err(), "cut at {cut}");
        }
        assert!(matches!(Hello::read(&mut &b"GET / HTTP/1.1\r\n\r\n"[..]), Err(HelloError::Foreign)));
        let mut v2 = b.clone();
        v2[8] = 2;
        assert!(matches!(Hello::read(&mut &v2[..]), Err(HelloError::Unsupported(2))));
        let mut huge = b.clone();
        huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Hello::read(&mut &huge[..]), Err(HelloError::Malformed(_))));
        assert_eq!(decode_answer(&encode_answer(status::BAD_TOKEN, 9)), (1, 9));
    }
}
