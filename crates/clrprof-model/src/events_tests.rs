//! Tests of the runtime events through the whole pipeline (records → `ProfileBuilder` → the
//! profile's `events`): a module of their own beside `events`, which sits below the builder.

use crate::events::*;
use crate::test_rng::Rng;
use crate::{Profile, ProfileBuilder, StackId, TimeRange};
use clrprof_trace::exception_phase as ph;
use clrprof_trace::*;

fn phase(ts: u64, phase: u8, function: u64) -> Record {
    ExceptionPhase { ts, os_tid: 1, phase, function }.into()
}

#[test]
fn exceptions_are_grouped_with_catch_sites_and_uncaught_ones_flagged() {
    let mut b = ProfileBuilder::new();
    b.add(&ProcessStart::default().into());
    for f in [10u64, 20, 30] {
        b.add(&FunctionCompiled { ts: 1, id: f, name: format!("F{f}"), ..Default::default() }.into());
    }
    for i in 0..3 {
        b.add(
            &ExceptionThrown {
                ts: 10 + i,
                os_tid: 1,
                type_name: "Boom".into(),
                stack: vec![10, 20, 30],
                ..Default::default()
            }
            .into(),
        );
        b.add(&phase(11, ph::SEARCH_ENTER, 10));
        b.add(&phase(11, ph::FILTER_ENTER, 30));
        b.add(&phase(11, ph::FILTER_LEAVE, 0));
        b.add(&phase(12, ph::UNWIND_ENTER, 20));
        b.add(&phase(12, ph::FINALLY_ENTER, 20));
        b.add(&phase(12, ph::FINALLY_LEAVE, 0));
        b.add(&phase(13, ph::CATCHER_ENTER, 30));
        b.add(&phase(13, ph::CATCHER_LEAVE, 0));
    }
    b.add(
        &ExceptionThrown { ts: 50, os_tid: 2, type_name: "Fatal".into(), stack: vec![20], ..Default::default() }.into(),
    );
    let p = b.finish();
    let boom = &p.events.exceptions[0];
    assert_eq!((boom.type_name.as_str(), boom.throw_site.as_str()), ("Boom", "F10"));
    assert_eq!((boom.thrown, boom.caught, boom.uncaught), (3, 3, 0));
    assert_eq!((boom.filters, boom.finallies, boom.catches, boom.search_frames, boom.unwind_frames), (3, 3, 3, 3, 3));
    assert_eq!(boom.catch_sites, vec![("F30".to_string(), 3)]);
    assert_eq!(boom.stacks.len(), 1);
    let root_first: Vec<String> = p
        .costs
        .stacks
        .frames_of(boom.stacks[0].0)
        .iter()
        .map(|f| p.costs.stacks.frames[f.0 as usize].name.clone())
        .collect();
    assert_eq!(root_first, vec!["F30", "F20", "F10"]);
    let fatal = &p.events.exceptions[1];
    assert_eq!((fatal.thrown, fatal.caught, fatal.uncaught), (1, 0, 1));
    assert_eq!(fatal.uncaught_threads, vec![2]);
}

fn thrown_and_caught(b: &mut ProfileBuilder, ts: u64) {
    b.add(&ExceptionThrown { ts, os_tid: 1, type_name: "Boom".into(), ..Default::default() }.into());
    b.add(
        &ExceptionCaught {
            ts: ts + 1,
            os_tid: 1,
            function: 30,
            site: 10,
            search_frames: 2,
            filters: 1,
            unwind_frames: 2,
            finallies: 1,
        }
        .into(),
    );
}

fn monitoring(b: &mut ProfileBuilder, ts: u64, mode: u8) {
    b.add(&ExceptionMonitoring { ts, mode, observed: 0 }.into());
}

#[test]
fn an_exception_storm_is_estimated_from_its_sampling_windows() {
    use clrprof_trace::exception_monitoring as m;
    let mut b = ProfileBuilder::new();
    b.add(&ProcessStart::default().into());
    for f in [10u64, 30] {
        b.add(&FunctionCompiled { ts: 1, id: f, name: format!("F{f}"), ..Default::default() }.into());
    }
    for i in 0..10 {
        thrown_and_caught(&mut b, 100 + 10 * i);
    }
    // In flight when the callbacks pause: its catch is never seen.
    b.add(&ExceptionThrown { ts: 990, os_tid: 1, type_name: "Boom".into(), ..Default::default() }.into());
    monitoring(&mut b, 1000, m::PAUSED);
    monitoring(&mut b, 1900, m::WINDOW);
    for i in 0..5 {
        thrown_and_caught(&mut b, 1910 + 10 * i);
    }
    monitoring(&mut b, 2000, m::PAUSED);
    monitoring(&mut b, 2900, m::WINDOW);
    monitoring(&mut b, 3000, m::FULL);
    thrown_and_caught(&mut b, 3100);
    thrown_and_caught(&mut b, 3200);
    let p = b.finish();
    let g = &p.events.exceptions;
    assert_eq!(g.len(), 1, "{g:?}");
    let g = &g[0];
    // The storm lasted 2000 ns with 200 ns of windows: its 5 throws stand for 50.
    assert_eq!((g.thrown, g.caught, g.uncaught, g.observed, g.estimated), (62, 62, 0, 17, true));
    assert_eq!((g.filters, g.finallies, g.search_frames, g.unwind_frames), (62, 62, 124, 124));
    assert_eq!(g.catch_sites, vec![("F30".to_string(), 62)]);
    let s = &p.events.exception_sampling;
    assert!(s.sampled);
    assert_eq!((s.paused_ns, s.window_ns, s.first_pause_ns), (1800, 200, 1000));
    assert_eq!((s.observed, s.unfollowed, s.estimated_total), (18, 1, 62));
}

#[test]
fn a_throw_whose_callback_ran_as_the_callbacks_paused_is_not_called_uncaught() {
    use clrprof_trace::exception_monitoring as m;
    let mut b = ProfileBuilder::new();
    b.add(&ProcessStart::default().into());
    thrown_and_caught(&mut b, 100);
    monitoring(&mut b, 1000, m::PAUSED);
    // Its throw's callback took its timestamp just after the writer's pause (which the runtime
    // applied after the callback had begun); its catch came while the callbacks were off.
    b.add(&ExceptionThrown { ts: 1005, os_tid: 1, type_name: "Boom".into(), ..Default::default() }.into());
    monitoring(&mut b, 1900, m::WINDOW);
    monitoring(&mut b, 2000, m::FULL);
    // Thrown with the callbacks on, never caught: uncaught.
    b.add(&ExceptionThrown { ts: 2100, os_tid: 2, type_name: "Fatal".into(), ..Default::default() }.into());
    let p = b.finish();
    let group =
        |name: &str| p.events.exceptions.iter().find(|g| g.type_name == name).unwrap_or_else(|| panic!("{name}"));
    assert_eq!(group("Boom").uncaught, 0);
    assert_eq!((group("Fatal").uncaught, group("Fatal").uncaught_threads.clone()), (1, vec![2]));
    assert_eq!(p.events.exception_sampling.unfollowed, 1);
}

#[test]
fn a_storm_cut_short_by_the_end_of_the_trace_carries_the_last_rate() {
    use clrprof_trace::exception_monitoring as m;
    let mut b = ProfileBuilder::new();
    b.add(&ProcessStart::default().into());
    // 100 throws a second for a second, then paused for the last second of the trace.
    for i in 0..100 {
        thrown_and_caught(&mut b, i * 10_000_000);
    }
    monitoring(&mut b, 1_000_000_000, m::PAUSED);
    b.add(&ThreadCreated { ts: 2_000_000_000, id: 9 }.into());
    let p = b.finish();
    let g = &p.events.exceptions[0];
    assert_eq!((g.thrown, g.observed, g.estimated), (200, 100, true));
    assert_eq!(g.caught, 200);
    let s = &p.events.exception_sampling;
    assert_eq!((s.paused_ns, s.window_ns, s.estimated_total), (1_000_000_000, 0, 200));
}

