//! The end-to-end tests of the `clrprof` command, one module per area, in one test binary: the
//! binary is compiled and linked once (not once per file), the C# apps of `apps/` are built once
//! for all of them, and the shared harness lives in `common`. Run one area with its module as the
//! filter (`cargo test -p clrprof --test e2e sampling::`); docs/testing.md lists the modules, the
//! part that needs no .NET, and the tests that take the machine to themselves.

mod common;

mod allocations;
mod async_stacks;
mod attach;
mod attach_count;
mod bad_input;
mod call_sites;
mod ci_gate;
mod collect;
mod compat;
mod containers;
mod corpus;
mod corpus_web;
mod count;
mod deep_stacks;
mod diff;
mod events;
mod exact_under_load;
mod export_otlp;
mod export_pprof;
mod export_timelines;
mod golden;
mod heap_capture;
mod heap_views;
mod instrument;
mod lifecycle;
mod lines_resolve;
mod lines_views;
mod otlp_push;
mod pyroscope;
mod report_json;
mod requests;
mod runtime_time;
mod runtimes;
mod sampling;
mod stress;
mod tables;
mod tls;
mod triggers;
mod view;
