//! The weights a view ranks and sums by ([`Metric`]) and their one table ([`METRICS`]): the name
//! the command line, the viewer's API, file names and JSON use, the help line, the title and unit,
//! the unit of diffs and the pprof sample type. Every crate reads names from here.

use serde::Serialize;

use crate::stacks::Cost;

/// Which cost column a view ranks and sums by. The variants are declared in the order of
/// [`METRICS`] (the order `--help` lists them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Instrumented exclusive time.
    Time,
    /// Instrumented call counts.
    Calls,
    /// Sampled CPU time.
    Cpu,
    /// Sampled wall time.
    Wall,
    AllocBytes,
    AllocCount,
    /// Exceptions thrown, per throw stack. Not a [`Cost`]: taken from the runtime events
    /// (`clrprof_query::select::event_stacks`); [`Metric::of`] is 0 for it.
    Exceptions,
    /// Monitor lock wait (ns), per waiting stack. Not a [`Cost`]: taken from the runtime events
    /// (`clrprof_query::select::event_stacks`); [`Metric::of`] is 0 for it.
    LockWait,
}

/// Where a metric's figures come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Enter/leave instrumentation: exact.
    Instrumented,
    /// The sampler (CPU or wall time).
    Sampled,
    /// Allocation samples or exact allocation callbacks.
    Allocations,
    /// Runtime events per stack (over all threads), not a [`Cost`] column.
    Events,
}

/// Everything said about one metric.
#[derive(Clone, Copy, Debug)]
pub struct MetricInfo {
    pub metric: Metric,
    /// `--weight` value, the viewer API's `w`, JSON and default file names: `alloc-bytes`.
    pub name: &'static str,
    /// The command line's help line for the value.
    pub help: &'static str,
    /// What the weight is called in titles: `allocated bytes`.
    pub label: &'static str,
    /// The unit of its values in exports and the viewer: `nanoseconds`, `bytes` or `none`.
    pub unit: &'static str,
    /// The unit of its values in diffs: `ns`, `calls`, `bytes`, `objects`, `exceptions`.
    pub diff_unit: &'static str,
    /// The pprof sample type that carries it: `alloc_space`.
    pub pprof_name: &'static str,
    pub source: Source,
}

/// Every metric, in [`Metric`]'s order (the order `--help` lists them).
pub const METRICS: [MetricInfo; 8] = [
    MetricInfo {
        metric: Metric::Time,
        name: "time",
        help: "Instrumented exclusive wall time",
        label: "exclusive time (instrumented)",
        unit: "nanoseconds",
        diff_unit: "ns",
        pprof_name: "time",
        source: Source::Instrumented,
    },
    MetricInfo {
        metric: Metric::Calls,
        name: "calls",
        help: "Instrumented call counts",
        label: "calls",
        unit: "none",
        diff_unit: "calls",
        pprof_name: "calls",
        source: Source::Instrumented,
    },
    MetricInfo {
        metric: Metric::Cpu,
        name: "cpu",
        help: "Sampled on-CPU time",
        label: "CPU time (sampled)",
        unit: "nanoseconds",
        diff_unit: "ns",
        pprof_name: "cpu",
        source: Source::Sampled,
    },
    MetricInfo {
        metric: Metric::Wall,
        name: "wall",
        help: "Sampled wall time (running or blocked)",
        label: "wall time (sampled)",
        unit: "nanoseconds",
        diff_unit: "ns",
        pprof_name: "wall",
        source: Source::Sampled,
    },
    MetricInfo {
        metric: Metric::AllocBytes,
        name: "alloc-bytes",
        help: "Allocated bytes",
        label: "allocated bytes",
        unit: "bytes",
        diff_unit: "bytes",
        pprof_name: "alloc_space",
        source: Source::Allocations,
    },
    MetricInfo {
        metric: Metric::AllocCount,
        name: "alloc-count",
        help: "Allocated objects",
        label: "allocations",
        unit: "none",
        diff_unit: "objects",
        pprof_name: "alloc_objects",
        source: Source::Allocations,
    },
    MetricInfo {
        metric: Metric::Exceptions,
        name: "exceptions",
        help: "Exceptions thrown, per throw stack (all threads)",
        label: "exceptions thrown",
        unit: "none",
        diff_unit: "exceptions",
        pprof_name: "exceptions",
        source: Source::Events,
    },
    MetricInfo {
        metric: Metric::LockWait,
        name: "lock-wait",
        help: "Monitor lock wait, per waiting stack (all threads)",
        label: "lock wait",
        unit: "nanoseconds",
        diff_unit: "ns",
        pprof_name: "lock_wait",
        source: Source::Events,
    },
];