#[test]
fn without_a_pause_every_count_is_exact() {
    let mut b = ProfileBuilder::new();
    b.add(&ProcessStart::default().into());
    for i in 0..3 {
        thrown_and_caught(&mut b, 10 * i);
    }
    let p = b.finish();
    let g = &p.events.exceptions[0];
    assert_eq!((g.thrown, g.observed, g.estimated), (3, 3, false));
    assert!(!p.events.exception_sampling.sampled);
    assert_eq!(p.events.exception_sampling.estimated_total, 3);
}

#[test]
fn allocation_samples_without_a_name_take_their_class_name_from_an_earlier_sample() {
    let mut b = ProfileBuilder::new();
    b.add(&ProcessStart::default().into());
    let sample = |ts: u64, name: &str| -> Record {
        AllocationSample { ts, os_tid: 1, class: 7, type_name: name.into(), size: 24, ..Default::default() }.into()
    };
    b.add(&sample(1, "Acme.Node"));
    b.add(&sample(2, ""));
    b.add(&sample(3, ""));
    b.add(&AllocationSample { ts: 4, os_tid: 1, class: 9, size: 24, ..Default::default() }.into());
    let p = b.finish();
    let by: Vec<(&str, u64)> = p.events.allocations.iter().map(|a| (a.type_name.as_str(), a.samples)).collect();
    assert!(by.contains(&("Acme.Node", 3)), "{by:?}");
    assert!(by.contains(&("<class 0x9>", 1)), "{by:?}");
}

#[test]
fn gcs_get_reasons_pauses_and_background_flags() {
    let mut b = ProfileBuilder::new();
    b.add(&ProcessStart::default().into());
    b.add(&RuntimeSuspended { ts: 90, os_tid: 1, reason: 1 }.into());
    b.add(&GcInfo { ts: 99, index: 7, generation: 2, reason: 1, kind: 0 }.into());
    b.add(&GcStarted { ts: 100, os_tid: 1, generation: 2, reason: 1, sizes: vec![10, 0, 0, 0, 0] }.into());
    b.add(&GcFinished { ts: 150, os_tid: 1, sizes: vec![0, 0, 5, 0, 0] }.into());
    b.add(&RuntimeResumed { ts: 160, os_tid: 1 }.into());
    // A background gen2 with an ephemeral GC inside it.
    b.add(&GcStarted { ts: 1000, os_tid: 1, generation: 2, reason: 0, sizes: vec![] }.into());
    b.add(&GcStarted { ts: 1100, os_tid: 1, generation: 0, reason: 0, sizes: vec![] }.into());
    b.add(&GcFinished { ts: 1110, os_tid: 1, sizes: vec![] }.into());
    b.add(&GcFinished { ts: 2000, os_tid: 1, sizes: vec![] }.into());
    let p = b.finish();
    let g = &p.events.gcs;
    assert_eq!(g.len(), 3);
    assert_eq!((g[0].index, g[0].reason.as_str(), g[0].pause_ns, g[0].duration_ns), (7, "induced", 70, 50));
    assert_eq!(g[0].background, Some(false));
    assert_eq!(g[0].after[2], 5);
    assert_eq!((g[1].background, g[1].duration_ns, g[1].reason.as_str()), (Some(true), 1000, "other"));
    assert_eq!(g[2].duration_ns, 10);
}

#[test]
fn sampled_allocations_are_upscaled_estimates() {
    let (c, bytes) = upscale(102_400);
    assert!((c - 1.582).abs() < 0.01, "{c}");
    assert!((bytes / c - 102_400.0).abs() < 1.0);
    let mut b = ProfileBuilder::new();
    b.add(&ProcessStart::default().into());
    b.add(&FunctionCompiled { ts: 1, id: 5, name: "Alloc".into(), ..Default::default() }.into());
    for _ in 0..4 {
        b.add(
            &AllocationSample {
                ts: 2,
                os_tid: 3,
                type_name: "Big".into(),
                size: 144,
                stack: vec![5],
                ..Default::default()
            }
            .into(),
        );
    }
    b.add(&AllocationCounts { ts: 3, type_name: "Exact".into(), count: 5, bytes: 120, ..Default::default() }.into());
    let p = b.finish();
    let big = p.events.allocations.iter().find(|a| a.type_name == "Big").unwrap();
    assert!(!big.exact);
    assert_eq!(big.samples, 4);
    assert!(big.count > 2800 && big.count < 2900, "{}", big.count);
    let ex = p.events.allocations.iter().find(|a| a.type_name == "Exact").unwrap();
    assert_eq!((ex.count, ex.bytes, ex.exact), (5, 120, true));
    assert_eq!(p.events.alloc_sites[0].function, "Alloc");
    let total: u64 = p.costs.merged(None).iter().map(|c| c.alloc_bytes).sum();
    assert_eq!(total, big.bytes);
}

/// A profile of `records` after a process start, functions 10.. named as given.
fn alloc_profile(functions: &[&str], records: Vec<Record>) -> Profile {
    let mut b = ProfileBuilder::new();
    b.add(&ProcessStart::default().into());
    for (i, f) in functions.iter().enumerate() {
        b.add(&FunctionCompiled { ts: 1, id: 10 + i as u64, name: f.to_string(), ..Default::default() }.into());
    }
    for r in &records {
        b.add(r);
    }
    b.finish()
}

fn site<'a>(p: &'a Profile, function: &str) -> &'a AllocSite {
    p.events
        .alloc_sites
        .iter()
        .find(|s| s.function == function)
        .unwrap_or_else(|| panic!("no site {function}: {:?}", p.events.alloc_sites))
}

#[test]
fn a_large_sample_stands_for_itself_and_strided_walks_for_the_rest() {
    // 1,000 samples of small strings at one site, walked as the agent does (the first 64, then
    // one in 32 weighted 32), and one 20 MB string elsewhere, its stack walked with certainty as
    // the 100th sample of the type.
    let mut v = Vec::new();
    let small = |n: u32, ts: u64| {
        let w = if n <= 64 {
            1
        } else if n.is_multiple_of(32) {
            32
        } else {
            0
        };
        AllocationSample {
            ts,
            os_tid: 1,
            class: 7,
            type_name: if n == 1 { "System.String".into() } else { String::new() },
            size: 64,
            stack: if w > 0 { vec![10, 11] } else { vec![] },
            walk_weight: w,
            ..Default::default()
        }
    };
    for n in 1..=1000u32 {
        v.push(small(n, n as u64).into());
        if n == 100 {
            let huge = AllocationSample {
                ts: 100,
                os_tid: 1,
                class: 7,
                size: 20_000_022,
                stack: vec![12, 13],
                walk_weight: 1,
                ..Default::default()
            };
            v.push(huge.into());
        }
    }
    let p = alloc_profile(
        &["System.String.Ctor", "Acme.Person..ctor", "System.Text.StringBuilder.ToString", "Acme.Program.BuildHuge"],
        v,
    );
    let huge = site(&p, "Acme.Program.BuildHuge");
    assert_eq!((huge.count, huge.bytes, huge.via.as_str()), (1, 20_000_022, "System.Text.StringBuilder.ToString"));
    assert_eq!(huge.display(), "Acme.Program.BuildHuge (via System.Text.StringBuilder.ToString)");
    assert_eq!(huge.stack, ["System.Text.StringBuilder.ToString", "Acme.Program.BuildHuge"]);
    let person = site(&p, "Acme.Person..ctor");
    assert_eq!(person.via, "System.String.Ctor");
    let (c, b) = upscale(64);
    assert!((person.count as f64 - 1000.0 * c).abs() <= 1.0, "{person:?}");
    assert!((person.bytes as f64 - 1000.0 * b).abs() <= 1.0, "{person:?}");
    // The sites add up to the type's estimate.
    let t = p.events.allocations.iter().find(|a| a.type_name == "System.String").unwrap();
    assert!(t.bytes.abs_diff(person.bytes + huge.bytes) <= 1, "{t:?}");
    assert_eq!(p.events.alloc_estimator, AllocEstimator::AllocationSampled);
}

