//! A mutation fuzzer over the real traces in testdata/traces/v1: blocks are damaged (bytes
//! flipped, set, dropped, duplicated) and their checksums recomputed, so the damage reaches the
//! record decoder, the model and the query layer, not only the checksum test. Every input must
//! give a profile, a report document and a time window — or a clean error — and never a panic.
//! Quick by default (fixed seed); `CLRPROF_FUZZ_ITERATIONS=1000000` runs the long mode (inputs per
//! trace file), `CLRPROF_FUZZ_DECODE_ITERATIONS` the reader's, `CLRPROF_FUZZ_SEED` (hex) another series
//! of either. Long modes print how far they got (docs/import.md).

use std::path::PathBuf;

use clrprof_load::source::Loader;
use clrprof_model::{NoSymbols, TimeRange};
use clrprof_query::Threads;
use clrprof_trace::{crc32, TraceSource, HEADER_LEN};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// (offset, length) of every block's payload.
fn blocks(trace: &[u8]) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let mut at = HEADER_LEN;
    while at + 8 <= trace.len() {
        let len = u32::from_le_bytes(trace[at..at + 4].try_into().unwrap()) as usize;
        v.push((at + 8, len));
        at += 8 + len;
    }
    v
}

/// One damaged copy of `trace`: a few mutations in one block, its length and checksum made valid.
fn mutate(trace: &[u8], rng: &mut Rng) -> Vec<u8> {
    let bl = blocks(trace);
    let (start, len) = bl[rng.below(bl.len())];
    let mut payload = trace[start..start + len].to_vec();
    for _ in 0..1 + rng.below(4) {
        if payload.is_empty() {
            break;
        }
        let i = rng.below(payload.len());
        match rng.below(6) {
            0 => payload[i] ^= 1 << rng.below(8),
            1 => payload[i] = 0xff,
            2 => payload[i] = 0,
            3 => {
                // A field's worth of 0xff: huge counts, ids, lengths.
                for b in payload.iter_mut().skip(i).take(4) {
                    *b = 0xff;
                }
            }
            4 => {
                let n = rng.below(16).min(payload.len() - i);
                payload.drain(i..i + n);
            }
            _ => {
                let n = rng.below(16).min(payload.len() - i);
                let dup: Vec<u8> = payload[i..i + n].to_vec();
                payload.splice(i..i, dup);
            }
        }
    }
    let mut out = trace[..start - 8].to_vec();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out.extend_from_slice(&trace[start + len..]);
    // Sometimes cut the file short too.
    if rng.below(8) == 0 {
        let cut = HEADER_LEN + rng.below(out.len() - HEADER_LEN);
        out.truncate(cut);
    }
    out
}

/// Reads a damaged trace the way every command does.
fn exercise(bytes: Vec<u8>) {
    let Ok((builder, _)) = Loader::load(TraceSource::Bytes(bytes)) else { return };
    let p = builder.profile(TimeRange::ALL, &mut NoSymbols);
    let doc = clrprof_query::document::document(&p, &Threads::all(), None);
    let _ = serde_json::to_string(&doc).unwrap();
    let q = clrprof_query::costs::CostQuery { depth: Some(20), ..Default::default() };
    let _ = clrprof_query::costs::hotspots(&p, &q, None);
    let _ = clrprof_query::costs::call_tree(&p, &q, None);
    let _ = clrprof_query::weighted_stacks::stacks(&p, None, &Threads::all());
    let half = p.process.duration_ns / 2;
    let w = builder.profile(TimeRange::new(half / 2, half + half / 2), &mut NoSymbols);
    let _ = clrprof_query::document::document(&w, &Threads::all(), Some(1_000_000));
}

#[test]
fn damaged_traces_never_panic() {
    // `CLRPROF_FUZZ_SEED` (hex) runs another series, as in the reader's long mode.
    fuzz_series(Series {
        what: "pipeline fuzz",
        iterations_var: "CLRPROF_FUZZ_ITERATIONS",
        iterations: 40,
        seed: 0x5eed_c1a7_0f00_d001,
        progress_every: 1_000,
        saved_as: "clrprof-fuzz",
        run: exercise,
    });
}

/// One fuzzing series over the testdata traces: `iterations` damaged inputs per trace file (or
/// `$iterations_var`), from `seed` (or `CLRPROF_FUZZ_SEED`, hex), each given to `run`; an input that
/// panics is saved in the temporary directory and fails the test.
struct Series {
    what: &'static str,
    iterations_var: &'static str,
    iterations: usize,
    seed: u64,
    progress_every: usize,
    saved_as: &'static str,
    run: fn(Vec<u8>),
}

