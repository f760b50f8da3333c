//! Forward passes on rayon's pool with the other workers kept awake.
//!
//! A decode step of a small model is a chain of short parallel loops (one per projection)
//! separated by short serial stretches (norms, RoPE, attention of one row). A worker that finds
//! no work goes to sleep after a few rounds, and waking it again costs a system call on one side
//! and a scheduling delay on the other, at every loop. So while a pass runs, every other worker
//! of the pool polls for work ([`rayon::yield_now`], which runs any job it can steal) instead of
//! sleeping; they return to the pool as soon as the pass ends, panics included.
//!
//! The pollers are spawned before the pass starts, so they are the oldest jobs on the pass
//! thread's deque: thieves take them before any job the pass pushes later, and the pass thread
//! never finds a poller of its own while it waits for stolen work (which would wait forever for
//! the pass it sits under). One that nobody took ends at once when the scope runs it after the
//! pass.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    /// Whether this thread is running a pass of [`run_with_warm_workers`].
    static IN_WARM_PASS: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is running a pass of [`run_with_warm_workers`] (whose workers
/// are polling, so a pass nested in it can run right there).
pub(super) fn in_warm_pass() -> bool {
    IN_WARM_PASS.get()
}

/// Runs `pass` on a worker of rayon's global pool while the other workers poll for its jobs.
pub(super) fn run_with_warm_workers<R: Send>(pass: impl FnOnce() -> R + Send) -> R {
    let done = AtomicBool::new(false);
    rayon::scope(|scope| {
        for _ in 1..rayon::current_num_threads() {
            scope.spawn(|_| poll_until(&done));
        }
        let _finished = Finished(&done);
        let _marked = MarkedPass::enter();
        pass()
    })
}

/// Marks the current thread as running a warm pass until dropped (when the pass returns or
/// unwinds), then puts back the mark it found: a worker waiting inside one pass may run
/// another pass's job, and the outer pass must stay marked when that one ends.
struct MarkedPass {
    outer: bool,
}

impl MarkedPass {
    fn enter() -> Self {
        MarkedPass {
            outer: IN_WARM_PASS.replace(true),
        }
    }
}

impl Drop for MarkedPass {
    fn drop(&mut self) {
        IN_WARM_PASS.set(self.outer);
    }
}

/// Runs whatever jobs can be stolen until `done` is set.
fn poll_until(done: &AtomicBool) {
    while !done.load(Ordering::Acquire) {
        if rayon::yield_now() != Some(rayon::Yield::Executed) {
            std::hint::spin_loop();
        }
    }
}

/// Sets its flag when dropped: when the pass returns or unwinds.
struct Finished<'a>(&'a AtomicBool);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::KernelBackend;
    use rayon::prelude::*;

    #[test]
    fn the_pass_runs_on_a_worker_and_its_loops_on_every_thread() {
        assert_eq!(
            rayon::current_thread_index(),
            None,
            "tests run outside the pool"
        );
        let (on_worker, sum) = run_with_warm_workers(|| {
            let sum: u64 = (0..100_000u64).into_par_iter().map(|i| i % 7).sum();
            (rayon::current_thread_index().is_some(), sum)
        });
        assert!(on_worker, "the pass ran outside rayon's pool");
        assert_eq!(sum, (0..100_000u64).map(|i| i % 7).sum::<u64>());
        // Back-to-back passes: the pollers of the first have all returned.
        for n in 0..50u64 {
            let got = run_with_warm_workers(|| (0..n).into_par_iter().sum::<u64>());
            assert_eq!(got, n * n.saturating_sub(1) / 2);
        }
    }

    #[test]
    fn a_wider_pool_runs_many_passes_with_several_pollers() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(5)
            .build()
            .expect("a pool of five threads");
        pool.install(|| {
            for n in 0..200u64 {
                let got = run_with_warm_workers(|| {
                    let halves = rayon::join(|| (0..n).sum::<u64>(), || n);
                    (0..n).into_par_iter().sum::<u64>() + halves.1 - halves.0
                });
                assert_eq!(got, n);
            }
        });
    }

    #[test]
    fn a_pass_inside_a_pass_runs_on_the_outer_pass_thread() {
        assert!(!in_warm_pass(), "tests run outside any pass");
        let (outer, inner, marked) = run_with_warm_workers(|| {
            let outer = std::thread::current().id();
            let inner = <burn::backend::Flex as KernelBackend>::on_kernel_threads(|| {
                let sum: u64 = (0..10_000u64).into_par_iter().sum();
                (std::thread::current().id(), sum)
            });
            (outer, inner, in_warm_pass())
        });
        assert_eq!(inner.0, outer, "the nested pass moved to another thread");
        assert_eq!(inner.1, (0..10_000u64).sum::<u64>());
        assert!(
            marked,
            "the outer pass is still marked after the nested one"
        );
        assert!(!in_warm_pass(), "the mark outlived its pass");
        let outer = MarkedPass::enter();
        drop(MarkedPass::enter());
        assert!(
            in_warm_pass(),
            "an inner mark's end unmarked the outer pass"
        );
        drop(outer);
        assert!(!in_warm_pass());
    }

    #[test]
    fn a_panicking_pass_releases_the_pollers_and_panics() {
        let result = std::panic::catch_unwind(|| {
            run_with_warm_workers(|| -> u32 { panic!("a pass failed") })
        });
        assert!(result.is_err());
        assert_eq!(run_with_warm_workers(|| 7), 7);
    }
}