#[test]
fn allocation_ticks_weigh_by_amount_and_a_huge_object_by_its_size() {
    assert_eq!(tick_estimate(32, 102_432), (102_432.0 / 32.0, 102_432.0));
    assert_eq!(tick_estimate(20_000_022, 20_050_000), (1.0, 20_000_022.0), "the bytes before it are not its");
    let tick = |ts: u64, size: u64, amount: u64, stack: Vec<u64>| -> Record {
        AllocationSample {
            ts,
            os_tid: 1,
            class: 7,
            type_name: "System.String".into(),
            size,
            amount,
            source: 1,
            walk_weight: 1,
            stack,
            ..Default::default()
        }
        .into()
    };
    let p = alloc_profile(
        &["Acme.Small", "Acme.Big"],
        vec![tick(1, 40, 104_000, vec![10]), tick(2, 20_000_022, 20_090_000, vec![11])],
    );
    assert_eq!((site(&p, "Acme.Big").count, site(&p, "Acme.Big").bytes), (1, 20_000_022));
    assert_eq!((site(&p, "Acme.Small").count, site(&p, "Acme.Small").bytes), (2600, 104_000));
    assert_eq!(p.events.alloc_estimator, AllocEstimator::AllocationTick);
}

#[test]
fn exact_counts_are_shared_out_over_the_sampled_stacks_of_their_type() {
    // 1,000 widgets counted exactly; the agent's samples (no name: the counts name the class) put
    // three in four at one site. The samples' bytes are not counted again by time.
    let sample = |ts: u64, stack: Vec<u64>| -> Record {
        AllocationSample {
            ts,
            os_tid: 1,
            class: 7,
            size: 24,
            amount: 16_384,
            source: 2,
            walk_weight: 1,
            stack,
            ..Default::default()
        }
        .into()
    };
    let mut v =
        vec![sample(1, vec![10, 12]), sample(2, vec![10, 12]), sample(3, vec![10, 12]), sample(4, vec![11, 12])];
    v.push(AllocationCounts { ts: 5, class: 7, type_name: "Acme.Widget".into(), count: 1000, bytes: 24_000 }.into());
    let p = alloc_profile(&["Acme.Loop.Fill", "Acme.Loop.Other", "Acme.Program.Main"], v);
    assert_eq!(p.events.alloc_estimator, AllocEstimator::Exact);
    let types: Vec<(&str, u64, bool)> =
        p.events.allocations.iter().map(|a| (a.type_name.as_str(), a.count, a.exact)).collect();
    assert_eq!(types, [("Acme.Widget", 1000, true)]);
    let fill = site(&p, "Acme.Loop.Fill");
    assert_eq!((fill.type_name.as_str(), fill.count, fill.bytes, fill.samples), ("Acme.Widget", 750, 18_000, 3));
    assert_eq!(site(&p, "Acme.Loop.Other").count, 250);
    let bytes: u64 = p.events.times.allocations.iter().map(|t| t.2).sum();
    assert_eq!(bytes, 24_000);
    let total: u64 = p.costs.merged(None).iter().map(|c| c.alloc_count).sum();
    assert_eq!(total, 1000);
}

/// A background GC as .NET 10 reports it: the profiling API's start, the runtime's description of
/// it and of the ephemeral GC it begins with (which gets no `GarbageCollectionStarted`), that GC's
/// finish and end on the same thread, a foreground GC inside, and the background GC's finish and
/// end on its own thread, read after the foreground GC's records.
#[test]
fn nested_gcs_pair_by_the_runtimes_index() {
    const MS: u64 = 1_000_000;
    let mut b = ProfileBuilder::new();
    b.add(&ProcessStart::default().into());
    let (t, bgc) = (1, 2);
    b.add(&GcStarted { ts: 100 * MS, os_tid: t, generation: 2, reason: 0, sizes: vec![9, 9, 9, 0, 0] }.into());
    b.add(&GcInfo { ts: 100 * MS + 20, index: 26, generation: 2, reason: 0, kind: 1 }.into());
    b.add(&GcInfo { ts: 100 * MS + 40, index: 27, generation: 0, reason: 0, kind: 0 }.into());
    b.add(&GcFinished { ts: 102 * MS, os_tid: t, sizes: vec![0, 5, 9, 0, 0] }.into());
    b.add(&GcEnd { ts: 102 * MS + 20, os_tid: t, index: 27, generation: 0 }.into());
    b.add(&GcStarted { ts: 130 * MS, os_tid: t, generation: 0, reason: 0, sizes: vec![8, 5, 9, 0, 0] }.into());
    b.add(&GcInfo { ts: 130 * MS + 20, index: 28, generation: 0, reason: 0, kind: 2 }.into());
    b.add(&GcFinished { ts: 131 * MS, os_tid: t, sizes: vec![0, 6, 9, 0, 0] }.into());
    b.add(&GcEnd { ts: 131 * MS + 20, os_tid: t, index: 28, generation: 0 }.into());
    b.add(&GcFinished { ts: 150 * MS, os_tid: bgc, sizes: vec![1, 6, 4, 0, 0] }.into());
    b.add(&GcEnd { ts: 150 * MS + 20, os_tid: bgc, index: 26, generation: 2 }.into());
    let p = b.finish();
    type Row = (u64, u8, Option<bool>, u64, bool, usize, u64);
    let got: Vec<Row> = p
        .events
        .gcs
        .iter()
        .map(|g| (g.index, g.generation, g.background, g.duration_ns, g.finished, g.before.len(), g.after[2]))
        .collect();
    assert_eq!(
        got,
        vec![
            (26, 2, Some(true), 50 * MS + 20, true, 5, 4),
            (27, 0, Some(false), 2 * MS - 20, true, 0, 9),
            (28, 0, Some(false), MS + 20, true, 5, 9),
        ]
    );
}

fn gc_at(start_ns: u64, duration_ns: u64) -> Gc {
    Gc { start_ns, duration_ns, finished: true, ..Default::default() }
}

#[test]
fn time_in_gc_is_the_union_of_overlapping_gcs_within_the_range() {
    // A background GC with a foreground one inside it, and one more after.
    let gcs = [gc_at(1000, 1000), gc_at(1100, 10), gc_at(3000, 500)];
    assert_eq!(time_in_gc(&gcs, TimeRange::ALL), 1500);
    assert_eq!(time_in_gc(&gcs, TimeRange::new(1500, 3200)), 500 + 200);
    assert_eq!(time_in_gc(&gcs, TimeRange::new(2000, 3000)), 0);
    assert_eq!(time_in_gc(&[], TimeRange::ALL), 0);
}

#[test]
fn counters_count_time_in_overlapping_gcs_once() {
    let mut b = ProfileBuilder::new();
    b.add(&ProcessStart::default().into());
    // 0–50 ms a background gen2, 10–20 ms a gen0 inside it; the run lasts 1 s (rows of 100 ms).
    b.add(&GcStarted { ts: 0, os_tid: 1, generation: 2, reason: 0, sizes: vec![] }.into());
    b.add(&GcStarted { ts: 10_000_000, os_tid: 1, generation: 0, reason: 0, sizes: vec![] }.into());
    b.add(&GcFinished { ts: 20_000_000, os_tid: 1, sizes: vec![] }.into());
    b.add(&GcFinished { ts: 50_000_000, os_tid: 1, sizes: vec![] }.into());
    b.add(
        &AllocationSample { ts: 1_000_000_000, os_tid: 1, type_name: "X".into(), size: 8, ..Default::default() }.into(),
    );
    let p = b.finish();
    let rows = &p.events.counters;
    assert_eq!(rows.len(), 10);
    assert_eq!(rows[0].time_in_gc_pct, 50.0);
    assert_eq!(rows[0].gc_count, [1, 0, 1]);
    assert!(rows[1..].iter().all(|r| r.time_in_gc_pct == 0.0));
}

