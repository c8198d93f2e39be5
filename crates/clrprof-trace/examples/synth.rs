//! Writes a large synthetic trace for the viewer's scale benchmark (bench/view_scale.sh): the
//! records of a real sampled trace (names, code ranges, mappings), then its CPU and wall samples
//! repeated over a longer run on `STACKS` distinct stacks recombined from the real ones' frames,
//! until the file reaches `MB` megabytes.
//! `cargo run --release -p clrprof-trace --example synth -- IN.clrprof OUT.clrprof MB [STACKS]`

use std::io::Write;

use clrprof_trace::{CpuSample, Record, SampleStack, WallSample};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: synth IN.clrprof OUT.clrprof MB [STACKS]");
        std::process::exit(2);
    }
    let target = args[3].parse::<u64>().expect("MB") * 1_000_000;
    let n_stacks: usize = args.get(4).map(|s| s.parse().expect("STACKS")).unwrap_or(20_000);
    let (records, _) = clrprof_trace::read_all(std::fs::File::open(&args[1]).expect("open IN")).expect("read IN");
    let mut head = Vec::new();
    let mut tail = Vec::new();
    let mut stacks: Vec<SampleStack> = Vec::new();
    let mut tids = Vec::new();
    for r in records {
        match r {
            Record::SampleStack(s) => stacks.push(s),
            Record::CpuSample(s) => {
                if !tids.contains(&s.os_tid) {
                    tids.push(s.os_tid);
                }
            }
            Record::WallSample(_) => {}
            r @ (Record::ProcessExit(_) | Record::AgentStop(_) | Record::SamplerStats(_)) => tail.push(r),
            r => head.push(r),
        }
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Distinct stacks: a real stack's outer frames, then frames drawn from all real stacks.
    let pool: Vec<u64> = stacks.iter().flat_map(|s| s.ips.iter().copied()).collect();
    let base = stacks.len() as u32;
    let mut out = std::io::BufWriter::new(std::fs::File::create(&args[2]).expect("create OUT"));
    out.write_all(&clrprof_trace::header()).unwrap();
    let mut written = 16u64;
    let emit = |out: &mut std::io::BufWriter<std::fs::File>, rs: &[Record], written: &mut u64| {
        for chunk in rs.chunks(4096) {
            let b = clrprof_trace::encode_records(chunk.iter());
            *written += b.len() as u64;
            out.write_all(&b).unwrap();
        }
    };
    let mut defs: Vec<Record> = stacks.iter().cloned().map(Record::SampleStack).collect();
    for i in 0..n_stacks {
        let s = &stacks[rng.below(stacks.len())];
        let keep = s.ips.len() / 2;
        // ips are innermost first: keep the outer half, add 2..40 random frames inside.
        let mut ips: Vec<u64> = (0..2 + rng.below(38)).map(|_| pool[rng.below(pool.len())]).collect();
        ips.extend_from_slice(&s.ips[s.ips.len() - keep..]);
        defs.push(Record::SampleStack(SampleStack { id: base + i as u32, ips, functions: Vec::new(), activity: 0 }));
    }
    emit(&mut out, &head, &mut written);
    emit(&mut out, &defs, &mut written);
    let all = base as usize + n_stacks;
    // A sample every 100-200 µs on one of the trace's threads, each standing for 100 µs: every
    // thread's CPU and wall time stays within its run (a reader clamps impossible claims).
    const SAMPLE_NS: u64 = 100_000;
    let mut ts = 0u64;
    let mut batch = Vec::with_capacity(4096);
    while written < target {
        batch.clear();
        for _ in 0..4096 {
            ts += 100_000 + rng.below(100_000) as u64;
            let os_tid = tids[rng.below(tids.len())];
            let stack = rng.below(all) as u32;
            if rng.below(3) == 0 {
                batch.push(Record::WallSample(WallSample { ts, os_tid, stack, count: 1, wall_ns: SAMPLE_NS }));
            } else {
                batch.push(Record::CpuSample(CpuSample {
                    ts,
                    os_tid,
                    stack,
                    count: 1,
                    cpu_ns: SAMPLE_NS,
                    activity: 0,
                }));
            }
        }
        emit(&mut out, &batch, &mut written);
    }
    // The run ends after its last sample (the real trace's end records are moved there).
    let shift = |end: u64| end.max(ts + SAMPLE_NS);
    for r in &mut tail {
        match r {
            Record::AgentStop(a) => a.ts = shift(a.ts),
            Record::SamplerStats(s) => s.ts = shift(s.ts),
            Record::ProcessExit(p) => p.end_unix_ns += ts,
            _ => {}
        }
    }
    emit(&mut out, &tail, &mut written);
    out.flush().unwrap();
    eprintln!("wrote {} ({:.1} MB, {} stacks, run of {:.1} s)", args[2], written as f64 / 1e6, all, ts as f64 / 1e9);
}
