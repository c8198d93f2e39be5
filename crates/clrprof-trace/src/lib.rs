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
//! No `unsafe`, no dependencies.
#![forbid(unsafe_code)]

mod codec;
mod crc32;
mod records;
mod stream;

use std::collections::BTreeMap;
use std::io::{self, Read};

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

/// Streaming decoder: yields records block by block. Never panics on any input.
pub struct Decoder<R: Read> {
    input: R,
    offset: u64,
    version: u32,
    pending: std::vec::IntoIter<Record>,
    truncation: Option<Truncation>,
    skipped: BTreeMap<u16, u64>,
    done: bool,
}

fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: Read> Decoder<R> {
    /// Reads and checks the header.
    pub fn new(mut input: R) -> Result<Self, DecodeError> {
        let mut h = [0u8; HEADER_LEN];
        let n = read_full(&mut input, &mut h)?;
        if n == 0 {
            return Err(DecodeError::Empty);
        }
        if n < 8 || h[..8] != MAGIC {
            return Err(DecodeError::NotATrace);
        }
        if n < HEADER_LEN {
            return Err(DecodeError::Corrupt(format!("header has {n} of {HEADER_LEN} bytes")));
        }
        let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        if version > VERSION {
            return Err(DecodeError::NewerVersion(version));
        }
        if version == 0 {
            return Err(DecodeError::Corrupt("version 0".into()));
        }
        Ok(Decoder {
            input,
            offset: HEADER_LEN as u64,
            version,
            pending: Vec::new().into_iter(),
            truncation: None,
            skipped: BTreeMap::new(),
            done: false,
        })
    }

    pub fn version(&self) -> u32 {
        self.version
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

    /// Byte offset of the next unread block.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn next_block(&mut self) -> Result<bool, DecodeError> {
        let mut bh = [0u8; 8];
        let n = read_full(&mut self.input, &mut bh)?;
        if n == 0 {
            return Ok(false);
        }
        if n < 8 {
            self.truncation = Some(Truncation { offset: self.offset, have: n as u64, need: 8 });
            return Ok(false);
        }
        let len = u32::from_le_bytes([bh[0], bh[1], bh[2], bh[3]]) as usize;
        let crc = u32::from_le_bytes([bh[4], bh[5], bh[6], bh[7]]);
        if len > MAX_BLOCK {
            return Err(DecodeError::Corrupt(format!("block at byte {} claims {len} bytes", self.offset)));
        }
        let mut payload = vec![0u8; len];
        let got = read_full(&mut self.input, &mut payload)?;
        if got < len {
            self.truncation = Some(Truncation { offset: self.offset, have: 8 + got as u64, need: 8 + len as u64 });
            return Ok(false);
        }
        if crc32(&payload) != crc {
            return Err(DecodeError::Corrupt(format!("checksum mismatch in block at byte {}", self.offset)));
        }
        let records = decode_payload(&payload).map_err(|e| match e {
            DecodeError::Corrupt(m) => DecodeError::Corrupt(format!("block at byte {}: {m}", self.offset)),
            e => e,
        })?;
        self.offset += 8 + len as u64;
        for r in &records {
            if let Record::Unknown { tag, .. } = r {
                *self.skipped.entry(*tag).or_insert(0) += 1;
            }
        }
        self.pending = records.into_iter();
        Ok(true)
    }

    /// The next record, `Ok(None)` at the end (check [`Decoder::truncation`]), or an error for
    /// corruption. After an error the decoder yields nothing more.
    pub fn next_record(&mut self) -> Result<Option<Record>, DecodeError> {
        loop {
            if let Some(r) = self.pending.next() {
                return Ok(Some(r));
            }
            if self.done {
                return Ok(None);
            }
            match self.next_block() {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
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
        out.push(Record::decode(tag, &payload[pos..pos + len])?);
        pos += len;
    }
    Ok(out)
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