// ---- Time ranges: the builder keeps facts, `finish` computes any range, any number of times.

const MS: u64 = 1_000_000;

fn feed(b: &mut EventsBuilder, records: &[Record]) {
    for r in records {
        b.log(r);
        b.add(r);
    }
}

/// A profile with functions 10 (`F10`), 20, 30 and a run of `duration_ns`.
fn profile(duration_ns: u64) -> Profile {
    let mut p = Profile::default();
    p.process.duration_ns = duration_ns;
    for id in [10u64, 20, 30] {
        p.functions.push(crate::Function { id, name: format!("F{id}"), ..Default::default() });
    }
    p
}

fn finished(b: &EventsBuilder, duration_ns: u64, range: TimeRange) -> Profile {
    let mut p = profile(duration_ns);
    p.range = range;
    p.set_events(b, range);
    p
}

fn throw(ts: u64, os_tid: u32, type_name: &str) -> Record {
    ExceptionThrown { ts, os_tid, type_name: type_name.into(), stack: vec![10, 20], ..Default::default() }.into()
}

fn catch(ts: u64, os_tid: u32) -> Record {
    ExceptionCaught { ts, os_tid, function: 30, site: 10, search_frames: 2, filters: 0, unwind_frames: 2, finallies: 1 }
        .into()
}

/// A bit of everything, over a run of 1 s: exceptions, GCs with suspensions, allocations,
/// contention and the log (with the event log on).
fn everything() -> Vec<Record> {
    let mut v: Vec<Record> = vec![
        ProcessStart::default().into(),
        ThreadCreated { ts: MS, id: 1 }.into(),
        throw(100 * MS, 1, "Early"),
        catch(101 * MS, 1),
        RuntimeSuspended { ts: 190 * MS, os_tid: 1, reason: 1 }.into(),
        GcInfo { ts: 199 * MS, index: 4, generation: 0, reason: 0, kind: 0 }.into(),
        GcStarted { ts: 200 * MS, os_tid: 1, generation: 0, reason: 0, sizes: vec![1, 0, 0, 0, 0] }.into(),
        GcFinished { ts: 280 * MS, os_tid: 1, sizes: vec![0, 1, 0, 0, 0] }.into(),
        RuntimeResumed { ts: 290 * MS, os_tid: 1 }.into(),
        ContentionStarted { ts: 300 * MS, os_tid: 2, stack: vec![20, 10] }.into(),
        throw(400 * MS, 2, "Late"),
        ContentionEnded { ts: 310 * MS, os_tid: 2, duration_ns: 0 }.into(),
        AllocationSample {
            ts: 420 * MS,
            os_tid: 1,
            type_name: "A".into(),
            size: 24,
            stack: vec![10],
            ..Default::default()
        }
        .into(),
        catch(450 * MS, 2),
        GcStarted { ts: 500 * MS, os_tid: 1, generation: 1, reason: 1, sizes: vec![] }.into(),
        RuntimeSuspended { ts: 510 * MS, os_tid: 1, reason: 1 }.into(),
        RuntimeResumed { ts: 520 * MS, os_tid: 1 }.into(),
        ContentionStarted { ts: 600 * MS, os_tid: 3, stack: vec![30] }.into(),
        AllocationSample {
            ts: 700 * MS,
            os_tid: 2,
            class: 5,
            type_name: "B".into(),
            size: 48,
            stack: vec![20],
            ..Default::default()
        }
        .into(),
        GcFinished { ts: 750 * MS, os_tid: 1, sizes: vec![] }.into(),
        ContentionEnded { ts: 800 * MS, os_tid: 3, duration_ns: 5 * MS }.into(),
        AllocationSample { ts: 900 * MS, os_tid: 2, class: 5, size: 48, stack: vec![20], ..Default::default() }.into(),
        throw(950 * MS, 4, "Uncaught"),
    ];
    if let Record::ProcessStart(s) = &mut v[0] {
        s.config = "events=true".into();
    }
    v
}

fn events_builder(records: &[Record]) -> EventsBuilder {
    let mut b = EventsBuilder::default();
    b.set_log_enabled(true);
    feed(&mut b, records);
    b
}

/// Allocation costs of a profile by thread and stack (as frame names, root first).
fn alloc_costs(p: &Profile) -> Vec<(u32, Vec<String>, u64, u64)> {
    let mut v = Vec::new();
    for t in &p.costs.threads {
        for (s, c) in t.costs.iter() {
            if c.alloc_count > 0 || c.alloc_bytes > 0 {
                let names = p
                    .costs
                    .stacks
                    .frames_of(s)
                    .iter()
                    .map(|f| format!("{:?}", p.costs.stacks.frames[f.0 as usize].key))
                    .collect();
                v.push((t.os_tid, names, c.alloc_count, c.alloc_bytes));
            }
        }
    }
    v.sort();
    v
}

/// The events with stack ids replaced by their frames, to compare profiles whose stack tables
/// were filled in a different order.
fn normalized(p: &Profile) -> String {
    let frames = |s: StackId| -> Vec<String> {
        p.costs.stacks.frames_of(s).iter().map(|f| format!("{:?}", p.costs.stacks.frames[f.0 as usize].key)).collect()
    };
    let mut e = p.events.clone();
    let ex: Vec<_> =
        e.exceptions.iter().map(|g| g.stacks.iter().map(|&(s, n)| (frames(s), n)).collect::<Vec<_>>()).collect();
    let ct: Vec<_> =
        e.contentions.iter().map(|c| c.stacks.iter().map(|&(s, n)| (frames(s), n)).collect::<Vec<_>>()).collect();
    e.exceptions.iter_mut().for_each(|g| g.stacks.clear());
    e.contentions.iter_mut().for_each(|c| c.stacks.clear());
    format!("{e:?}\n{ex:?}\n{ct:?}\n{:?}", alloc_costs(p))
}

#[test]
fn exceptions_count_by_throw_time() {
    let b = events_builder(&everything());
    let names = |p: &Profile| -> Vec<(String, u64, u64, u64)> {
        let mut v: Vec<_> =
            p.events.exceptions.iter().map(|g| (g.type_name.clone(), g.thrown, g.caught, g.uncaught)).collect();
        v.sort();
        v
    };
    let all = finished(&b, 1000 * MS, TimeRange::ALL);
    assert_eq!(names(&all), vec![("Early".into(), 1, 1, 0), ("Late".into(), 1, 1, 0), ("Uncaught".into(), 1, 0, 1)]);
    assert_eq!(all.events.times.throws, vec![(100 * MS, 1), (400 * MS, 2), (950 * MS, 4)]);
    // Thrown inside, caught after the range's end: counted, and caught.
    let p = finished(&b, 1000 * MS, TimeRange::new(300 * MS, 420 * MS));
    assert_eq!(names(&p), vec![("Late".into(), 1, 1, 0)]);
    assert_eq!(p.events.exceptions[0].throw_site, "F10");
    assert_eq!(p.events.exceptions[0].catch_sites, vec![("F30".to_string(), 1)]);
    assert_eq!(p.events.exception_sampling.observed, 1);
    assert_eq!(p.events.times.throws, vec![(400 * MS, 2)]);
    // `to` is exclusive.
    let p = finished(&b, 1000 * MS, TimeRange::new(0, 100 * MS));
    assert!(p.events.exceptions.is_empty() && p.events.times.throws.is_empty());
}

