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
