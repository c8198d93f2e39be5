//! Unit tests of the runtime events.

use super::*;
use crate::ProfileBuilder;
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