#[test]
fn gcs_count_by_start_with_their_pauses_clipped_to_the_range() {
    let b = events_builder(&everything());
    let all = finished(&b, 1000 * MS, TimeRange::ALL);
    let g = &all.events.gcs;
    assert_eq!(g.len(), 2);
    assert_eq!((g[0].index, g[0].pause_ns, g[0].duration_ns), (4, 100 * MS, 80 * MS));
    assert_eq!((g[1].index, g[1].pause_ns, g[1].reason.as_str()), (2, 10 * MS, "induced"));
    assert_eq!(all.events.times.pauses, vec![(190 * MS, 290 * MS), (510 * MS, 520 * MS)]);
    // The range starts inside the first GC's suspension (GC started before the range: not listed)
    // and ends inside the second GC's.
    let p = finished(&b, 1000 * MS, TimeRange::new(250 * MS, 515 * MS));
    let g = &p.events.gcs;
    assert_eq!(g.len(), 1, "{g:?}");
    // The GC keeps its run-wide index, duration and reason; only the pause is clipped.
    assert_eq!((g[0].index, g[0].start_ns, g[0].duration_ns, g[0].pause_ns), (2, 500 * MS, 250 * MS, 5 * MS));
    assert_eq!(p.events.times.pauses, vec![(250 * MS, 290 * MS), (510 * MS, 515 * MS)]);
    // Time in GC counts the first GC's part in the range too.
    assert_eq!(p.events.time_in_gc_ns, 30 * MS + 15 * MS);
    assert_eq!(all.events.time_in_gc_ns, 80 * MS + 250 * MS);
    // A range that holds the first GC's start but not all of its suspension.
    let p = finished(&b, 1000 * MS, TimeRange::new(195 * MS, 260 * MS));
    assert_eq!(p.events.gcs.len(), 1);
    assert_eq!(p.events.gcs[0].pause_ns, 65 * MS);
}

#[test]
fn allocation_tables_and_costs_come_from_samples_in_the_range_only() {
    let b = events_builder(&everything());
    let all = finished(&b, 1000 * MS, TimeRange::ALL);
    assert_eq!(all.events.alloc_samples, 3);
    assert_eq!(all.events.times.allocations.len(), 3);
    let p = finished(&b, 1000 * MS, TimeRange::new(600 * MS, 1000 * MS));
    assert_eq!(p.events.alloc_samples, 2);
    let types: Vec<&str> = p.events.allocations.iter().map(|a| a.type_name.as_str()).collect();
    assert_eq!(types, vec!["B"]);
    assert_eq!(p.events.alloc_sites.len(), 1);
    assert_eq!(p.events.alloc_sites[0].function, "F20");
    let costs = alloc_costs(&p);
    assert_eq!(costs.len(), 1, "{costs:?}");
    assert_eq!(costs[0].0, 2);
    let bytes: u64 = p.costs.merged(None).iter().map(|c| c.alloc_bytes).sum();
    assert_eq!(bytes, p.events.allocations[0].bytes);
    let ts: Vec<(u64, u32)> = p.events.times.allocations.iter().map(|a| (a.0, a.1)).collect();
    assert_eq!(ts, vec![(700 * MS, 2), (900 * MS, 2)]);
    // Finishing the same profile again for another range replaces its allocation costs.
    let mut q = finished(&b, 1000 * MS, TimeRange::ALL);
    q.set_events(&b, TimeRange::new(600 * MS, 1000 * MS));
    assert_eq!(alloc_costs(&q), costs);
}

#[test]
fn contention_counts_by_start_time() {
    let b = events_builder(&everything());
    let all = finished(&b, 1000 * MS, TimeRange::ALL);
    assert_eq!(all.events.contentions.len(), 2);
    assert_eq!(all.events.times.contentions, vec![(300 * MS, 2, 10 * MS), (600 * MS, 3, 5 * MS)]);
    // Started inside, ended after the range: in.
    let p = finished(&b, 1000 * MS, TimeRange::new(550 * MS, 700 * MS));
    let c = &p.events.contentions;
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].site.as_str(), c[0].count, c[0].wait_ns), ("F30", 1, 5 * MS));
    assert_eq!(p.events.times.contentions, vec![(600 * MS, 3, 5 * MS)]);
    let p = finished(&b, 1000 * MS, TimeRange::new(305 * MS, 550 * MS));
    assert!(p.events.contentions.is_empty());
}

#[test]
fn log_lines_by_time_keep_their_depth() {
    let b = events_builder(&everything());
    let all = finished(&b, 1000 * MS, TimeRange::ALL);
    assert!(all.events.log_enabled);
    assert_eq!(all.events.log_unpaired, 0);
    let p = finished(&b, 1000 * MS, TimeRange::new(200 * MS, 290 * MS));
    let lines: Vec<(u64, &str, u32)> = p.events.log.iter().map(|e| (e.ts, e.what.as_str(), e.depth)).collect();
    // Inside the suspension that began before the range: the GC is one level in, its finish
    // pairs with its start, and the suspension's end (at 290 ms) is outside.
    assert_eq!(lines, vec![(200 * MS, "gc gen0", 1), (280 * MS, "gc", 1)]);
    assert_eq!(p.events.log_unpaired, 0);
    assert!(p.events.log.iter().all(|e| (200 * MS..290 * MS).contains(&e.ts)));
}

#[test]
fn counter_rows_cover_the_profiles_span() {
    let b = events_builder(&everything());
    let all = finished(&b, 1000 * MS, TimeRange::ALL);
    assert_eq!(all.events.counters.len(), 10);
    assert_eq!(all.events.counters[0].start_ns, 0);
    let range = TimeRange::new(250 * MS, 750 * MS);
    let p = finished(&b, 1000 * MS, range);
    let rows = &p.events.counters;
    let bounds: Vec<(u64, u64)> = rows.iter().map(|r| (r.start_ns, r.end_ns)).collect();
    assert_eq!(bounds, (0..5).map(|i| ((250 + 100 * i) * MS, (350 + 100 * i) * MS)).collect::<Vec<_>>());
    // The first GC started before the range: its time counts, not its start.
    assert_eq!(rows[0].gc_count, [0, 0, 0]);
    assert_eq!(rows[0].time_in_gc_pct, 30.0);
    assert_eq!(rows[2].gc_count, [0, 1, 0]);
    assert_eq!(rows[0].lock_contentions, 1);
    assert_eq!(rows[1].exceptions_per_sec, 10.0);
    // Heap after the GC that finished before the range.
    assert_eq!(rows[0].heap_bytes, vec![0, 1, 0, 0, 0]);
    assert_eq!(rows.iter().map(|r| r.threads).collect::<Vec<_>>(), vec![0; 5], "no thread with a known create time");
    // A range past the end of the run: one empty row at the end.
    let p = finished(&b, 1000 * MS, TimeRange::new(2000 * MS, 3000 * MS));
    assert_eq!(p.events.counters.len(), 1);
    assert_eq!((p.events.counters[0].start_ns, p.events.counters[0].end_ns), (1000 * MS, 1000 * MS + 1));
}

