//! Activity over time: per thread, what each time bucket of the profile's span held (CPU and wall
//! samples, exceptions), and process-wide GC pauses and collections.

use std::collections::BTreeMap;

use clrprof_model::samples::{SampleTime, SampleWeight};
use clrprof_model::Profile;
use serde::Serialize;

use crate::select::{self, Threads};

/// At most this many buckets when the caller leaves the size to us.
pub const DEFAULT_BUCKETS: u64 = 200;
/// At most this many buckets whatever the caller asks: a smaller bucket is widened.
pub const MAX_BUCKETS: u64 = 100_000;

/// One thread's activity, one value per bucket.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadActivity {
    pub os_tid: u32,
    pub name: String,
    pub cpu_samples: Vec<u64>,
    pub cpu_ns: Vec<u64>,
    pub wall_samples: Vec<u64>,
    pub wall_ns: Vec<u64>,
    /// Exceptions thrown (observed ones: during an exception storm only the sampling windows').
    pub exceptions: Vec<u64>,
}

/// Quiet threads folded into one row: how many, and their values added per bucket.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OtherThreads {
    pub threads: usize,
    pub cpu_samples: Vec<u64>,
    pub cpu_ns: Vec<u64>,
    pub wall_samples: Vec<u64>,
    pub wall_ns: Vec<u64>,
    pub exceptions: Vec<u64>,
}

/// A thread keeps its own timeline row when it holds at least this share (1/100) of the
/// timeline's CPU samples, wall samples or exceptions: at most 300 rows whatever the thread count.
pub const BUSY_SHARE: f64 = 0.01;

impl Timeline {
    /// Folds the threads that hold less than `share` of every one of the timeline's CPU samples,
    /// wall samples and exceptions into [`Timeline::other_threads`], their values added bucket by
    /// bucket, so the sums over rows stay exact. At most `3 / share` threads keep their row.
    pub fn fold_quiet(&mut self, share: f64) {
        let total = |f: fn(&ThreadActivity) -> &Vec<u64>| -> u64 {
            self.threads
                .iter()
                .map(|r| f(r).iter().fold(0u64, |a, &v| a.saturating_add(v)))
                .fold(0u64, u64::saturating_add)
        };
        let sum = |v: &Vec<u64>| v.iter().fold(0u64, |a, &x| a.saturating_add(x));
        let (cpu, wall, exc) = (total(|r| &r.cpu_samples), total(|r| &r.wall_samples), total(|r| &r.exceptions));
        let busy = |r: &ThreadActivity| {
            let at_least = |v: u64, of: u64| of > 0 && v as f64 >= share * of as f64;
            at_least(sum(&r.cpu_samples), cpu)
                || at_least(sum(&r.wall_samples), wall)
                || at_least(sum(&r.exceptions), exc)
        };
        let (keep, quiet): (Vec<ThreadActivity>, Vec<ThreadActivity>) =
            std::mem::take(&mut self.threads).into_iter().partition(busy);
        self.threads = keep;
        if quiet.is_empty() {
            return;
        }
        let n = self.buckets;
        let mut o = OtherThreads {
            threads: quiet.len(),
            cpu_samples: vec![0; n],
            cpu_ns: vec![0; n],
            wall_samples: vec![0; n],
            wall_ns: vec![0; n],
            exceptions: vec![0; n],
        };
        let add =
            |to: &mut Vec<u64>, from: &Vec<u64>| to.iter_mut().zip(from).for_each(|(a, &b)| *a = a.saturating_add(b));
        for r in &quiet {
            add(&mut o.cpu_samples, &r.cpu_samples);
            add(&mut o.cpu_ns, &r.cpu_ns);
            add(&mut o.wall_samples, &r.wall_samples);
            add(&mut o.wall_ns, &r.wall_ns);
            add(&mut o.exceptions, &r.exceptions);
        }
        self.other_threads = Some(o);
    }
}

/// The profile's span cut into buckets of `bucket_ns` from `start_ns` (the size asked for, widened
/// when it would give more than [`MAX_BUCKETS`]); the last bucket may end early at `end_ns`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timeline {
    pub bucket_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub buckets: usize,
    /// Threads of the selection with samples or exceptions in the span, by OS tid (after
    /// [`Timeline::fold_quiet`], only the busy ones).
    pub threads: Vec<ThreadActivity>,
    /// The threads [`Timeline::fold_quiet`] folded into one row, their values added per bucket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_threads: Option<OtherThreads>,
    /// Time the runtime was paused for GCs, per bucket.
    pub gc_pause_ns: Vec<u64>,
    /// Collections started, per bucket.
    pub gcs: Vec<u64>,
}

/// A round bucket size (1, 2 or 5 × a power of ten ns, at least 1 ms) giving at most
/// [`DEFAULT_BUCKETS`] buckets over `span_ns`.
pub fn default_bucket(span_ns: u64) -> u64 {
    let want = span_ns.div_ceil(DEFAULT_BUCKETS).max(1_000_000);
    let mut unit = 1_000_000u64;
    loop {
        for k in [1, 2, 5] {
            if unit * k >= want {
                return unit * k;
            }
        }
        unit *= 10;
    }
}

