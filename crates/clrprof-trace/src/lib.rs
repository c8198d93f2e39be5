//! The clrprof trace format, version 1 (see `docs/trace-format.md`).
//!
//! ```text
//! file   = header block*
//! header = "CLRPROF\0" u32:version u32:flags           (16 bytes)
//! block  = u32:len u32:crc32(payload) payload[len]      (payload = record*)
//! record = u16:tag u32:len body[len]
//! ```
//!
//! The agent writes one block per flush, so a trace cut short (crash, `kill -9`) ends in at most one
//! partial block; [`Decoder`] reads everything before it and reports the damage instead of failing.
//! No `unsafe`; one dependency (crc32fast, for block checksums).
#![forbid(unsafe_code)]

mod alloc_stacks;
mod codec;
mod crc32;
pub mod heap;
mod records;
mod stream;
pub mod tasks;
pub mod trigger;
pub mod wire;

use std::collections::BTreeMap;
use std::io::{self, Read};

pub use alloc_stacks::{AllocationStackInterner, AllocationStacks, MAX_ALLOCATION_STACKS};
pub use codec::{Field, Reader};
pub use crc32::crc32;
pub use records::*;
pub use stream::{StreamDecoder, TraceReader, TraceSource};

pub const MAGIC: [u8; 8] = *b"CLRPROF\0";
/// The version this crate writes and the newest it reads.
pub const VERSION: u32 = 1;
pub const HEADER_LEN: usize = 16;
/// Largest block a writer produces; larger lengths mean corruption.
pub const MAX_BLOCK: usize = 64 << 20;

/// Why a trace cannot be read (or could be read only in part).
#[derive(Debug)]
pub enum DecodeError {
    Io(io::Error),
    /// The file does not start with the clrprof magic.
    NotATrace,
    /// Written by a newer clrprof.
    NewerVersion(u32),
    Empty,
    Corrupt(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Io(e) => write!(f, "{e}"),
            DecodeError::NotATrace => write!(f, "not a clrprof trace (bad magic)"),
            DecodeError::NewerVersion(v) => {
                write!(
                    f,
                    "trace format version {v} is newer than this clrprof reads (version {VERSION}); upgrade clrprof"
                )
            }
            DecodeError::Empty => write!(f, "empty file: the profiler never wrote a header (did the agent load?)"),
            DecodeError::Corrupt(m) => write!(f, "corrupt trace: {m}"),
        }
    }
}

impl std::error::Error for DecodeError {}

impl From<io::Error> for DecodeError {
    fn from(e: io::Error) -> Self {
        DecodeError::Io(e)
    }
}

/// The UTC calendar time of a Unix time in seconds (the traces' wall-clock times are Unix times):
/// (year, month 1-12, day 1-31, hour, minute, second). Civil date from days since 1970-01-01 by
/// Howard Hinnant's algorithm.
pub fn utc_from_unix(secs: i64) -> (i64, i64, i64, i64, i64, i64) {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The 16-byte file header.
pub fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// Frames encoded records (`payload`) as one block.
pub fn encode_block(payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(payload.len() + 8);
    b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    b.extend_from_slice(&crc32(payload).to_le_bytes());
    b.extend_from_slice(payload);
    b
}

/// Encodes records into one block.
pub fn encode_records<'a>(records: impl IntoIterator<Item = &'a Record>) -> Vec<u8> {
    let mut payload = Vec::new();
    for r in records {
        r.encode(&mut payload);
    }
    encode_block(&payload)
}

/// Where a trace ended early: it was cut off mid-block (a crash or kill while writing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// Byte offset of the partial block.
    pub offset: u64,
    /// Bytes present of that block (header included).
    pub have: u64,
    /// Bytes the block needed.
    pub need: u64,
}

impl std::fmt::Display for Truncation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "trace is truncated at byte {} (last block has {} of {} bytes); read everything before it",
            self.offset, self.have, self.need
        )
    }
}

/// Where the trace file `file` ends with a block cut short (a writer that died mid-block), found
/// from the block headers alone — no payload is read or decoded, so it costs one small read per
/// block. None when the file ends on a block boundary, and also when it is no trace or a block
/// header claims more than [`MAX_BLOCK`]: that is damage for readers to report, not a cut.
pub fn cut_last_block(file: &std::fs::File) -> Option<Truncation> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata().ok()?.len();
    let mut head = [0u8; HEADER_LEN];
    file.read_exact_at(&mut head, 0).ok()?;
    if head[..MAGIC.len()] != MAGIC {
        return None;
    }
    let mut offset = HEADER_LEN as u64;
    while offset < len {
        let have = len - offset;
        if have < 8 {
            return Some(Truncation { offset, have, need: 8 });
        }
        let mut h = [0u8; 4];
        file.read_exact_at(&mut h, offset).ok()?;
        let block = u32::from_le_bytes(h) as u64;
        if block > MAX_BLOCK as u64 {
            return None;
        }
        if have < 8 + block {
            return Some(Truncation { offset, have, need: 8 + block });
        }
        offset += 8 + block;
    }
    None
}

/// Pull decoder over a reader: yields records block by block (a [`StreamDecoder`] fed from the
/// reader). Never panics on any input.
pub struct Decoder<R: Read> {
    input: R,
    stream: StreamDecoder,
    buf: Vec<u8>,
    pending: std::collections::VecDeque<Record>,
    truncation: Option<Truncation>,
    skipped: BTreeMap<u16, u64>,
    done: bool,
}

/// Bytes read from the input at a time.
const READ_CHUNK: usize = 256 << 10;