#[test]
fn a_range_inside_a_storm_gets_the_storms_estimate_for_that_part() {
    use clrprof_trace::exception_monitoring as m;
    let mut e = EventsBuilder::default();
    let mut records: Vec<Record> = vec![ProcessStart::default().into()];
    for i in 0..10 {
        records.push(
            ExceptionThrown { ts: 100 + 10 * i, os_tid: 1, type_name: "Boom".into(), ..Default::default() }.into(),
        );
        records.push(catch(101 + 10 * i, 1));
    }
    records.push(ExceptionMonitoring { ts: 1000, mode: m::PAUSED, observed: 0 }.into());
    records.push(ExceptionMonitoring { ts: 1900, mode: m::WINDOW, observed: 0 }.into());
    for i in 0..5 {
        records.push(
            ExceptionThrown { ts: 1910 + 10 * i, os_tid: 1, type_name: "Boom".into(), ..Default::default() }.into(),
        );
        records.push(catch(1911 + 10 * i, 1));
    }
    records.push(ExceptionMonitoring { ts: 2000, mode: m::PAUSED, observed: 0 }.into());
    records.push(ExceptionMonitoring { ts: 2900, mode: m::WINDOW, observed: 0 }.into());
    records.push(ExceptionMonitoring { ts: 3000, mode: m::FULL, observed: 0 }.into());
    feed(&mut e, &records);
    // The whole run: as a one-shot load (10 exact + 5 samples standing for 50).
    let all = finished(&e, 4000, TimeRange::ALL);
    assert_eq!((all.events.exceptions[0].thrown, all.events.exceptions[0].observed), (60, 15));
    // 500 ns of the 2000 ns storm, all paused: a quarter of its 50, none observed.
    let p = finished(&e, 4000, TimeRange::new(1200, 1700));
    let g = &p.events.exceptions;
    assert_eq!(g.len(), 1);
    assert_eq!((g[0].thrown, g[0].caught, g[0].observed, g[0].estimated), (13, 13, 0, true));
    let s = &p.events.exception_sampling;
    assert!(s.sampled);
    assert_eq!((s.paused_ns, s.window_ns, s.first_pause_ns, s.observed, s.estimated_total), (500, 0, 1200, 0, 13));
    assert_eq!(p.events.times.storms, vec![(1200, 1700, 12.5)]);
    assert!(p.events.times.throws.is_empty() && p.events.times.sampled_throws.is_empty());
    // The storm's first half, with its first window and the throws observed there; plus 5 exact
    // throws before it.
    let p = finished(&e, 4000, TimeRange::new(150, 2000));
    let g = &p.events.exceptions[0];
    assert_eq!((g.thrown, g.observed, g.estimated), (5 + 25, 5 + 5, true));
    let s = &p.events.exception_sampling;
    assert_eq!((s.paused_ns, s.window_ns, s.first_pause_ns, s.observed), (900, 100, 1000, 10));
    assert_eq!(p.events.times.throws.len(), 5);
    assert_eq!(
        p.events.times.sampled_throws.iter().map(|t| t.0).collect::<Vec<_>>(),
        vec![1910, 1920, 1930, 1940, 1950]
    );
    assert_eq!(p.events.times.storms, vec![(1000, 2000, 25.0)]);
    // After the storm: exact again.
    let p = finished(&e, 4000, TimeRange::new(3000, 4000));
    assert!(p.events.exceptions.is_empty());
    assert!(!p.events.exception_sampling.sampled);
}

#[test]
fn a_range_inside_a_storm_that_ends_the_trace_carries_the_rate_before_it() {
    use clrprof_trace::exception_monitoring as m;
    let mut e = EventsBuilder::default();
    let mut records: Vec<Record> = vec![ProcessStart::default().into()];
    // 100 throws a second for a second, then paused for the last second of the trace.
    for i in 0..100 {
        records.push(
            ExceptionThrown { ts: i * 10 * MS, os_tid: 1, type_name: "Boom".into(), ..Default::default() }.into(),
        );
        records.push(catch(i * 10 * MS + 1, 1));
    }
    records.push(ExceptionMonitoring { ts: 1000 * MS, mode: m::PAUSED, observed: 0 }.into());
    feed(&mut e, &records);
    assert_eq!(finished(&e, 2000 * MS, TimeRange::ALL).events.exceptions[0].thrown, 200);
    let p = finished(&e, 2000 * MS, TimeRange::new(1500 * MS, 2000 * MS));
    let g = &p.events.exceptions;
    assert_eq!(g.len(), 1);
    assert_eq!((g[0].thrown, g[0].caught, g[0].observed, g[0].estimated), (50, 50, 0, true));
    assert_eq!(p.events.exception_sampling.estimated_total, 50);
    assert_eq!(p.events.exception_sampling.paused_ns, 500 * MS);
}

#[test]
fn finish_twice_gives_the_same_result() {
    let b = events_builder(&everything());
    for range in [TimeRange::ALL, TimeRange::new(250 * MS, 750 * MS)] {
        let mut p = profile(1000 * MS);
        p.set_events(&b, range);
        let once = (p.events.clone(), alloc_costs(&p));
        p.set_events(&b, range);
        assert_eq!((p.events.clone(), alloc_costs(&p)), once);
        let q = finished(&b, 1000 * MS, range);
        assert_eq!(q.events, once.0);
    }
}

#[test]
fn records_fed_in_two_halves_with_a_finish_between_give_the_one_pass_result() {
    use clrprof_trace::exception_monitoring as m;
    let mut records = everything();
    // A storm too, and exceptions in flight across the cut.
    records.push(ExceptionMonitoring { ts: 960 * MS, mode: m::PAUSED, observed: 0 }.into());
    records.push(ExceptionMonitoring { ts: 970 * MS, mode: m::WINDOW, observed: 0 }.into());
    records.push(throw(975 * MS, 5, "Storm"));
    records.push(catch(976 * MS, 5));
    records.push(ExceptionMonitoring { ts: 980 * MS, mode: m::FULL, observed: 0 }.into());
    let one = events_builder(&records);
    for cut in [3, records.len() / 2, records.len() - 3] {
        let mut live = events_builder(&records[..cut]);
        let mut p = profile(1000 * MS);
        p.set_events(&live, TimeRange::ALL);
        feed(&mut live, &records[cut..]);
        for range in [TimeRange::ALL, TimeRange::new(250 * MS, 750 * MS), TimeRange::new(900 * MS, 1000 * MS)] {
            let want = finished(&one, 1000 * MS, range);
            let fresh = finished(&live, 1000 * MS, range);
            assert_eq!(fresh.events, want.events, "cut at {cut}, {range:?}");
            assert_eq!(alloc_costs(&fresh), alloc_costs(&want));
            // The live profile, finished again: the same but for the order of its stack table.
            p.range = range;
            p.set_events(&live, range);
            assert_eq!(normalized(&p), normalized(&want), "cut at {cut}, {range:?}");
        }
    }
}

#[test]
fn counter_rows_count_threads_and_assemblies_as_the_per_row_filter() {
    let mut rng = Rng(42);
    let mut p = profile(1000 * MS);
    for id in 0..50 {
        let created = (rng.below(4) > 0).then(|| rng.below(1100) * MS);
        let destroyed = (rng.below(2) > 0).then(|| rng.below(1100) * MS);
        p.threads.push(crate::Thread { id, created_ns: created, destroyed_ns: destroyed, ..Default::default() });
    }
    for id in 0..20 {
        p.assemblies.push(crate::Assembly { id, loaded_ns: rng.below(1100) * MS, ..Default::default() });
    }
    p.set_events(&EventsBuilder::default(), TimeRange::ALL);
    assert_eq!(p.events.counters.len(), 10);
    for r in &p.events.counters {
        let threads = p
            .threads
            .iter()
            .filter(|t| t.created_ns.is_some_and(|c| c < r.end_ns) && t.destroyed_ns.is_none_or(|d| d >= r.end_ns))
            .count() as u64;
        let assemblies = p.assemblies.iter().filter(|a| a.loaded_ns < r.end_ns).count() as u64;
        assert_eq!((r.threads, r.assemblies_loaded), (threads, assemblies), "{r:?}");
    }
}

