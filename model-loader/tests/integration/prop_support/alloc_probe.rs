//! The test binary's global allocator: the system allocator, plus a per-thread probe that
//! measures the largest single allocation made while it is armed. The parser properties use it
//! to show that no input makes a parser allocate more than the input can justify.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// `Some(largest so far)` while this thread's probe is armed.
    static LARGEST: Cell<Option<usize>> = const { Cell::new(None) };
}

/// [`System`], recording allocation sizes for armed threads.
struct ProbingAllocator;

/// Records an allocation of `size` bytes on the current thread.
fn record(size: usize) {
    // `try_with` fails only while the thread is being torn down: nothing to record then.
    let _ = LARGEST.try_with(|largest| {
        if let Some(so_far) = largest.get() {
            largest.set(Some(so_far.max(size)));
        }
    });
}

// SAFETY: every call is forwarded unchanged to `System`; recording touches only a
// thread-local `Cell` (const-initialized, so it never allocates).
unsafe impl GlobalAlloc for ProbingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: ProbingAllocator = ProbingAllocator;

/// Runs `f` and returns its result with the size of the largest single allocation it made on
/// this thread (work it hands to other threads is not measured).
pub fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|largest| largest.set(Some(0)));
    let result = f();
    let largest = LARGEST.with(|largest| largest.take()).unwrap_or(0);
    (result, largest)
}