impl<R: Read> Decoder<R> {
    /// Reads and checks the header.
    pub fn new(input: R) -> Result<Self, DecodeError> {
        let mut d = Decoder {
            input,
            stream: StreamDecoder::new(),
            buf: vec![0; READ_CHUNK],
            pending: Default::default(),
            truncation: None,
            skipped: BTreeMap::new(),
            done: false,
        };
        while d.stream.version().is_none() {
            if !d.fill()? {
                // The input ended before a whole header: says what it was instead.
                d.stream.finish()?;
            }
        }
        Ok(d)
    }

    pub fn version(&self) -> u32 {
        self.stream.version().unwrap_or(VERSION)
    }

    /// Set once the decoder met a partial last block.
    pub fn truncation(&self) -> Option<&Truncation> {
        self.truncation.as_ref()
    }

    /// Records of tags this version does not know (written by a newer clrprof), counted per tag,
    /// among the records read so far. They are yielded as [`Record::Unknown`]; readers skip them
    /// and can say how many they skipped.
    pub fn skipped(&self) -> &BTreeMap<u16, u64> {
        &self.skipped
    }

    /// Byte offset of the next block not decoded yet.
    pub fn offset(&self) -> u64 {
        self.stream.offset()
    }

    /// Feeds one read of the input to the stream decoder; false at the end of the input.
    fn fill(&mut self) -> Result<bool, DecodeError> {
        let n = loop {
            match self.input.read(&mut self.buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        };
        if n == 0 {
            return Ok(false);
        }
        let mut records = Vec::new();
        self.stream.push(&self.buf[..n], &mut records)?;
        self.pending.extend(records);
        Ok(true)
    }

    /// The next record, `Ok(None)` at the end (check [`Decoder::truncation`]), or an error for
    /// corruption. After an error the decoder yields nothing more.
    pub fn next_record(&mut self) -> Result<Option<Record>, DecodeError> {
        loop {
            if let Some(r) = self.pending.pop_front() {
                if let Record::Unknown { tag, .. } = r {
                    *self.skipped.entry(tag).or_insert(0) += 1;
                }
                return Ok(Some(r));
            }
            if self.done {
                return Ok(None);
            }
            let step = self.fill().and_then(|more| if more { Ok(None) } else { self.stream.finish().map(Some) });
            match step {
                Ok(None) => {}
                Ok(Some(truncation)) => {
                    self.done = true;
                    self.truncation = truncation;
                    return Ok(None);
                }
                Err(e) => {
                    self.done = true;
                    return Err(e);
                }
            }
        }
    }
}

/// Decodes the records of one block payload.
pub fn decode_payload(payload: &[u8]) -> Result<Vec<Record>, DecodeError> {
    let mut out = Vec::new();
    decode_payload_each(payload, |r| out.push(r))?;
    Ok(out)
}

/// Decodes the records of one block payload, handing each to `f` as it is decoded (no list of
/// records in between). On damage, the records before it have been handed over.
pub fn decode_payload_each(payload: &[u8], mut f: impl FnMut(Record)) -> Result<(), DecodeError> {
    let mut pos = 0usize;
    while pos < payload.len() {
        if payload.len() - pos < 6 {
            return Err(DecodeError::Corrupt(format!("record header cut at {pos}")));
        }
        let tag = u16::from_le_bytes([payload[pos], payload[pos + 1]]);
        let len = u32::from_le_bytes([payload[pos + 2], payload[pos + 3], payload[pos + 4], payload[pos + 5]]) as usize;
        pos += 6;
        if payload.len() - pos < len {
            return Err(DecodeError::Corrupt(format!(
                "record of tag {tag} claims {len} bytes, {} remain",
                payload.len() - pos
            )));
        }
        f(decode_record(tag, &payload[pos..pos + len])?);
        pos += len;
    }
    Ok(())
}

/// [`Record::decode`], with the sample records (most of a sampled trace) read directly when their
/// body has exactly the fields this version knows.
#[inline]
fn decode_record(tag: u16, body: &[u8]) -> Result<Record, DecodeError> {
    if (body.len() == 28 || (body.len() == 32 && tag == CpuSample::TAG))
        && (tag == CpuSample::TAG || tag == WallSample::TAG)
    {
        let u64_at = |i: usize| {
            u64::from_le_bytes([
                body[i],
                body[i + 1],
                body[i + 2],
                body[i + 3],
                body[i + 4],
                body[i + 5],
                body[i + 6],
                body[i + 7],
            ])
        };
        let u32_at = |i: usize| u32::from_le_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
        let (ts, os_tid, stack, count, ns) = (u64_at(0), u32_at(8), u32_at(12), u32_at(16), u64_at(20));
        return Ok(if tag == CpuSample::TAG {
            let activity = if body.len() == 32 { u32_at(28) } else { 0 };
            CpuSample { ts, os_tid, stack, count, cpu_ns: ns, activity }.into()
        } else {
            WallSample { ts, os_tid, stack, count, wall_ns: ns }.into()
        });
    }
    Record::decode(tag, body)
}

/// Reads a whole trace: all records, plus the truncation if the trace was cut off.
pub fn read_all<R: Read>(input: R) -> Result<(Vec<Record>, Option<Truncation>), DecodeError> {
    let mut d = Decoder::new(input)?;
    let mut v = Vec::new();
    while let Some(r) = d.next_record()? {
        v.push(r);
    }
    Ok((v, d.truncation().cloned()))
}

#[cfg(test)]
mod tests;

/// CLSID of the clrprof agent (`CORECLR_PROFILER`).
pub const AGENT_CLSID: &str = "{2329981B-6C72-4DC5-9875-BC332BBF3ED4}";
