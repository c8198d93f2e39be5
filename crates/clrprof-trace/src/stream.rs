//! Trace sources: a push decoder that takes bytes as they arrive (a file still being written, a
//! socket) and yields the records of every complete block, and [`TraceReader`] over a file, a
//! byte buffer or a growing file.

use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use crate::{crc32, decode_payload_each, DecodeError, Record, Truncation, HEADER_LEN, MAGIC, MAX_BLOCK, VERSION};

/// Decodes a trace from bytes pushed in any pieces. A block is decoded once all its bytes are
/// there; what is left at the end of the input is a truncation ([`StreamDecoder::finish`]).
/// Never panics on any input.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    buf: Vec<u8>,
    /// Bytes of `buf` already decoded.
    start: usize,
    /// Offset in the trace of `buf[start]`.
    offset: u64,
    version: Option<u32>,
    failed: bool,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// The trace's format version, once its header has arrived.
    pub fn version(&self) -> Option<u32> {
        self.version
    }

    /// Offset in the trace of the first byte not decoded yet.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes received and waiting for the rest of their block.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Appends `bytes` and decodes every block now complete, appending its records to `out`.
    /// A damaged block adds none of its records. After an error the decoder takes nothing more.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Record>) -> Result<(), DecodeError> {
        // Records of whole blocks end at `whole`; those after it belong to a damaged block.
        let count = std::cell::Cell::new(out.len());
        let whole = std::cell::Cell::new(out.len());
        let r = self.push_each(
            bytes,
            |r| {
                out.push(r);
                count.set(count.get() + 1);
            },
            |_| whole.set(count.get()),
        );
        if r.is_err() {
            out.truncate(whole.get());
        }
        r
    }

    /// Appends `bytes` and decodes every block now complete, handing each record to `f` as it is
    /// decoded (no list of records in between: for readers that fold records as they come).
    /// `block_done` is called with the trace offset after each whole block. On damage inside a
    /// block, the records before it have been handed over; after an error the decoder takes
    /// nothing more.
    pub fn push_each(
        &mut self,
        bytes: &[u8],
        mut f: impl FnMut(Record),
        mut block_done: impl FnMut(u64),
    ) -> Result<(), DecodeError> {
        if self.failed {
            return Err(DecodeError::Corrupt("the trace was already found corrupt".into()));
        }
        let r = if self.pending() == 0 {
            // Nothing waiting: decode straight from the input and keep only its incomplete tail.
            self.buf.clear();
            self.start = 0;
            decode(&mut self.version, &mut self.offset, bytes, &mut f, &mut block_done)
                .map(|used| self.buf.extend_from_slice(&bytes[used..]))
        } else {
            // Drop what is decoded before growing the buffer.
            if self.start > 0 && self.start * 2 >= self.buf.len() {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            // Exactly: the block's room is reserved already, and the read may end past it.
            self.buf.reserve_exact(bytes.len());
            self.buf.extend_from_slice(bytes);
            decode(&mut self.version, &mut self.offset, &self.buf[self.start..], &mut f, &mut block_done)
                .map(|used| self.start += used)
        };
        if r.is_ok() {
            self.fit_buffer();
        } else {
            self.failed = true;
        }
        r
    }

    /// Sizes the buffer for the block waiting in it: room for the whole block when its size is
    /// known (appending reads as they come would double the buffer up to twice the block), and a
    /// large block's room given back once nothing waits.
    fn fit_buffer(&mut self) {
        let have = self.pending();
        if have == 0 {
            if self.buf.capacity() > 1 << 20 {
                self.buf = Vec::new();
                self.start = 0;
            }
        } else if let Some(need) = self.version.and_then(|_| block_need(&self.buf[self.start..])) {
            if need > self.buf.capacity() - self.start {
                // The decoded bytes before it go first, else the room would be theirs and the block's.
                self.buf.drain(..self.start);
                self.start = 0;
                self.buf.reserve_exact(need - have);
            }
        }
    }

    /// The end of the input: an error when it never was a trace, the truncation when the last
    /// block is incomplete.
    pub fn finish(&self) -> Result<Option<Truncation>, DecodeError> {
        let rest = self.pending() as u64;
        match self.version {
            None if self.offset == 0 && rest == 0 => Err(DecodeError::Empty),
            None if rest < MAGIC.len() as u64 => Err(DecodeError::NotATrace),
            None => Err(DecodeError::Corrupt(format!("header has {rest} of {HEADER_LEN} bytes"))),
            Some(_) if rest == 0 => Ok(None),
            Some(_) => {
                let have = &self.buf[self.start..];
                let need = if have.len() < 8 {
                    8
                } else {
                    8 + u32::from_le_bytes([have[0], have[1], have[2], have[3]]) as u64
                };
                Ok(Some(Truncation { offset: self.offset, have: rest, need }))
            }
        }
    }
}