fn fuzz_series(s: Series) {
    let iterations: usize = std::env::var(s.iterations_var).ok().and_then(|v| v.parse().ok()).unwrap_or(s.iterations);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/traces/v1");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    let traces: Vec<Vec<u8>> = names.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let seed =
        std::env::var("CLRPROF_FUZZ_SEED").ok().and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok());
    let mut rng = Rng(seed.unwrap_or(s.seed) | 1);
    for i in 0..iterations * traces.len() {
        let k = i % traces.len();
        let input = mutate(&traces[k], &mut rng);
        let kept = input.clone();
        if i > 0 && i % s.progress_every == 0 {
            eprintln!("{}: {i} inputs", s.what);
        }
        if std::panic::catch_unwind(|| (s.run)(input)).is_err() {
            let path = std::env::temp_dir().join(format!("{}-{i}.clrprof", s.saved_as));
            std::fs::write(&path, kept).unwrap();
            panic!("input {i} (from {}) panicked; saved as {}", names[k].display(), path.display());
        }
    }
    eprintln!("{}: {} inputs, none panicked", s.what, iterations * traces.len());
}

/// The plausibility bounds of ingestion (docs/trace-format.md, "Impossible values") never touch a
/// real trace: every trace in testdata reads without a damage note.
#[test]
fn real_traces_have_no_impossible_values() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/traces/v1");
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let (b, _) = Loader::load(TraceSource::File(path.clone())).unwrap();
        let p = b.profile(TimeRange::ALL, &mut NoSymbols);
        let notes: Vec<&String> = p.messages.iter().filter(|m| m.starts_with("damaged trace")).collect();
        assert!(notes.is_empty(), "{}: {notes:?}", path.display());
    }
}

/// Every input a fuzzer found breaking the reader (testdata/fuzz) is read again: decoded, ingested
/// and made a profile.
#[test]
fn inputs_that_broke_the_reader_stay_fixed() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/fuzz");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    assert!(!names.is_empty());
    for name in names {
        let bytes = std::fs::read(&name).unwrap();
        assert!(std::panic::catch_unwind(|| read(bytes)).is_ok(), "{} panicked", name.display());
    }
}

/// Decodes, ingests and profiles a trace (no views).
fn read(bytes: Vec<u8>) {
    if let Ok((builder, _)) = Loader::load(TraceSource::Bytes(bytes)) {
        let _ = builder.profile(TimeRange::ALL, &mut NoSymbols);
    }
}

/// The reader alone (decoder, model ingestion and the profile), without the views: cheap enough for
/// the long mode's million inputs (`CLRPROF_FUZZ_DECODE_ITERATIONS`, inputs per trace file).
#[test]
fn damaged_traces_never_panic_the_reader() {
    // `CLRPROF_FUZZ_SEED` (hex) runs another series, e.g. a second process beside the first.
    fuzz_series(Series {
        what: "reader fuzz",
        iterations_var: "CLRPROF_FUZZ_DECODE_ITERATIONS",
        iterations: 200,
        seed: 0x0dec_0de5_eed5_0002,
        progress_every: 10_000,
        saved_as: "clrprof-fuzz-reader",
        run: read,
    });
}

/// Interesting bytes for text formats: separators, quotes, digits, line ends, invalid UTF-8.
const SPICE: &[u8] = b"\",;!\n\r .0912-%\t\xff\x00eE";

/// One damaged copy of a text file: bytes flipped, set, dropped, duplicated (whole lines too),
/// huge numbers inserted; sometimes cut short.
fn mutate_text(text: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut t = text.to_vec();
    for _ in 0..1 + rng.below(6) {
        if t.is_empty() {
            t.extend_from_slice(b"a;b 1\n");
        }
        let i = rng.below(t.len());
        match rng.below(8) {
            0 => t[i] ^= 1 << rng.below(8),
            1 => t[i] = SPICE[rng.below(SPICE.len())],
            2 => t.insert(i, SPICE[rng.below(SPICE.len())]),
            3 => {
                let n = rng.below(32).min(t.len() - i);
                t.drain(i..i + n);
            }
            4 => {
                let n = rng.below(64).min(t.len() - i);
                let dup: Vec<u8> = t[i..i + n].to_vec();
                t.splice(i..i, dup);
            }
            5 => {
                let big: &[u8] =
                    [&b"99999999999999999999999"[..], b"18446744073709551615", b"1e308", b"4294967296"][rng.below(4)];
                t.splice(i..i, big.iter().copied());
            }
            6 => {
                // A whole line repeated.
                let start = t[..i].iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
                let end = t[i..].iter().position(|&b| b == b'\n').map_or(t.len(), |p| i + p + 1);
                let line: Vec<u8> = t[start..end].to_vec();
                for _ in 0..1 + rng.below(3) {
                    t.splice(end..end, line.iter().copied());
                }
            }
            _ => {
                // A level, type or count field changed to another small number.
                let d = b'0' + rng.below(10) as u8;
                t[i] = d;
            }
        }
    }
    if rng.below(8) == 0 {
        let cut = rng.below(t.len() + 1);
        t.truncate(cut);
    }
    t
}

