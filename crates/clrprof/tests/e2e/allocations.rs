//! End to end: allocation sites and estimates on a real NuGet library. `apps/CsvRead` reads a CSV
//! file with CsvHelper into `Person` objects (whose constructor builds four strings each) and builds
//! one 20 MB string with a StringBuilder; it prints the figures it knows exactly (its own counts,
//! string sizes checked against `GC.GetAllocatedBytesForCurrentThread`, the process's
//! `GC.GetTotalAllocatedBytes`). The runtime matrix (`runtimes.rs`) runs the same checks on .NET 8
//! and 9, whose samples are `AllocationTick` events.

use crate::common::csv::*;
use crate::common::*;
use std::collections::HashMap;
use std::path::PathBuf;

fn record_csv(name: &str, flags: &[&str]) -> (PathBuf, HashMap<String, u64>) {
    let dir = scratch(name);
    let trace = dir.join(format!("{name}.clrprof"));
    let out = record("CsvRead", &[CSV_ROWS], &trace, flags);
    assert!(out.status.success(), "{}", text(&out.stderr));
    (trace, figures(&text(&out.stdout)))
}

#[test]
fn csv_strings_are_placed_at_the_users_code_and_estimated_without_bias() {
    let _machine = machine::shared();
    let (trace, f) = record_csv("csv-sampled", &[]);
    check_sampled_csv(&trace, &f, "allocation-sampled");
}

#[test]
fn exact_allocations_have_sites_with_exact_counts() {
    let _machine = machine::shared();
    let (trace, f) = record_csv("csv-exact", &["--alloc", "exact"]);
    check_exact_csv(&trace, &f);
}

#[test]
fn allocation_weights_without_allocation_stacks_say_why() {
    let _machine = machine::shared();
    let dir = scratch("alloc-weights");
    // No allocations recorded at all.
    let off = dir.join("off.clrprof");
    let out = record("CsvRead", &["1000"], &off, &["--alloc", "off"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&report(&off, &["--weight", "alloc-count"]).stdout);
    assert!(t.contains("weight: alloc-count — none: the trace has no allocation records"), "{t}");
    // Exact counts without stacks, as a clrprof that kept none in `--alloc exact` wrote them.
    let exact = dir.join("exact.clrprof");
    let out = record("CsvRead", &["1000"], &exact, &["--alloc", "exact"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (records, _) = clrprof_trace::read_all(std::fs::File::open(&exact).unwrap()).unwrap();
    let kept: Vec<clrprof_trace::Record> = records
        .into_iter()
        .filter(|r| {
            !matches!(
                r,
                clrprof_trace::Record::AllocationSamples(_)
                    | clrprof_trace::Record::AllocationSample(_)
                    | clrprof_trace::Record::AllocationStack(_)
            )
        })
        .collect();
    let mut file = clrprof_trace::header().to_vec();
    file.extend(clrprof_trace::encode_records(kept.iter()));
    let counts_only = dir.join("counts-only.clrprof");
    std::fs::write(&counts_only, file).unwrap();
    for weight in ["alloc-count", "alloc-bytes"] {
        let t = text(&report(&counts_only, &["--weight", weight]).stdout);
        assert!(t.contains(&format!("weight: {weight} — none: the trace counts allocations by type only")), "{t}");
    }
    let t = text(&report(&counts_only, &["--view", "allocations"]).stdout);
    assert!(t.contains("exact counts") && t.contains("no allocation sites"), "{t}");
}
