//! Flow events (`record --instrument --flow`) held compactly: every enter/leave of a thread in
//! order, a few bytes each. The trace writes an event in 17 bytes (kind, FunctionID, time) and a
//! decoded one takes 24; a flow trace holds tens of millions of them, so the reader keeps them
//! packed — per event one varint of the function's index in the thread's own function table
//! with the kind in its low two bits, and one varint of the time since the previous event
//! (zigzag, so that an out-of-order time costs nothing special) — about 3 to 5 bytes, and decodes
//! them as a view or an export walks them. A checkpoint every [`CHECKPOINT`] events (its byte
//! offset and the time before it) lets a time window start without decoding from the beginning.

use std::sync::Arc;

use clrprof_trace::FlowEvents;

use crate::fasthash::FxHashMap;
use crate::time::TimeRange;

/// One flow event: `kind` 0 enter, 1 leave, 2 tailcall, 3 unwind (frame left by an exception).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FlowEvent {
    pub kind: u8,
    pub function: u64,
    pub ts: u64,
}

/// Events between two checkpoints.
const CHECKPOINT: usize = 1024;

/// One thread's events, packed (see the module's doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Store {
    bytes: Vec<u8>,
    /// The thread's functions, by their index in `bytes`.
    functions: Vec<u64>,
    index: FxHashMap<u64, u32>,
    /// Per [`CHECKPOINT`] events: the offset in `bytes` of its first event, and the time of the
    /// event before it (0 for the first).
    checkpoints: Vec<(usize, u64)>,
    len: usize,
    last_ts: u64,
}

impl Store {
    fn push(&mut self, e: FlowEvent) {
        if self.len.is_multiple_of(CHECKPOINT) {
            self.checkpoints.push((self.bytes.len(), self.last_ts));
        }
        let next = self.functions.len() as u32;
        let f = *self.index.entry(e.function).or_insert(next);
        if f == next {
            self.functions.push(e.function);
        }
        put_varint(&mut self.bytes, ((f as u64) << 2) | (e.kind & 3) as u64);
        put_varint(&mut self.bytes, zigzag(e.ts.wrapping_sub(self.last_ts) as i64));
        self.last_ts = e.ts;
        self.len += 1;
    }

    /// Events `range` (by position), in order.
    fn iter(&self, range: std::ops::Range<usize>) -> FlowIter<'_> {
        let start = range.start.min(self.len);
        let (at, ts) = self.checkpoints.get(start / CHECKPOINT).copied().unwrap_or((self.bytes.len(), 0));
        let mut it = FlowIter { store: self, at, ts, left: range.end.min(self.len) - start };
        for _ in 0..start % CHECKPOINT {
            it.decode();
        }
        it
    }

    /// The position of the first event at or after `ts` (the events in time order).
    fn partition(&self, ts: u64) -> usize {
        // The last checkpoint whose previous event is before `ts`: the first event at or after
        // `ts` is at it or later.
        let c = self.checkpoints.partition_point(|&(_, before)| before < ts).saturating_sub(1);
        let first = c * CHECKPOINT;
        first + self.iter(first..self.len).take_while(|e| e.ts < ts).count()
    }
}

/// Decodes a [`Store`]'s events in order.
pub struct FlowIter<'a> {
    store: &'a Store,
    at: usize,
    ts: u64,
    left: usize,
}

impl FlowIter<'_> {
    fn decode(&mut self) -> Option<FlowEvent> {
        let b = &self.store.bytes;
        let fk = get_varint(b, &mut self.at)?;
        let dt = unzigzag(get_varint(b, &mut self.at)?);
        self.ts = self.ts.wrapping_add(dt as u64);
        let function = self.store.functions.get((fk >> 2) as usize).copied().unwrap_or(0);
        Some(FlowEvent { kind: (fk & 3) as u8, function, ts: self.ts })
    }
}

impl Iterator for FlowIter<'_> {
    type Item = FlowEvent;

    fn next(&mut self) -> Option<FlowEvent> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.decode()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for FlowIter<'_> {}

/// One thread's flow events. The events are shared between the builder and every profile taken
/// from it (a flow trace can hold tens of millions): a profile sees the part of them in its time
/// window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowThread {
    pub os_tid: u32,
    all: Arc<Store>,
    window: std::ops::Range<usize>,
    /// Events the agent could not keep (its buffer was full); not timed, so never windowed.
    pub dropped: u64,
    /// Whether `all` is in time order (it is, as the agent writes it).
    sorted: bool,
}

impl FlowThread {
    pub fn new(os_tid: u32) -> FlowThread {
        FlowThread { os_tid, sorted: true, ..Default::default() }
    }