/// Reads a damaged import both through the reader asked for and through the sniffing loader,
/// and runs every view and a diff on what comes out.
fn exercise_import(bytes: Vec<u8>, format: clrprof_load::import::Format) {
    use clrprof_load::import::{import, ImportOptions};
    use clrprof_query::diff::{diff, diff_tree, DiffQuery};
    let opts = ImportOptions::default();
    let direct = import(&bytes, format, &opts);
    let loaded = Loader::open_with(TraceSource::Bytes(bytes), &opts)
        .and_then(|mut l| l.read_to_end().map(|_| l))
        .ok()
        .filter(|l| l.format() != format)
        .map(|l| l.profile(TimeRange::ALL, &mut NoSymbols));
    // The loader's profile is the direct one when it sniffed the same format: views run once.
    for p in [direct.ok(), loaded].into_iter().flatten() {
        let doc = clrprof_query::document::document(&p, &Threads::all(), None);
        let _ = serde_json::to_string(&doc).unwrap();
        let q = clrprof_query::costs::CostQuery { depth: Some(20), ..Default::default() };
        let _ = clrprof_query::costs::hotspots(&p, &q, None);
        let _ = clrprof_query::costs::call_tree(&p, &q, None);
        let _ = clrprof_query::costs::callers(&p, &q, None);
        let _ = clrprof_query::weighted_stacks::stacks(&p, None, &Threads::all());
        let d = DiffQuery { normalize: true, ..Default::default() };
        let _ = diff(&p, &p, &d);
        let _ = diff(&clrprof_model::Profile::default(), &p, &DiffQuery::default());
        let _ = diff_tree(&p, &p, &d);
    }
}

/// Folded stacks of a real trace (its sampled CPU stacks), as `export -f collapsed` writes them.
fn folded_from_trace(path: &std::path::Path) -> Vec<u8> {
    let (b, _) = Loader::load(TraceSource::File(path.to_path_buf())).unwrap();
    let p = b.profile(TimeRange::ALL, &mut NoSymbols);
    let st = clrprof_query::weighted_stacks::stacks(&p, None, &Threads::all());
    let mut out = String::new();
    for s in &st.merged {
        let names: Vec<&str> = s.frames.iter().map(|f| p.costs.stacks.frames[f.0 as usize].name.as_str()).collect();
        out += &format!("{} {}\n", names.join(";").replace('\n', " "), s.samples);
    }
    out.into_bytes()
}

#[test]
fn damaged_imports_never_panic() {
    use clrprof_load::import::Format;
    let iterations: usize = std::env::var("CLRPROF_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut names: Vec<PathBuf> =
        std::fs::read_dir(root.join("testdata/import")).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    let mut collapsed: Vec<(String, Vec<u8>)> = vec![(
        "folded stacks of testdata/traces/v1/events.clrprof".into(),
        folded_from_trace(&root.join("testdata/traces/v1/events.clrprof")),
    )];
    let mut csv: Vec<(String, Vec<u8>)> = Vec::new();
    for n in &names {
        let entry = (n.display().to_string(), std::fs::read(n).unwrap());
        if n.extension().is_some_and(|e| e == "csv") {
            csv.push(entry);
        } else {
            collapsed.push(entry);
        }
    }
    let readers = [(Format::Collapsed, &collapsed), (Format::VsPerfCsv, &csv)];
    let mut rng = Rng(0x5eed_1a40_c5f0_0d02);
    let mut counts = [0usize; 2];
    // `iterations` inputs per reader.
    for i in 0..iterations * readers.len() {
        let r = i % readers.len();
        let (format, corpus) = readers[r];
        let (name, text) = &corpus[rng.below(corpus.len())];
        let input = mutate_text(text, &mut rng);
        let kept = input.clone();
        counts[r] += 1;
        if (i + 1) % 100_000 == 0 {
            eprintln!("… {} collapsed-stack and {} vsperfreport CSV inputs so far", counts[0], counts[1]);
        }
        if std::panic::catch_unwind(|| exercise_import(input, format)).is_err() {
            let path = std::env::temp_dir().join(format!("clrprof-fuzz-import-{i}.txt"));
            std::fs::write(&path, kept).unwrap();
            panic!("import input {i} (from {name}) panicked; saved as {}", path.display());
        }
    }
    eprintln!("fuzzed {} collapsed-stack and {} vsperfreport CSV inputs", counts[0], counts[1]);
}
