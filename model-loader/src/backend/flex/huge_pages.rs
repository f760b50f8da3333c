//! Transparent huge pages for the weights of a CPU model.
//!
//! Every decode step streams all weights once. Backed by 4 KiB pages, that walk touches a new
//! page every 4 KiB and misses the TLB on each; with 2 MiB pages it misses once per 2 MiB.
//! Linux backs anonymous memory with huge pages only where the process asks (`madvise` is the
//! common system setting), so after loading, every weight buffer is advised (`MADV_HUGEPAGE`)
//! and its resident pages are collapsed into huge pages at once (`MADV_COLLAPSE`). Both are
//! hints: where the kernel refuses them (an older kernel, huge pages disabled), the weights
//! stay as they are and only run slower.

use burn::backend::Flex;
use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;

use super::storage::{f32_storage, values};

/// Size of a transparent huge page on x86-64 and most aarch64 systems.
const HUGE_PAGE: usize = 2 << 20;

/// Advises every `f32` parameter buffer of `module` that spans at least one huge page.
pub fn back_with_huge_pages<M: Module<Flex>>(module: &M) {
    module.visit(&mut HugePageAdvisor);
}

/// The visitor advising each float parameter's buffer.
struct HugePageAdvisor;

impl ModuleVisitor<Flex> for HugePageAdvisor {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Flex, D>>) {
        if let Some(storage) = f32_storage(&param.val()) {
            advise(values(&storage));
        }
    }
}

/// Advises the whole huge pages inside `buffer` (none when it spans less than one).
fn advise(buffer: &[f32]) {
    let start = buffer.as_ptr() as usize;
    let end = start + std::mem::size_of_val(buffer);
    let first = start.next_multiple_of(HUGE_PAGE);
    let last = end / HUGE_PAGE * HUGE_PAGE;
    if last <= first {
        return;
    }
    advise_range(first, last - first);
}

#[cfg(target_os = "linux")]
fn advise_range(address: usize, len: usize) {
    let address = address as *mut libc::c_void;
    // SAFETY: the range lies inside a live buffer of the module (rounded inward to page
    // boundaries); both advice values change only how the kernel backs the pages, never
    // their contents, and failures are ignored (the pages then stay as they are).
    unsafe {
        if libc::madvise(address, len, libc::MADV_HUGEPAGE) == 0 {
            libc::madvise(address, len, libc::MADV_COLLAPSE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_range(_address: usize, _len: usize) {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::flex::storage::tensor_of;

    #[test]
    fn advising_leaves_values_unchanged() {
        let n = 3 * HUGE_PAGE / 4 + 5;
        let values_in: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let tensor = tensor_of(values_in.clone(), [n]);
        let param = Param::from_tensor(tensor);
        HugePageAdvisor.visit_float(&param);
        let storage = f32_storage(&param.val()).unwrap();
        assert_eq!(values(&storage), values_in.as_slice());
        // A buffer smaller than a huge page is left alone.
        advise(&values_in[..10]);
    }
}
