//! The process's memory as the allocator holds it.

/// Hands the allocator's free memory back to the operating system, so that what a load parsed
/// and dropped (a tokenizer's JSON, conversion buffers) stops counting in the resident memory
/// of the process. glibc's `malloc` keeps freed memory for reuse and returns only what lies at
/// the top of its heap on its own; elsewhere this does nothing.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only returns free memory of the allocator to the OS.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Size from which glibc maps a block on its own while a [`LoadAllocation`] lives: a load's
/// conversion buffers (a tensor's rows in `f32`, megabytes each) then go back to the system
/// the moment they are freed, instead of leaving heap space behind the weights that were
/// allocated after them.
const LOAD_MMAP_THRESHOLD: i32 = 1 << 20;

/// Size from which glibc maps a block on its own once the load is over: the most its dynamic
/// threshold would reach (`DEFAULT_MMAP_THRESHOLD_MAX` on 64-bit), so that a forward pass's
/// buffers are reused from the heap rather than mapped and faulted in anew every step.
const STEADY_MMAP_THRESHOLD: i32 = 32 << 20;

/// Free space at the top of the heap glibc keeps once the load is over (twice the mapping
/// threshold, as its dynamic rule keeps).
const STEADY_TRIM_THRESHOLD: i32 = 2 * STEADY_MMAP_THRESHOLD;

/// While it lives, blocks of 1 MiB and more are mapped on their own, so that a load's
/// conversion buffers go back to the system when freed; when dropped, the allocator's
/// thresholds are set to where glibc's dynamic rule would have taken them during a long run. Process-wide, like the allocator; elsewhere than glibc it does
/// nothing.
#[derive(Debug)]
pub struct LoadAllocation(());

impl LoadAllocation {
    /// Starts a load.
    pub fn begin() -> Self {
        set_thresholds(LOAD_MMAP_THRESHOLD, None);
        Self(())
    }
}

impl Drop for LoadAllocation {
    fn drop(&mut self) {
        set_thresholds(STEADY_MMAP_THRESHOLD, Some(STEADY_TRIM_THRESHOLD));
    }
}

/// Sets glibc's mapping threshold and, when given, its trim threshold.
fn set_thresholds(mmap: i32, trim: Option<i32>) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only changes the allocator's tuning parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, mmap);
        if let Some(trim) = trim {
            libc::mallopt(libc::M_TRIM_THRESHOLD, trim);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = (mmap, trim);
}