impl Metric {
    /// The metric's row of [`METRICS`].
    pub const fn info(self) -> &'static MetricInfo {
        &METRICS[self as usize]
    }

    /// Every metric, in the table's order.
    pub fn all() -> impl Iterator<Item = Metric> {
        METRICS.iter().map(|i| i.metric)
    }

    /// The sampled weights first (the usual case), then the others in the table's order: the
    /// order the viewer offers them.
    pub fn sampled_first() -> impl Iterator<Item = Metric> {
        let sampled = |m: &Metric| m.info().source == Source::Sampled;
        Metric::all().filter(sampled).chain(Metric::all().filter(move |m| !sampled(m)))
    }

    /// The metric named `name` ([`MetricInfo::name`]).
    pub fn from_name(name: &str) -> Option<Metric> {
        METRICS.iter().find(|i| i.name == name).map(|i| i.metric)
    }

    /// The metric's amount in a cost; 0 for the event weights ([`Metric::is_event`]).
    pub fn of(self, c: &Cost) -> u64 {
        match self {
            Metric::Time => c.time_ns,
            Metric::Calls => c.calls,
            Metric::Cpu => c.cpu_ns,
            Metric::Wall => c.wall_ns,
            Metric::AllocBytes => c.alloc_bytes,
            Metric::AllocCount => c.alloc_count,
            Metric::Exceptions | Metric::LockWait => 0,
        }
    }

    pub const fn name(self) -> &'static str {
        self.info().name
    }

    /// What the weight is called in titles, e.g. `CPU time (sampled)`.
    pub const fn label(self) -> &'static str {
        self.info().label
    }

    /// The unit of its values: `nanoseconds`, `bytes` or `none`.
    pub const fn unit(self) -> &'static str {
        self.info().unit
    }

    /// The unit of its values in diffs.
    pub const fn diff_unit(self) -> &'static str {
        self.info().diff_unit
    }

    /// The pprof sample type name.
    pub const fn pprof_name(self) -> &'static str {
        self.info().pprof_name
    }

    /// True for metrics whose unit is nanoseconds.
    pub fn is_time(self) -> bool {
        self.unit() == "nanoseconds"
    }

    /// True for the exact metrics of enter/leave instrumentation.
    pub fn is_instrumented(self) -> bool {
        self.info().source == Source::Instrumented
    }

    /// Weights read from the runtime events (per stack, over all threads) rather than from costs.
    pub fn is_event(self) -> bool {
        self.info().source == Source::Events
    }
}

/// Serialized as its name.
impl Serialize for Metric {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_the_enums_order() {
        for (i, row) in METRICS.iter().enumerate() {
            assert_eq!(row.metric as usize, i, "{row:?}");
            assert_eq!(Metric::from_name(row.name), Some(row.metric));
        }
        assert_eq!(Metric::from_name("bogus"), None);
    }

    #[test]
    fn the_time_and_event_metrics() {
        let time: Vec<Metric> = Metric::all().filter(|m| m.is_time()).collect();
        assert_eq!(time, [Metric::Time, Metric::Cpu, Metric::Wall, Metric::LockWait]);
        let events: Vec<Metric> = Metric::all().filter(|m| m.is_event()).collect();
        assert_eq!(events, [Metric::Exceptions, Metric::LockWait]);
        let names: Vec<&str> = Metric::sampled_first().map(Metric::name).collect();
        assert_eq!(names, ["cpu", "wall", "time", "calls", "alloc-bytes", "alloc-count", "exceptions", "lock-wait"]);
    }
}