/// The same contentions as the agent writes them with the event log on (one record each) and
/// aggregated per 100 ms and stack (the default): every figure of the views is the same.
#[test]
fn aggregated_contention_reads_back_the_same_figures_as_single_records() {
    // (start, os_tid, end, runtime duration, stack); the last one never ends.
    type Wait = (u64, u32, Option<u64>, u64, Vec<u64>);
    let all: Vec<Wait> = vec![
        (110 * MS, 1, Some(112 * MS), 0, vec![20, 10]),
        (130 * MS, 2, Some(180 * MS), 40 * MS, vec![20, 10]),
        (150 * MS, 3, Some(420 * MS), 0, vec![30]),
        (320 * MS, 1, Some(330 * MS), 3 * MS, vec![20, 10]),
        (360 * MS, 2, None, 0, vec![30]),
        (710 * MS, 3, Some(720 * MS), 0, vec![20, 10]),
    ];
    let mut single = vec![ProcessStart::default().into()];
    for (start, tid, end, d, stack) in &all {
        single.push(ContentionStarted { ts: *start, os_tid: *tid, stack: stack.clone() }.into());
        if let Some(end) = end {
            single.push(ContentionEnded { ts: *end, os_tid: *tid, duration_ns: *d }.into());
        }
    }
    // As the agent publishes them: stacks first; the 150 ms contention ended after interval 100 ms
    // was published, so that interval comes in two records.
    let counts = |ts: u64, stacks: Vec<u32>, counts: Vec<u64>, wait: Vec<u64>, max: Vec<u64>, unended: Vec<u64>| {
        Record::from(ContentionCounts {
            ts,
            interval_ns: 100 * MS,
            stacks,
            counts,
            wait_ns: wait,
            max_wait_ns: max,
            unended,
        })
    };
    let aggregated: Vec<Record> = vec![
        ProcessStart::default().into(),
        ContentionStack { id: 1, stack: vec![20, 10] }.into(),
        ContentionStack { id: 2, stack: vec![30] }.into(),
        counts(100 * MS, vec![1], vec![2], vec![42 * MS], vec![40 * MS], vec![0]),
        counts(300 * MS, vec![1], vec![1], vec![3 * MS], vec![3 * MS], vec![0]),
        counts(100 * MS, vec![2], vec![1], vec![270 * MS], vec![270 * MS], vec![0]),
        counts(700 * MS, vec![1], vec![1], vec![10 * MS], vec![10 * MS], vec![0]),
        counts(300 * MS, vec![2], vec![0], vec![0], vec![0], vec![1]),
    ];
    let a = events_builder(&single);
    let b = events_builder(&aggregated);
    for range in [TimeRange::ALL, TimeRange::new(100 * MS, 300 * MS), TimeRange::new(300 * MS, 800 * MS)] {
        let mut p = finished(&a, 1000 * MS, range);
        let mut q = finished(&b, 1000 * MS, range);
        assert!(!p.events.contentions.is_empty());
        let rows = |p: &Profile| p.events.counters.iter().map(|r| r.lock_contentions).collect::<Vec<_>>();
        assert_eq!(rows(&p), rows(&q), "{range:?}");
        // Aggregates carry no per-thread times (no view shows them); the rest is the same.
        p.events.times.contentions.clear();
        q.events.times.contentions.clear();
        // The log is kept only with the event log on: compare the contention figures.
        p.events.log.clear();
        q.events.log.clear();
        p.events.log_unpaired = 0;
        assert_eq!(normalized(&p), normalized(&q), "{range:?}");
    }
    let p = finished(&b, 1000 * MS, TimeRange::ALL);
    let sites: Vec<_> =
        p.events.contentions.iter().map(|c| (c.site.as_str(), c.count, c.wait_ns, c.max_wait_ns)).collect();
    assert_eq!(sites, vec![("F30", 1, 270 * MS, 270 * MS), ("F20", 4, 55 * MS, 40 * MS)]);
    assert_eq!(p.events.counters.iter().map(|r| r.lock_contentions).sum::<u64>(), 6);
}

