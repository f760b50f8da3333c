//! The buffers that the products of one forward pass reuse: the current projection's weights
//! widened to `f32`, and gemm's column-major result before it is transposed. Allocating them
//! afresh for every projection costs a zero fill, or page faults, of a few megabytes each time,
//! during which the other threads of the pass wait. They belong to the thread that runs the
//! pass and are mapped straight from the OS, so that [`release`] at the end of the pass hands
//! them back at once rather than leaving them to the allocator's free lists.

use memmap2::MmapMut;
use std::cell::RefCell;

/// One growable buffer of `f32`s in anonymous memory.
#[derive(Default)]
struct Buffer(Option<MmapMut>);

impl Buffer {
    /// The first `len` values (unspecified contents), grown to fit; `None` if the OS refuses
    /// the memory.
    fn take(&mut self, len: usize) -> Option<&mut [f32]> {
        let bytes = len.checked_mul(size_of::<f32>())?;
        if self.0.as_ref().is_none_or(|map| map.len() < bytes) {
            self.0 = None;
            self.0 = Some(MmapMut::map_anon(bytes.max(size_of::<f32>())).ok()?);
        }
        let map = self.0.as_mut()?;
        // A mapping starts on a page boundary, so its bytes are aligned for `f32`.
        Some(bytemuck::cast_slice_mut(&mut map[..bytes]))
    }
}

/// The pass's two buffers.
#[derive(Default)]
pub(super) struct Workspace {
    widened: Buffer,
    transposed: Buffer,
}

impl Workspace {
    /// A widened weight of `weight` values and a result of `result` values, both unspecified;
    /// `None` if the OS refuses the memory.
    pub(super) fn buffers(
        &mut self,
        weight: usize,
        result: usize,
    ) -> Option<(&mut [f32], &mut [f32])> {
        Some((self.widened.take(weight)?, self.transposed.take(result)?))
    }
}

thread_local! {
    static WORKSPACE: RefCell<Workspace> = RefCell::default();
}

/// Runs `f` with this thread's workspace, or with a fresh one while this thread's is in use
/// (a product started from inside another's parallel loop).
pub(super) fn with_workspace<R>(f: impl FnOnce(&mut Workspace) -> R) -> R {
    WORKSPACE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut workspace) => f(&mut workspace),
        Err(_) => f(&mut Workspace::default()),
    })
}

/// Unmaps this thread's workspace: called at the end of a forward pass, so that an engine
/// holds no buffers of its last prefill.
pub fn release() {
    WORKSPACE.with(|cell| {
        if let Ok(mut workspace) = cell.try_borrow_mut() {
            *workspace = Workspace::default();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_grow_keep_their_length_and_release() {
        let mut workspace = Workspace::default();
        let (a, b) = workspace.buffers(10, 3).unwrap();
        a.fill(1.0);
        b.fill(2.0);
        assert_eq!((a.len(), b.len()), (10, 3));
        let (a, b) = workspace.buffers(5_000_000, 0).unwrap();
        assert_eq!((a.len(), b.len()), (5_000_000, 0));
        a[4_999_999] = 7.0;
        with_workspace(|outer| {
            outer.buffers(4, 4).unwrap().0.fill(3.0);
            // A nested call gets a workspace of its own rather than a borrow panic.
            with_workspace(|inner| inner.buffers(4, 4).unwrap().0.fill(4.0));
            assert_eq!(outer.buffers(4, 4).unwrap().0, [3.0; 4]);
        });
        release();
        WORKSPACE.with(|cell| assert!(cell.borrow().widened.0.is_none()));
    }
}