/// Decodes the header (when `version` is not known yet) and every complete block at the start of
/// `data`, whose first byte is at `offset` in the trace, handing its records to `f` and the offset
/// after each block to `block_done`; returns the bytes used.
fn decode(
    version: &mut Option<u32>,
    offset: &mut u64,
    data: &[u8],
    f: &mut impl FnMut(Record),
    block_done: &mut impl FnMut(u64),
) -> Result<usize, DecodeError> {
    let mut used = 0;
    if version.is_none() {
        let n = data.len().min(MAGIC.len());
        if data[..n] != MAGIC[..n] {
            return Err(DecodeError::NotATrace);
        }
        if data.len() < HEADER_LEN {
            return Ok(0);
        }
        *version = Some(header_version(data)?);
        used = HEADER_LEN;
        *offset += HEADER_LEN as u64;
    }
    loop {
        let have = &data[used..];
        if have.len() < 8 {
            return Ok(used);
        }
        let len = u32::from_le_bytes([have[0], have[1], have[2], have[3]]) as usize;
        let crc = u32::from_le_bytes([have[4], have[5], have[6], have[7]]);
        if len > MAX_BLOCK {
            return Err(DecodeError::Corrupt(format!("block at byte {offset} claims {len} bytes")));
        }
        if have.len() < 8 + len {
            return Ok(used);
        }
        let payload = &have[8..8 + len];
        if crc32(payload) != crc {
            return Err(DecodeError::Corrupt(format!("checksum mismatch in block at byte {offset}")));
        }
        decode_payload_each(payload, &mut *f).map_err(|e| match e {
            DecodeError::Corrupt(m) => DecodeError::Corrupt(format!("block at byte {offset}: {m}")),
            e => e,
        })?;
        used += 8 + len;
        *offset += 8 + len as u64;
        block_done(*offset);
    }
}

/// The bytes of the block `data` starts with (its 8-byte head and payload), when the head is there
/// and the size is one a trace may claim.
fn block_need(data: &[u8]) -> Option<usize> {
    let head = data.get(..4)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    (len <= MAX_BLOCK).then_some(8 + len)
}

/// The version in a 16-byte header that starts with the magic.
pub(crate) fn header_version(h: &[u8]) -> Result<u32, DecodeError> {
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    if version > VERSION {
        return Err(DecodeError::NewerVersion(version));
    }
    if version == 0 {
        return Err(DecodeError::Corrupt("version 0".into()));
    }
    Ok(version)
}

/// Where a trace comes from.
#[derive(Debug)]
pub enum TraceSource {
    /// A finished trace file.
    File(PathBuf),
    /// A trace in memory.
    Bytes(Vec<u8>),
    /// A trace file still being written: each poll reads what was appended since (a read at the
    /// end of a file returns 0 and the next one sees what the writer appended).
    Growing(PathBuf),
}

enum Input {
    File(File),
    Bytes(Vec<u8>, usize),
    /// A finished file read by a thread of its own a few chunks ahead of the decoder (the copy out
    /// of the page cache then overlaps the decoding): chunks and how much of each was read, and
    /// the way back for a chunk's memory.
    /// (The receiver in a mutex only so that a reader can be shared between threads; never locked.)
    Ahead {
        chunks: std::sync::Mutex<Receiver<Chunk>>,
        back: SyncSender<Vec<u8>>,
    },
}

/// A chunk read ahead: its memory and how much of it was read (0: the end), or the read's error.
type Chunk = io::Result<(Vec<u8>, usize)>;

/// Chunks a read-ahead thread may hold ready.
const AHEAD: usize = 2;

/// Starts a thread reading `file` to its end in chunks; the file read in place when no thread
/// can start.
fn read_ahead(file: File) -> Input {
    let Ok(mut theirs) = file.try_clone() else { return Input::File(file) };
    let (tx, chunks) = sync_channel::<Chunk>(AHEAD);
    let (back, spare) = sync_channel::<Vec<u8>>(AHEAD + 2);
    let started = std::thread::Builder::new().name("clrprof-read".into()).spawn(move || loop {
        let mut buf = spare.try_recv().unwrap_or_else(|_| vec![0; CHUNK]);
        let r = loop {
            match theirs.read(&mut buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r,
            }
        };
        let last = !matches!(r, Ok(n) if n > 0);
        // Stops after the end, an error, or when the reader was dropped.
        if tx.send(r.map(|n| (buf, n))).is_err() || last {
            return;
        }
    });
    match started {
        Ok(_) => Input::Ahead { chunks: std::sync::Mutex::new(chunks), back },
        Err(_) => Input::File(file),
    }
}

/// Reads records from a [`TraceSource`] as they become available.
pub struct TraceReader {
    input: Input,
    growing: bool,
    decoder: StreamDecoder,
    eof: bool,
    buf: Vec<u8>,
}

