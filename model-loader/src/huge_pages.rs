//! Transparent huge pages for weight buffers on the CPU.
//!
//! Every decode step streams all weights once. Backed by 4 KiB pages, that walk touches a new
//! page every 4 KiB and misses the TLB on each; with 2 MiB pages it misses once per 2 MiB.
//! Linux backs anonymous memory with huge pages only where the process asks (`madvise` is the
//! common system setting), so each weight buffer is advised (`MADV_HUGEPAGE`) and its resident
//! pages are collapsed into huge pages at once (`MADV_COLLAPSE`). Both are hints: where the
//! kernel refuses them (an older kernel, huge pages disabled), the weights stay as they are and
//! only run slower.

/// Size of a transparent huge page on x86-64 and most aarch64 systems.
pub const HUGE_PAGE: usize = 2 << 20;

/// Advises every huge page that `buffer` touches, including the partial ones at its ends:
/// most weight buffers of a small model (a 576 x 576 projection is 1.3 MiB) span no whole huge
/// page, but the allocator places them next to each other, so the pages they share are
/// collapsed too. Advice changes only how memory is backed, never its contents, so the
/// neighbours sharing a page are unaffected. Where the outer pages are not all mapped (a
/// buffer at the edge of its mapping), only the whole huge pages inside the buffer are advised.
pub fn back_with_huge_pages<T>(buffer: &[T]) {
    if buffer.is_empty() {
        return;
    }
    let start = buffer.as_ptr() as usize;
    let end = start + std::mem::size_of_val(buffer);
    let (outer_first, outer_last) = (
        start / HUGE_PAGE * HUGE_PAGE,
        end.next_multiple_of(HUGE_PAGE),
    );
    if advise_range(outer_first, outer_last - outer_first) {
        return;
    }
    let (inner_first, inner_last) = (
        start.next_multiple_of(HUGE_PAGE),
        end / HUGE_PAGE * HUGE_PAGE,
    );
    if inner_first < inner_last {
        advise_range(inner_first, inner_last - inner_first);
    }
}

/// Advises `len` bytes at `address` (huge-page aligned) and collapses them; whether the range
/// was mapped and advised.
#[cfg(target_os = "linux")]
fn advise_range(address: usize, len: usize) -> bool {
    let address = address as *mut libc::c_void;
    // SAFETY: both advice values change only how the kernel backs the pages of the range,
    // never their contents, whoever owns them; an unmapped part makes `madvise` fail with
    // nothing collapsed, and a failed collapse leaves the pages as they are.
    unsafe {
        if libc::madvise(address, len, libc::MADV_HUGEPAGE) != 0 {
            return false;
        }
        libc::madvise(address, len, libc::MADV_COLLAPSE);
    }
    true
}

#[cfg(not(target_os = "linux"))]
fn advise_range(_address: usize, _len: usize) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advising_leaves_values_unchanged() {
        let n = 3 * HUGE_PAGE / 4 + 5;
        let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let copy = values.clone();
        back_with_huge_pages(&values);
        assert_eq!(values, copy);
        // A buffer smaller than a huge page, and an empty one.
        back_with_huge_pages(&values[..10]);
        back_with_huge_pages::<u8>(&[]);
        assert_eq!(values, copy);
    }
}
