//! aquila-engine's tests whose outcome depends on the engine's own timings: the adaptive draft
//! length chooses from measured step costs, so these tests run one at a time, in a binary of
//! their own (cargo runs test binaries one after another), where no other test's work lands
//! in the timings they measure.

#[path = "../integration/common/mod.rs"]
mod common;

mod spec_adaptive;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Held by each test of this binary for its whole run.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Waits until no other test of this binary runs; the guard lets the next one start.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    // A test that failed while holding the lock leaves nothing behind to protect.
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs of a timing-dependent check before it fails.
const RUNS: usize = 3;

/// Runs `check` (alone) until it holds, at most [`RUNS`] times; panics with every run's
/// failure. The policy chooses from the step costs it measures, and other work on the
/// machine (a busy core, the page faults of a first pass) can slow the few timings of a size
/// enough to mislead one run; a policy that is wrong fails every run. Assertions that do not
/// depend on timings (lossless outputs) panic in `check` at once.
fn holds_in_one_of_three_runs(mut check: impl FnMut() -> Result<(), String>) {
    let _alone = one_at_a_time();
    let mut failures = Vec::new();
    for _ in 0..RUNS {
        match check() {
            Ok(()) => return,
            Err(failure) => failures.push(failure),
        }
    }
    panic!("failed in all {RUNS} runs: {failures:#?}");
}

/// `Ok` when `holds`, else the failure `describe` gives.
fn ensure(holds: bool, describe: impl FnOnce() -> String) -> Result<(), String> {
    if holds {
        Ok(())
    } else {
        Err(describe())
    }
}