/// Bytes read per poll at most (records are handed over a chunk at a time).
const CHUNK: usize = 1 << 20;

impl TraceReader {
    pub fn open(source: TraceSource) -> io::Result<TraceReader> {
        let (input, growing) = match source {
            TraceSource::File(p) => (read_ahead(File::open(p)?), false),
            TraceSource::Growing(p) => (Input::File(File::open(p)?), true),
            TraceSource::Bytes(b) => (Input::Bytes(b, 0), false),
        };
        Ok(TraceReader { input, growing, decoder: StreamDecoder::new(), eof: false, buf: vec![0; CHUNK] })
    }

    /// Reads up to a chunk of what the source has now and appends the records of the blocks it
    /// completes to `out`. Returns the bytes read: 0 at the end of a finished source, or when a
    /// growing file has nothing new yet (poll again later).
    pub fn poll(&mut self, out: &mut Vec<Record>) -> Result<usize, DecodeError> {
        self.read_chunk(|d, bytes| d.push(bytes, out))
    }

    /// [`poll`](Self::poll), handing each record to `f` as it is decoded instead of collecting
    /// them (a damaged block may have handed over its records before the damage).
    pub fn poll_each(&mut self, f: impl FnMut(Record)) -> Result<usize, DecodeError> {
        self.read_chunk(|d, bytes| d.push_each(bytes, f, |_| {}))
    }