    /// The events, in order.
    pub fn events(&self) -> FlowIter<'_> {
        self.all.iter(self.window.clone())
    }

    /// How many events [`FlowThread::events`] gives.
    pub fn len(&self) -> usize {
        self.window.len()
    }

    pub fn is_empty(&self) -> bool {
        self.window.is_empty()
    }

    /// Bytes the events take.
    pub fn retained_bytes(&self) -> usize {
        self.all.bytes.capacity()
            + self.all.functions.capacity() * 8
            + self.all.index.capacity() * 16
            + self.all.checkpoints.capacity() * 16
    }

    /// The thread's events inside `range`, sharing them with `self` (the drop count stays whole:
    /// it is not timed).
    pub fn within(&self, range: TimeRange) -> FlowThread {
        let mut t = self.clone();
        if range.is_all() {
            return t;
        }
        if self.sorted {
            let a = self.all.partition(range.from).clamp(self.window.start, self.window.end);
            let b = self.all.partition(range.to).clamp(a, self.window.end);
            t.window = a..b;
        } else {
            t.keep(|e| range.contains(e.ts));
        }
        t
    }

    /// Keeps only the events `f` takes (a new store, not shared).
    fn keep(&mut self, f: impl Fn(&FlowEvent) -> bool) {
        let mut kept = Store::default();
        for e in self.events().filter(|e| f(e)) {
            kept.push(e);
        }
        self.window = 0..kept.len;
        self.all = Arc::new(kept);
    }

    /// Drops the events before `ts` (a profile of a range from `ts` on sees the same events).
    pub fn forget_before(&mut self, ts: u64) {
        self.keep(|e| e.ts >= ts);
    }

    fn extend(&mut self, r: &FlowEvents) {
        let n = r.kinds.len().min(r.functions.len()).min(r.ts.len());
        // Copies the events only while a profile taken earlier still shares them.
        let all = Arc::make_mut(&mut self.all);
        all.bytes.reserve(n * 4);
        for k in 0..n {
            let ts = r.ts[k];
            self.sorted &= ts >= all.last_ts || all.len == 0;
            all.push(FlowEvent { kind: r.kinds[k], function: r.functions[k], ts });
        }
        self.window = 0..all.len;
    }
}

pub fn flow(threads: &mut Vec<FlowThread>, r: &FlowEvents) {
    let i = match threads.iter().position(|t| t.os_tid == r.os_tid) {
        Some(i) => i,
        None => {
            threads.push(FlowThread::new(r.os_tid));
            threads.len() - 1
        }
    };
    let t = &mut threads[i];
    t.dropped = t.dropped.saturating_add(r.dropped);
    t.extend(r);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends `v` as a LEB128 varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 varint at `*at` (`None` past the end or beyond 64 bits).
pub(crate) fn get_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let byte = *b.get(*at)?;
        *at += 1;
        if shift > 63 {
            return None;
        }
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(os_tid: u32, events: &[(u8, u64, u64)]) -> FlowEvents {
        FlowEvents {
            os_tid,
            kinds: events.iter().map(|e| e.0).collect(),
            functions: events.iter().map(|e| e.1).collect(),
            ts: events.iter().map(|e| e.2).collect(),
            dropped: 0,
        }
    }

    /// Thousands of events over several checkpoints come back as written, whole and windowed,
    /// with function ids of every size and times far apart.
    #[test]
    fn packed_events_read_back_exactly_whole_and_windowed() {
        let events: Vec<(u8, u64, u64)> = (0..5000u64)
            .map(|i| ((i % 4) as u8, 0x7f00_0000_0000 + (i % 37) * 0x1_0000_0001, 1_000 + i * i * 3))
            .collect();
        let mut threads = Vec::new();
        for chunk in events.chunks(700) {
            flow(&mut threads, &rec(9, chunk));
        }
        let t = &threads[0];
        let back: Vec<(u8, u64, u64)> = t.events().map(|e| (e.kind, e.function, e.ts)).collect();
        assert_eq!(back, events);
        assert_eq!(t.len(), 5000);
        for (from, to) in
            [(0, 1), (1_000, 1_001), (3_000, 30_000_000), (3_000_001, 3_000_002), (50_000_000, 80_000_000)]
        {
            let w = t.within(TimeRange { from, to });
            let want: Vec<_> = events.iter().filter(|e| e.2 >= from && e.2 < to).copied().collect();
            let got: Vec<_> = w.events().map(|e| (e.kind, e.function, e.ts)).collect();
            assert_eq!(got, want, "{from}..{to}");
            assert_eq!(w.len(), want.len());
        }
        let mut f = t.clone();
        f.forget_before(3_000_000);
        assert_eq!(f.events().count(), events.iter().filter(|e| e.2 >= 3_000_000).count());
        // A few bytes an event, not 17 or 24.
        assert!(t.retained_bytes() < 5000 * 8, "{} bytes", t.retained_bytes());
    }

    /// Times out of order (never written by an agent) still read back, and windows filter them.
    #[test]
    fn unordered_times_read_back_and_window_by_filtering() {
        let events = [(0u8, 5u64, 100u64), (1, 5, 50), (0, 6, 200), (1, 6, 10)];
        let mut threads = Vec::new();
        flow(&mut threads, &rec(1, &events));
        let back: Vec<_> = threads[0].events().map(|e| (e.kind, e.function, e.ts)).collect();
        assert_eq!(back, events);
        let w = threads[0].within(TimeRange { from: 40, to: 150 });
        let got: Vec<_> = w.events().map(|e| e.ts).collect();
        assert_eq!(got, vec![100, 50]);
    }
}