/// The timeline of the profile's span for a thread selection (`bucket_ns` `None`: see
/// [`default_bucket`]).
pub fn timeline(p: &Profile, threads: &Threads, bucket_ns: Option<u64>) -> Timeline {
    timeline_with(p, threads, bucket_ns, |f| p.samples.iter().for_each(|s| f(SampleTime::from(s))))
}

/// [`timeline`] with the sample records from `samples` (which calls its argument with each sample
/// record of the profile's range, in any order) instead of `p.samples`: for a profile built
/// without them (`ProfileBuilder::profile_untimed`, the records read from the builder).
pub fn timeline_with(
    p: &Profile,
    threads: &Threads,
    bucket_ns: Option<u64>,
    samples: impl FnOnce(&mut dyn FnMut(SampleTime)),
) -> Timeline {
    let (start, end) = p.span();
    let span = end.saturating_sub(start);
    let bucket = bucket_ns.filter(|&b| b > 0).unwrap_or_else(|| default_bucket(span)).max(span.div_ceil(MAX_BUCKETS));
    let n = span.div_ceil(bucket).max(1) as usize;
    let at = |ts: u64| (ts.saturating_sub(start) / bucket).min(n as u64 - 1) as usize;
    // One row per thread, found by OS tid; output in tid order.
    let mut rows: Vec<ThreadActivity> = Vec::new();
    let mut index: BTreeMap<u32, usize> = BTreeMap::new();
    let mut row = |rows: &mut Vec<ThreadActivity>, tid: u32| -> usize {
        *index.entry(tid).or_insert_with(|| {
            rows.push(ThreadActivity {
                os_tid: tid,
                name: select::thread_name(p, tid),
                cpu_samples: vec![0; n],
                cpu_ns: vec![0; n],
                wall_samples: vec![0; n],
                wall_ns: vec![0; n],
                exceptions: vec![0; n],
            });
            rows.len() - 1
        })
    };
    // Sample records come in time order and from few threads, mostly: the rows of the first
    // threads seen (`None`: not selected) are looked up in a short list, and the previous record's
    // bucket (`[lo, hi)`: its times) is remembered.
    const RECENT: usize = 16;
    let mut recent: Vec<(u32, Option<usize>)> = Vec::with_capacity(RECENT);
    let (mut lo, mut hi, mut last_bucket) = (u64::MAX, 0u64, 0usize);
    samples(&mut |s: SampleTime| {
        let r = match recent.iter().find(|(tid, _)| *tid == s.os_tid) {
            Some(&(_, r)) => r,
            None => {
                let r = threads.contains(s.os_tid).then(|| row(&mut rows, s.os_tid));
                if recent.len() < RECENT {
                    recent.push((s.os_tid, r));
                }
                r
            }
        };
        let Some(r) = r else { return };
        if !(lo <= s.ts && s.ts < hi) {
            last_bucket = at(s.ts);
            // The times of that bucket (the last one: all later times); (n - 1) × bucket < span.
            lo = start + last_bucket as u64 * bucket;
            hi = if last_bucket + 1 == n { u64::MAX } else { lo.saturating_add(bucket) };
        }
        let (b, r) = (last_bucket, &mut rows[r]);
        match s.weight {
            SampleWeight::Cpu => {
                r.cpu_samples[b] = r.cpu_samples[b].saturating_add(s.count as u64);
                r.cpu_ns[b] = r.cpu_ns[b].saturating_add(s.ns);
            }
            SampleWeight::Wall => {
                r.wall_samples[b] = r.wall_samples[b].saturating_add(s.count as u64);
                r.wall_ns[b] = r.wall_ns[b].saturating_add(s.ns);
            }
        }
    });
    let times = &p.events.times;
    for &(ts, tid) in times.throws.iter().chain(&times.sampled_throws).filter(|(_, tid)| threads.contains(*tid)) {
        let r = row(&mut rows, tid);
        rows[r].exceptions[at(ts)] += 1;
    }
    rows.sort_by_key(|r| r.os_tid);
    let mut gc_pause_ns = vec![0u64; n];
    for &(a, b) in &p.events.times.pauses {
        // Spread each pause over the buckets it spans.
        let mut t = a.max(start);
        while t < b.min(end) {
            let k = at(t);
            let bucket_end = start + (k as u64 + 1) * bucket;
            let stop = b.min(bucket_end).min(end);
            gc_pause_ns[k] = gc_pause_ns[k].saturating_add(stop - t);
            if stop <= t {
                break;
            }
            t = stop;
        }
    }
    let mut gcs = vec![0; n];
    for g in &p.events.gcs {
        if g.start_ns >= start && g.start_ns < end.max(start + 1) {
            gcs[at(g.start_ns)] += 1;
        }
    }
    Timeline {
        bucket_ns: bucket,
        start_ns: start,
        end_ns: end,
        buckets: n,
        threads: rows,
        other_threads: None,
        gc_pause_ns,
        gcs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_buckets_are_round_and_few() {
        assert_eq!(default_bucket(0), 1_000_000);
        assert_eq!(default_bucket(150_000_000), 1_000_000);
        assert_eq!(default_bucket(1_000_000_000), 5_000_000);
        assert_eq!(default_bucket(3_000_000_000), 20_000_000);
        assert_eq!(default_bucket(3_600_000_000_000), 20_000_000_000);
        for span in [1u64, 999_999_999, 12_345_678_901, 987_654_321_000] {
            assert!(span.div_ceil(default_bucket(span)) <= DEFAULT_BUCKETS, "{span}");
        }
    }

    #[test]
    fn quiet_threads_fold_into_one_row_with_exact_sums() {
        let row = |tid: u32, cpu: u64, exc: u64| ThreadActivity {
            os_tid: tid,
            name: format!("t{tid}"),
            cpu_samples: vec![cpu, 1],
            cpu_ns: vec![cpu * 10, 10],
            wall_samples: vec![0, 0],
            wall_ns: vec![0, 0],
            exceptions: vec![exc, 0],
        };
        // One busy thread (CPU), one with a few exceptions only, 500 quiet ones.
        let mut threads = vec![row(1, 10_000, 0), row(2, 0, 5)];
        threads.extend((3..503).map(|t| row(t, 1, 0)));
        let mut t = Timeline {
            bucket_ns: 1,
            start_ns: 0,
            end_ns: 2,
            buckets: 2,
            threads,
            other_threads: None,
            gc_pause_ns: vec![0, 0],
            gcs: vec![0, 0],
        };
        t.fold_quiet(BUSY_SHARE);
        assert_eq!(t.threads.iter().map(|r| r.os_tid).collect::<Vec<_>>(), vec![1, 2]);
        let o = t.other_threads.as_ref().unwrap();
        assert_eq!((o.threads, o.cpu_samples.clone(), o.cpu_ns.clone()), (500, vec![500, 500], vec![5000, 5000]));
        let cpu: u64 = t.threads.iter().flat_map(|r| &r.cpu_samples).sum::<u64>() + o.cpu_samples.iter().sum::<u64>();
        assert_eq!(cpu, 10_001 + 1 + 500 * 2);
    }

    #[test]
    fn a_tiny_bucket_over_a_long_span_is_widened() {
        let mut p = Profile::default();
        p.process.duration_ns = 1 << 62;
        let t = timeline(&p, &Threads::all(), Some(1_000_000));
        assert!(t.buckets as u64 <= MAX_BUCKETS && t.gcs.len() == t.buckets, "{} buckets", t.buckets);
        assert!(t.bucket_ns as u128 * t.buckets as u128 >= 1u128 << 62);
    }

    #[test]
    fn samples_land_in_their_thread_and_bucket_in_any_order() {
        use clrprof_model::samples::TimedSample;
        use clrprof_model::stacks::StackId;
        use clrprof_model::TimeRange;
        // Threads interleaved, out of time order, times before and after the window (first and
        // last bucket), threads left out of the selection.
        let mut p = Profile::default();
        p.process.duration_ns = 10_000;
        p.range = TimeRange::new(1_000, 9_000);
        let mut x: u64 = 12345;
        for i in 0..5_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let ts = if i % 3 == 0 { (x >> 33) % 11_000 } else { 1_000 + i * 8_000 / 5_000 };
            // Past the short list of threads too (30 more).
            let os_tid =
                if i % 7 == 0 { 100 + (x >> 10) as u32 % 30 } else { [7, 7, 7, 9, 9, 4][((x >> 20) % 6) as usize] };
            let weight = if x & 1 == 0 { SampleWeight::Cpu } else { SampleWeight::Wall };
            p.samples.push(TimedSample {
                ts,
                os_tid,
                stack: StackId(0),
                weight,
                count: 1 + (x >> 50) as u32 % 3,
                ns: x >> 40,
                flow: 0,
            });
        }
        let threads = Threads::only(vec![7, 9, 105, 120]);
        let t = timeline(&p, &threads, Some(700));
        assert_eq!((t.start_ns, t.bucket_ns, t.buckets), (1_000, 700, 12));
        assert_eq!(t.threads.iter().map(|r| r.os_tid).collect::<Vec<_>>(), vec![7, 9, 105, 120]);
        for r in &t.threads {
            for (k, weight) in [(0, SampleWeight::Cpu), (1, SampleWeight::Wall)] {
                let (mut count, mut ns) = (vec![0u64; 12], vec![0u64; 12]);
                for s in p.samples.iter().filter(|s| s.os_tid == r.os_tid && s.weight == weight) {
                    let b = (s.ts.saturating_sub(1_000) / 700).min(11) as usize;
                    count[b] += s.count as u64;
                    ns[b] += s.ns;
                }
                let (c, n) = if k == 0 { (&r.cpu_samples, &r.cpu_ns) } else { (&r.wall_samples, &r.wall_ns) };
                assert_eq!((c, n), (&count, &ns), "thread {} {weight:?}", r.os_tid);
                assert!(r.os_tid > 9 || (count[0] > 0 && count[11] > 0 && count[5] > 0));
                assert!(count.iter().sum::<u64>() > 0);
            }
        }
    }
}
