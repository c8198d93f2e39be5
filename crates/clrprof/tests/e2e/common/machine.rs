//! Who runs beside whom in the one end-to-end binary. The harness runs any two tests at once (two
//! test threads on a 2-CPU machine), whatever module they come from; when each file was its own
//! binary, a test ran only beside tests of its file. So the tests say what they need:
//!
//! - [`alone`]: the test's assertions bound time, CPU shares or where samples land (a sleep's wall
//!   time within 5 %, Heavy and Light at 3:1, a sample rate delivered, stacks walked to their real
//!   callers). On 2 CPUs a second profiled app beside it starves the sampler thread and the app's
//!   own threads (late timer signals folded into one, unwind rules of a library read late, the JIT
//!   thread taking the CPU a spinner counts on): the sampling tests failed about one run in three
//!   that way, the figures right and the premise wrong, and passed every time one at a time. The
//!   lock orders this binary's tests only; other work on the machine still competes.
//! - [`shared`]: the test runs .NET programs or other heavy processes (a profiled app, a build, a
//!   collector with fifty clients, a browser); any number of these run together, none beside an
//!   [`alone`] test.
//! - neither: the test reads checked-in traces or refuses bad input without starting a program; it
//!   may run beside anything.
//!
//! The guard is held for the whole test (bind it: `let _machine = machine::alone();`) and released
//! when the test ends, passed or failed.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Exclusive for [`alone`], shared for [`shared`]. On Linux the standard library's lock lets a
/// waiting writer in before new readers, so an `alone` test waits for the tests already running,
/// not for every `shared` test of the suite.
static MACHINE: RwLock<()> = RwLock::new(());

/// The machine to this test: no other `alone` or `shared` test runs meanwhile.
pub fn alone() -> RwLockWriteGuard<'static, ()> {
    // A failed test poisons the lock; the next test still runs.
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

/// Beside other `shared` tests, never beside an `alone` one.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}