    fn read_chunk(
        &mut self,
        push: impl FnOnce(&mut StreamDecoder, &[u8]) -> Result<(), DecodeError>,
    ) -> Result<usize, DecodeError> {
        let n = match &mut self.input {
            Input::Bytes(b, pos) => {
                let n = (b.len() - *pos).min(CHUNK);
                push(&mut self.decoder, &b[*pos..*pos + n])?;
                *pos += n;
                n
            }
            Input::Ahead { chunks, back } => match chunks.get_mut().ok().and_then(|c| c.recv().ok()) {
                Some(Ok((buf, n))) => {
                    let r = push(&mut self.decoder, &buf[..n]);
                    let _ = back.try_send(buf);
                    r?;
                    n
                }
                Some(Err(e)) => return Err(e.into()),
                // The thread ended after the end of the file (or a read error it reported).
                None => 0,
            },
            Input::File(f) => {
                let n = loop {
                    match f.read(&mut self.buf) {
                        Ok(n) => break n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e.into()),
                    }
                };
                push(&mut self.decoder, &self.buf[..n])?;
                n
            }
        };
        if n == 0 && !self.growing {
            self.eof = true;
        }
        Ok(n)
    }

    /// True once a finished source has been read to its end.
    pub fn at_end(&self) -> bool {
        self.eof
    }

    /// The state of the input read so far, as if it ended here: an error when it is no trace,
    /// the truncation when its last block is incomplete.
    pub fn finish(&self) -> Result<Option<Truncation>, DecodeError> {
        self.decoder.finish()
    }

    /// Offset of the first byte not decoded yet.
    pub fn offset(&self) -> u64 {
        self.decoder.offset()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::*;

    fn sample_trace() -> (Vec<u8>, Vec<Record>) {
        let records: Vec<Record> = vec![
            ProcessStart { pid: 7, command_line: "app".into(), ..Default::default() }.into(),
            ThreadCreated { ts: 1, id: 2 }.into(),
            Message { ts: 3, level: 1, text: "hello".into() }.into(),
            AgentStop { ts: 9, ..Default::default() }.into(),
        ];
        let mut bytes = header().to_vec();
        bytes.extend(encode_records(&records[..2]));
        bytes.extend(encode_records(&records[2..]));
        (bytes, records)
    }

    #[test]
    fn bytes_pushed_in_any_pieces_give_the_same_records() {
        let (bytes, records) = sample_trace();
        for step in [1, 2, 3, 7, 16, 17, 100, bytes.len()] {
            let mut d = StreamDecoder::new();
            let mut out = Vec::new();
            for piece in bytes.chunks(step) {
                d.push(piece, &mut out).unwrap();
            }
            assert_eq!(out, records, "pieces of {step}");
            assert_eq!(d.finish().unwrap(), None);
        }
    }

    /// A block of megabytes read in pieces: the buffer holds the block and at most one piece more
    /// (appending pieces as they came doubled it up to twice the block), and gives the room back
    /// once the block is decoded.
    #[test]
    fn a_large_block_takes_its_size_in_the_buffer_not_twice_it() {
        let big = Message { ts: 5, level: 1, text: "x".repeat(3 << 20) };
        let records: Vec<Record> = vec![
            ProcessStart { pid: 7, ..Default::default() }.into(),
            big.into(),
            Message { ts: 6, level: 1, text: "after".into() }.into(),
        ];
        let mut bytes = header().to_vec();
        bytes.extend(encode_records(&records[..1]));
        let block = encode_records(&records[1..2]);
        let block_len = block.len();
        bytes.extend(block);
        bytes.extend(encode_records(&records[2..]));
        for step in [4096, 64 << 10, 1 << 20, 3 << 20] {
            let mut d = StreamDecoder::new();
            let mut out = Vec::new();
            let mut most = 0;
            for piece in bytes.chunks(step) {
                d.push(piece, &mut out).unwrap();
                most = most.max(d.buf.capacity());
            }
            assert_eq!(out, records, "pieces of {step}");
            assert!(most <= block_len + step, "pieces of {step}: a buffer of {most} for a block of {block_len}");
            assert!(d.buf.capacity() <= 1 << 20, "pieces of {step}: {} kept after the block", d.buf.capacity());
        }
    }

    #[test]
    fn an_incomplete_last_block_is_a_truncation_and_garbage_an_error() {
        let (bytes, _) = sample_trace();
        let mut d = StreamDecoder::new();
        let mut out = Vec::new();
        d.push(&bytes[..bytes.len() - 3], &mut out).unwrap();
        assert_eq!(out.len(), 2);
        let t = d.finish().unwrap().expect("truncated");
        assert_eq!(t.have + 3, t.need);
        assert!(matches!(StreamDecoder::new().finish(), Err(DecodeError::Empty)));
        let mut d = StreamDecoder::new();
        assert!(matches!(d.push(b"PK\x03\x04", &mut out), Err(DecodeError::NotATrace)));
        let mut newer = bytes.clone();
        newer[8] = 99;
        assert!(matches!(StreamDecoder::new().push(&newer, &mut out), Err(DecodeError::NewerVersion(99))));
        let mut corrupt = bytes.clone();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        let mut d = StreamDecoder::new();
        assert!(matches!(d.push(&corrupt, &mut out), Err(DecodeError::Corrupt(_))));
        assert!(d.push(b"", &mut out).is_err(), "a failed decoder takes nothing more");
    }

    #[test]
    fn a_growing_file_is_read_as_it_grows() {
        let (bytes, records) = sample_trace();
        let path = std::env::temp_dir().join(format!("clrprof-growing-{}.clrprof", std::process::id()));
        std::fs::write(&path, &bytes[..20]).unwrap();
        let mut r = TraceReader::open(TraceSource::Growing(path.clone())).unwrap();
        let mut out = Vec::new();
        while r.poll(&mut out).unwrap() > 0 {}
        assert!(out.is_empty() && !r.at_end());
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&bytes[20..]).unwrap();
        while r.poll(&mut out).unwrap() > 0 {}
        assert_eq!(out, records);
        assert_eq!(r.finish().unwrap(), None);
        let mut r = TraceReader::open(TraceSource::Bytes(bytes)).unwrap();
        let mut again = Vec::new();
        while r.poll(&mut again).unwrap() > 0 {}
        assert!(r.at_end());
        assert_eq!(again, records);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_file_read_in_chunks_gives_every_record_in_order() {
        // Several read chunks (read ahead by a thread of the reader), blocks across their
        // boundaries, and an unfinished last block.
        let mut bytes = header().to_vec();
        let mut records = Vec::new();
        for b in 0..40u64 {
            let block: Vec<Record> = (0..2_000u64)
                .map(|i| {
                    CpuSample { ts: b * 10_000 + i, os_tid: 7, stack: i as u32, count: 1, cpu_ns: i, activity: 0 }
                        .into()
                })
                .collect();
            bytes.extend(encode_records(&block));
            records.extend(block);
        }
        assert!(bytes.len() > 2 * CHUNK);
        let whole = bytes.len();
        bytes.extend(&encode_records(&records[..3])[..20]);
        let path = std::env::temp_dir().join(format!("clrprof-chunks-{}.clrprof", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let mut r = TraceReader::open(TraceSource::File(path.clone())).unwrap();
        let mut out = Vec::new();
        let mut n = 0;
        while !r.at_end() {
            n += r.poll_each(|rec| out.push(rec)).unwrap();
        }
        assert_eq!(n, bytes.len());
        assert_eq!(out, records);
        assert_eq!(r.finish().unwrap(), Some(Truncation { offset: whole as u64, have: 20, need: 8 + 3 * 34 }));
        // Readers are shared between threads (the viewer's loader).
        fn shared<T: Send + Sync>(_: &T) {}
        shared(&r);
        // A reader dropped half way stops its read-ahead thread (which holds the file open).
        let mut part = TraceReader::open(TraceSource::File(path.clone())).unwrap();
        assert!(part.poll_each(|_| {}).unwrap() > 0);
        drop(part);
        let _ = std::fs::remove_file(path);
    }
}