/// One exception of the equivalence test: (throw ts, os_tid, type, walked stack, catcher).
type Exc = (u64, u32, &'static str, Vec<u64>, Option<u64>);

/// `excs` as the agent writes them one by one (`--exact-exceptions`, or before aggregation) and as
/// it writes them by default: the caught ones counted per interval, mode generation, thread,
/// type, site, stack and catcher, the uncaught ones on their own; `monitor` changes in both.
fn both_forms(excs: &[Exc], monitor: &[(u64, u8)]) -> (Vec<Record>, Vec<Record>) {
    use std::collections::BTreeMap;
    let mut single: Vec<Record> = vec![ProcessStart::default().into()];
    let mut agg: Vec<Record> = vec![ProcessStart::default().into()];
    for &(ts, mode) in monitor {
        single.push(ExceptionMonitoring { ts, mode, observed: 0 }.into());
        agg.push(ExceptionMonitoring { ts, mode, observed: 0 }.into());
    }
    let mut types: Vec<&str> = Vec::new();
    let mut stacks: Vec<Vec<u64>> = Vec::new();
    // (interval, mode generation, os_tid, type, site, stack, catcher) -> row, as the agent keys them.
    type Key = (u64, usize, u32, u32, u64, u32, u64);
    let mut rows: BTreeMap<Key, ExceptionRow> = BTreeMap::new();
    for (ts, tid, ty, stack, catcher) in excs {
        single.push(
            ExceptionThrown {
                ts: *ts,
                os_tid: *tid,
                type_name: ty.to_string(),
                stack: stack.clone(),
                ..Default::default()
            }
            .into(),
        );
        let Some(catcher) = catcher else {
            agg.push(single.last().unwrap().clone());
            continue;
        };
        single.push(
            ExceptionCaught {
                ts: ts + 1,
                os_tid: *tid,
                function: *catcher,
                site: 10,
                search_frames: 3,
                filters: 1,
                unwind_frames: 2,
                finallies: 1,
            }
            .into(),
        );
        let type_id = match types.iter().position(|t| t == ty) {
            Some(i) => i as u32 + 1,
            None => {
                types.push(ty);
                agg.push(ExceptionType { id: types.len() as u32, class: 5, type_name: ty.to_string() }.into());
                types.len() as u32
            }
        };
        let stack_id = match (stack.is_empty(), stacks.iter().position(|s| s == stack)) {
            (true, _) => 0,
            (false, Some(i)) => i as u32 + 1,
            (false, None) => {
                stacks.push(stack.clone());
                agg.push(ExceptionStack { id: stacks.len() as u32, stack: stack.clone() }.into());
                stacks.len() as u32
            }
        };
        let generation = monitor.iter().filter(|m| m.0 <= *ts).count();
        let site = stack.first().copied().unwrap_or(10);
        let key = (ts / (100 * MS), generation, *tid, type_id, site, stack_id, *catcher);
        let r = rows.entry(key).or_insert(ExceptionRow {
            os_tid: *tid,
            type_id,
            site,
            stack: stack_id,
            catcher: *catcher,
            first_ns: *ts,
            ..Default::default()
        });
        r.last_ns = *ts;
        r.count += 1;
        r.search_frames += 3;
        r.filters += 1;
        r.unwind_frames += 2;
        r.finallies += 1;
    }
    // One record per row, newest interval first: readers do not depend on the order.
    for ((interval, ..), row) in rows.into_iter().rev() {
        agg.push(ExceptionCounts::pack(interval * 100 * MS, 100 * MS, &[row]).unwrap().into());
    }
    (single, agg)
}

#[test]
fn exceptions_counted_by_the_agent_read_back_the_same_figures_as_single_records() {
    use clrprof_trace::exception_monitoring as m;
    let walked = || vec![10, 20];
    let mut excs: Vec<Exc> = vec![
        // Thread 1: one walked throw, then four evenly spaced in one interval (a row's throws
        // are spread evenly from its first to its last: here they are where they were).
        (110 * MS, 1, "Boom", walked(), Some(30)),
        (120 * MS, 1, "Boom", vec![], Some(30)),
        (130 * MS, 1, "Boom", vec![], Some(30)),
        (140 * MS, 1, "Boom", vec![], Some(30)),
        (150 * MS, 1, "Boom", vec![], Some(30)),
        (150 * MS, 2, "Boom", vec![], Some(20)),
        (250 * MS, 2, "Other", vec![], Some(20)),
        (260 * MS, 2, "Other", walked(), Some(20)),
        (270 * MS, 2, "Other", vec![], Some(20)),
    ];
    // A storm: paused at 1 s, a window at 1.9 s with three caught throws, back to full at 3 s.
    excs.extend([1910, 1920, 1930].map(|t| (t * MS, 1, "Boom", vec![], Some(30))));
    excs.push((3100 * MS, 2, "Boom", vec![], Some(30)));
    // Uncaught: on its own in both forms.
    excs.push((3200 * MS, 3, "Fatal", vec![20], None));
    let monitor = [(1000 * MS, m::PAUSED), (1900 * MS, m::WINDOW), (2000 * MS, m::PAUSED), (3000 * MS, m::FULL)];
    let (single, agg) = both_forms(&excs, &monitor);
    let a = events_builder(&single);
    let b = events_builder(&agg);
    for range in [
        TimeRange::ALL,
        TimeRange::new(100 * MS, 300 * MS),
        TimeRange::new(125 * MS, 800 * MS),
        TimeRange::new(1500 * MS, 2500 * MS),
        TimeRange::new(0, 1925 * MS),
        TimeRange::new(3000 * MS, 4000 * MS),
    ] {
        let mut p = finished(&a, 4000 * MS, range);
        let mut q = finished(&b, 4000 * MS, range);
        if range == TimeRange::ALL {
            let thrown: u64 = p.events.exceptions.iter().map(|g| g.thrown).sum();
            assert!(thrown > 14, "the storm's estimate: {thrown}");
            assert_eq!(p.events.times.throws.len() + p.events.times.sampled_throws.len(), 14);
        }
        // The event log lists single records only (it needs --events, which keeps them).
        for x in [&mut p, &mut q] {
            x.events.log.clear();
            x.events.log_unpaired = 0;
        }
        assert_eq!(normalized(&p), normalized(&q), "{range:?}");
    }
    let p = finished(&b, 4000 * MS, TimeRange::new(125 * MS, 800 * MS));
    let g: Vec<_> =
        p.events.exceptions.iter().map(|g| (g.type_name.as_str(), g.thrown, g.caught, g.uncaught)).collect();
    assert_eq!(g, vec![("Boom", 4, 4, 0), ("Other", 3, 3, 0)]);
    assert_eq!(p.events.times.throws.iter().filter(|t| t.1 == 1).count(), 3, "130, 140 and 150 ms");
    let p = finished(&b, 4000 * MS, TimeRange::new(3000 * MS, 4000 * MS));
    let g: Vec<_> =
        p.events.exceptions.iter().map(|g| (g.type_name.as_str(), g.thrown, g.caught, g.uncaught)).collect();
    assert_eq!(g, vec![("Boom", 1, 1, 0), ("Fatal", 1, 0, 1)]);
}

#[test]
fn a_damaged_exception_count_is_skipped_and_counted() {
    let bad = ExceptionCounts { ts: 0, interval_ns: 100 * MS, count: 2, packed: vec![1, 2, 3], rethrown: vec![] };
    let b = events_builder(&[ProcessStart::default().into(), bad.into()]);
    let p = finished(&b, 1000 * MS, TimeRange::ALL);
    assert!(p.events.exceptions.is_empty());
    assert_eq!(p.events.damaged_records, 1);
}

#[test]
fn packed_allocation_samples_read_back_as_the_single_records() {
    let single = everything();
    // The agent packs the samples of each flush into one record, in their order.
    let samples: Vec<AllocationSample> = single
        .iter()
        .filter_map(|r| match r {
            Record::AllocationSample(a) => Some(a.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(samples.len(), 3);
    let mut packed: Vec<Record> =
        single.iter().filter(|r| !matches!(r, Record::AllocationSample(_))).cloned().collect();
    packed.push(AllocationSamples::pack(&samples[..1]).unwrap().into());
    packed.push(AllocationSamples::pack(&samples[1..]).unwrap().into());
    let (a, b) = (events_builder(&single), events_builder(&packed));
    for range in [TimeRange::ALL, TimeRange::new(600 * MS, 1000 * MS), TimeRange::new(0, 800 * MS)] {
        let (mut p, mut q) = (finished(&a, 1000 * MS, range), finished(&b, 1000 * MS, range));
        assert!(p.events.alloc_samples > 0);
        // The log is in record order: the packed samples come last.
        let sorted = |p: &mut Profile| p.events.log.sort_by(|x, y| format!("{x:?}").cmp(&format!("{y:?}")));
        sorted(&mut p);
        sorted(&mut q);
        assert_eq!(normalized(&p), normalized(&q), "{range:?}");
    }
    let damaged = AllocationSamples { ts: 0, count: 1, packed: vec![1], walk_weights: vec![], ..Default::default() };
    let b = events_builder(&[ProcessStart::default().into(), damaged.into()]);
    let p = finished(&b, 1000 * MS, TimeRange::ALL);
    assert_eq!((p.events.alloc_samples, p.events.damaged_records), (0, 1));
}

#[test]
fn interned_allocation_stacks_read_back_as_the_single_records() {
    let single = everything();
    let samples: Vec<AllocationSample> = single
        .iter()
        .filter_map(|r| match r {
            Record::AllocationSample(a) => Some(a.clone()),
            _ => None,
        })
        .collect();
    assert!(samples.iter().filter(|a| !a.stack.is_empty()).count() >= 2);
    // Each flush's new stacks first, then its samples referring to them (the agent's writer);
    // the second flush repeats the first one's stacks.
    let mut interner = AllocationStackInterner::default();
    let mut packed: Vec<Record> =
        single.iter().filter(|r| !matches!(r, Record::AllocationSample(_))).cloned().collect();
    let mut refs = 0;
    for batch in [&samples[..1], &samples[..]] {
        let (defs, r) = interner.pack(batch.to_vec()).unwrap();
        refs += r.stacks.len();
        packed.extend(defs.into_iter().map(Record::from));
        packed.push(r.into());
    }
    assert!(refs > 0);
    let mut twice: Vec<Record> = single.clone();
    twice.extend(samples[..1].iter().cloned().map(Record::from));
    let (a, b) = (events_builder(&twice), events_builder(&packed));
    for range in [TimeRange::ALL, TimeRange::new(600 * MS, 1000 * MS)] {
        let (mut p, mut q) = (finished(&a, 1000 * MS, range), finished(&b, 1000 * MS, range));
        assert!(p.events.alloc_samples > 0);
        let sorted = |p: &mut Profile| p.events.log.sort_by(|x, y| format!("{x:?}").cmp(&format!("{y:?}")));
        sorted(&mut p);
        sorted(&mut q);
        assert_eq!(normalized(&p), normalized(&q), "{range:?}");
        assert_eq!(q.events.damaged_records, 0);
    }
    // A reference to a stack never defined (a definition lost): the record is damage, counted
    // and skipped, like a packing that does not hold its samples.
    let mut interner = AllocationStackInterner::default();
    let (_, r) = interner.pack(samples.clone()).unwrap();
    let b = events_builder(&[ProcessStart::default().into(), r.into()]);
    let p = finished(&b, 1000 * MS, TimeRange::ALL);
    assert_eq!((p.events.alloc_samples, p.events.damaged_records), (0, 1));
}

#[test]
fn thinned_allocation_samples_count_their_weight() {
    // 10 samples of 64 bytes kept one in 50 by the agent (490 dropped), and the same 500 kept
    // whole: the same estimates, the same sites, 10 samples against 500.
    let s = |ts: u64, weight: u32| AllocationSample {
        ts,
        os_tid: 1,
        class: 7,
        type_name: if ts == 1 { "System.String".into() } else { String::new() },
        size: 64,
        stack: vec![10, 11],
        walk_weight: 1,
        weight,
        ..Default::default()
    };
    let functions = ["System.String.Ctor", "Acme.Person..ctor"];
    let thinned: Vec<AllocationSample> = (1..=10).map(|i| s(i, 50)).collect();
    let mut packed = AllocationSamples::pack(&thinned).unwrap();
    packed.thinned = 490;
    let p = alloc_profile(&functions, vec![packed.into()]);
    let whole = alloc_profile(&functions, (1..=500).map(|i| s(i, 0).into()).collect());
    let (a, b) = (&p.events.allocations[0], &whole.events.allocations[0]);
    assert_eq!((a.samples, b.samples), (10, 500));
    assert_eq!((a.count, a.bytes), (b.count, b.bytes));
    let (c, bytes) = upscale(64);
    assert!((a.count as f64 - 500.0 * c).abs() <= 1.0, "{a:?}");
    assert!((a.bytes as f64 - 500.0 * bytes).abs() <= 1.0, "{a:?}");
    let site = site(&p, "Acme.Person..ctor");
    assert_eq!(site.bytes, a.bytes);
    assert_eq!((p.events.alloc_thinned, whole.events.alloc_thinned), (490, 0));
}
