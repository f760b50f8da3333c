//! [`KernelBackend`] for burn's `Flex` CPU backend: the operations run on the AVX-512 kernels
//! of [`crate::kernels`] when their tensors hold contiguous `f32` values, and on burn's
//! generic operations ([`super::generic`]) otherwise (other float types, strided views).

mod attention;
mod huge_pages;
mod storage;
mod warm_pool;

pub use storage::{f32_storage, update_in_place_or, values};

use super::{generic, KernelBackend};
use crate::kernels::activation::silu_mul;
use crate::kernels::gemm::project_rows_gemm;
use crate::kernels::gemv::{project_rows, ProjectionRef, WeightRef, MAX_GEMV_ROWS};
use crate::kernels::norm;
use crate::kernels::rope::apply_rope;
use crate::model::{AttentionContext, KvCache, LinearBlock, RmsNorm, RopeTables};
use crate::quant::PackedWeight;
use burn::backend::Flex;
use burn::tensor::Tensor;
use storage::tensor_of;

impl KernelBackend for Flex {
    /// The attention kernel reads each span's visibility.
    const ATTENTION_MASK_TENSORS: bool = false;

    /// The kernels read Q8_0 and bfloat16 weights directly.
    const PACKED_WEIGHTS: bool = true;

    /// Advises the weight buffers to the kernel's transparent huge pages.
    fn back_with_huge_pages<M: burn::module::Module<Self>>(module: &M) {
        huge_pages::back_with_huge_pages(module);
    }

    /// On a worker of rayon's pool, with the other workers polling for its jobs while it runs
    /// (module `backend/flex/warm_pool.rs`): each parallel loop of the pass then shares its
    /// work at once, where a loop started from outside the pool hands all of it over and
    /// sleeps until woken, and a sleeping worker must be woken, at every projection. When the
    /// pass ends, the workspace its projections reused (`kernels::gemm::workspace`) is
    /// unmapped. A pass started inside another (a draft head's forward inside a drafting
    /// round) runs at once where it is, as part of the outer pass.
    fn on_kernel_threads<R: Send>(pass: impl FnOnce() -> R + Send) -> R {
        if warm_pool::in_warm_pass() {
            return pass();
        }
        warm_pool::run_with_warm_workers(|| {
            let result = pass();
            crate::kernels::gemm::workspace::release();
            result
        })
    }

    /// Up to [`MAX_GEMV_ROWS`] rows (decoding, draft verification, small batches) on the
    /// weight-streaming kernel of [`crate::kernels::gemv`], all blocks in one parallel pass;
    /// more on [`crate::kernels::gemm`].
    fn project(x: Tensor<Self, 2>, blocks: &[LinearBlock<Self>]) -> Vec<Tensor<Self, 2>> {
        project_on_kernels(&x, blocks).unwrap_or_else(|| generic::project(x, blocks))
    }

    fn rms_norm<const D: usize>(norm: &RmsNorm<Self>, x: Tensor<Self, D>) -> Tensor<Self, D> {
        let gamma = norm.gamma.val();
        let (Some(input), Some(weight)) = (f32_storage(&x), f32_storage(&gamma)) else {
            return generic::rms_norm(norm, x);
        };
        let shape = x.dims();
        let mut out = vec![0.0f32; shape.iter().product()];
        norm::rms_norm(
            values(&input),
            values(&weight),
            norm.epsilon as f32,
            &mut out,
        );
        tensor_of(out, shape)
    }

    /// In place.
    fn rope(tables: &RopeTables<Self>, x: Tensor<Self, 3>) -> Tensor<Self, 3> {
        let [rows, heads, head_dim] = x.dims();
        update_in_place_or(
            x,
            |x| apply_rope(x, rows, heads, head_dim, tables.cos(), tables.sin()),
            |x| generic::rope(tables, x),
        )
    }

    /// In place in `gate`'s buffer.
    fn swiglu(gate: Tensor<Self, 2>, up: Tensor<Self, 2>) -> Tensor<Self, 2> {
        match f32_storage(&up) {
            Some(up_storage) => update_in_place_or(
                gate,
                |gate| silu_mul(gate, values(&up_storage)),
                |gate| generic::swiglu(gate, up),
            ),
            None => generic::swiglu(gate, up),
        }
    }

    /// By [`crate::kernels::attention`], each sequence on its own rayon task.
    fn cached_attention(
        query: Tensor<Self, 3>,
        key: Tensor<Self, 3>,
        value: Tensor<Self, 3>,
        context: &AttentionContext<Self>,
        cache: &mut KvCache<Self>,
        layer: usize,
    ) -> Tensor<Self, 2> {
        attention::attend_on_kernels(&query, &key, &value, context, cache, layer)
            .unwrap_or_else(|| generic::cached_attention(query, key, value, context, cache, layer))
    }
}

/// A block's weight as the kernels read it.
enum KernelWeight<'a> {
    F32(burn_flex::FlexTensor),
    Packed(&'a PackedWeight),
}

/// [`KernelBackend::project`] on the kernels, or `None` when a tensor is not contiguous
/// `f32`.
fn project_on_kernels(
    x: &Tensor<Flex, 2>,
    blocks: &[LinearBlock<Flex>],
) -> Option<Vec<Tensor<Flex, 2>>> {
    let [rows, d_in] = x.dims();
    let input = f32_storage(x)?;
    let storages = blocks
        .iter()
        .map(|block| {
            let weight = match (&block.weight, block.packed()) {
                (Some(weight), _) => KernelWeight::F32(f32_storage(&weight.val())?),
                (None, Some(packed)) => KernelWeight::Packed(packed),
                (None, None) => unreachable!("a block holds its weight in one form"),
            };
            let bias = match &block.bias {
                Some(bias) => Some(f32_storage(&bias.val())?),
                None => None,
            };
            Some((weight, bias))
        })
        .collect::<Option<Vec<_>>>()?;
    let projections: Vec<ProjectionRef<'_>> = storages
        .iter()
        .map(|(weight, bias)| ProjectionRef {
            weight: match weight {
                KernelWeight::F32(storage) => WeightRef::F32(values(storage)),
                KernelWeight::Packed(PackedWeight::Q8_0(m)) => WeightRef::Q8_0(m),
                KernelWeight::Packed(PackedWeight::Bf16(m)) => WeightRef::Bf16(m),
                KernelWeight::Packed(PackedWeight::Q4_1(m)) => WeightRef::Q4_1(m),
            },
            bias: bias.as_ref().map(values),
        })
        .collect();
    let outputs = if rows <= MAX_GEMV_ROWS {
        project_rows(values(&input), rows, d_in, &projections)
    } else {
        project_rows_gemm(values(&input), rows, d_in, &projections)
    };
    Some(
        outputs
            .into_iter()
            .zip(blocks)
            .map(|(out, block)| {
                let (_, d_out) = block.dims();
                tensor_of(out, [rows, d_out])
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forward_pass_runs_on_a_worker_of_the_pool() {
        assert_eq!(
            rayon::current_thread_index(),
            None,
            "tests run outside the pool"
        );
        let worker = Flex::on_kernel_threads(rayon::current_thread_index);
        assert!(worker.is_some(), "the pass ran outside rayon's pool");
    }
}
