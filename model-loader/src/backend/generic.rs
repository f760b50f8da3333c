//! The model's hot operations in burn's tensor operations: the defaults of
//! [`super::KernelBackend`], run by every backend without kernels of its own (CUDA, autodiff),
//! and by `Flex` for tensors its kernels do not take.

use crate::model::{AttentionContext, KvCache, LinearBlock, RmsNorm, RopeTables};
use burn::tensor::activation::silu;
use burn::tensor::backend::Backend;
use burn::tensor::module::attention as sdpa;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Tensor};
use rayon::prelude::*;

/// Each block's `x Wᵀ + b` (see [`super::KernelBackend::project`]).
pub fn project<B: Backend>(x: Tensor<B, 2>, blocks: &[LinearBlock<B>]) -> Vec<Tensor<B, 2>> {
    let device = x.device();
    blocks
        .iter()
        .map(|block| {
            let y = x.clone().matmul(block.float_weight(&device).transpose());
            match &block.bias {
                Some(bias) => y + bias.val().unsqueeze_dim(0),
                None => y,
            }
        })
        .collect()
}

/// burn's [`RmsNorm::forward`].
pub fn rms_norm<B: Backend, const D: usize>(norm: &RmsNorm<B>, x: Tensor<B, D>) -> Tensor<B, D> {
    norm.forward(x)
}

/// `x * cos + rotate_half(x) * sin` with full-shape tables (see [`RopeTables`]).
pub fn rope<B: Backend>(tables: &RopeTables<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    tables.apply_generic(x)
}

/// `silu(gate) * up`.
pub fn swiglu<B: Backend>(gate: Tensor<B, 2>, up: Tensor<B, 2>) -> Tensor<B, 2> {
    silu(gate) * up
}

/// Grouped-query attention with burn's attention operation, one sequence at a time (see
/// [`super::KernelBackend::cached_attention`]).
pub fn cached_attention<B: Backend>(
    query: Tensor<B, 3>,
    key: Tensor<B, 3>,
    value: Tensor<B, 3>,
    context: &AttentionContext<B>,
    cache: &mut KvCache<B>,
    layer: usize,
) -> Tensor<B, 2> {
    let [_, heads, head_dim] = query.dims();
    let kv_heads = key.dims()[1];
    let group = heads / kv_heads;
    let mut outputs: Vec<Tensor<B, 2>> = context
        .spans()
        .iter()
        .map(|span| {
            let n = span.len;
            let rows_of = |t: &Tensor<B, 3>| t.clone().narrow(0, span.start, n);
            let (query, key, value) = (rows_of(&query), rows_of(&key), rows_of(&value));
            let mask = span.generic_mask(group, &query.device());
            let (keys, values) =
                cache.append(layer, span.slot, key.swap_dims(0, 1), value.swap_dims(0, 1));
            // Query heads of one key/value head become consecutive row blocks.
            let query = query
                .reshape([n, kv_heads, group, head_dim])
                .permute([1, 2, 0, 3])
                .reshape([1, kv_heads, group * n, head_dim]);
            let attended = attend(query, keys.unsqueeze_dim(0), values.unsqueeze_dim(0), mask);
            attended
                .reshape([kv_heads, group, n, head_dim])
                .permute([2, 0, 1, 3])
                .reshape([n, heads * head_dim])
        })
        .collect();
    if outputs.len() == 1 {
        outputs.pop().expect("one output")
    } else {
        Tensor::cat(outputs, 0)
    }
}

/// Multiply-adds from which the CPU backend parallelizes one matrix product by itself.
const PARALLEL_WORK: usize = 192 * 192 * 192;

/// Scaled dot-product attention of `query` (`[1, kv_heads, rows, head_dim]`) over `keys` and
/// `values` (`[1, kv_heads, len, head_dim]`), `mask` (`[1, 1, rows, len]`, `true` = hidden).
///
/// The CPU backend computes attention on one thread; when the work is large (a long prefill)
/// the key/value heads are attended on separate worker threads.
fn attend<B: Backend>(
    query: Tensor<B, 4>,
    keys: Tensor<B, 4>,
    values: Tensor<B, 4>,
    mask: Option<Tensor<B, 4, Bool>>,
) -> Tensor<B, 4> {
    let [_, kv_heads, rows, head_dim] = query.dims();
    let len = keys.dims()[2];
    let options = AttentionModuleOptions::default();
    if kv_heads == 1 || rows * len * head_dim < PARALLEL_WORK {
        return sdpa(query, keys, values, mask, None, options);
    }
    let per_head: Vec<Tensor<B, 4>> = (0..kv_heads)
        .into_par_iter()
        .map(|h| {
            let head = |t: &Tensor<B, 4>| t.clone().narrow(1, h, 1);
            sdpa(
                head(&query),
                head(&keys),
                head(&values),
                mask.clone(),
                None,
                options,
            )
        })
        .collect();
    Tensor::cat(per_head, 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::{Distribution, TensorData};

    type B = Flex;

    #[test]
    fn head_parallel_attention_equals_one_call() {
        let device = Default::default();
        // 2 heads, 256 query rows over 256 keys of width 128: above the parallel threshold.
        let shape = [1, 2, 256, 128];
        let query = Tensor::<B, 4>::random(shape, Distribution::Default, &device);
        let keys = Tensor::<B, 4>::random(shape, Distribution::Default, &device);
        let values = Tensor::<B, 4>::random(shape, Distribution::Default, &device);
        let causal: Vec<bool> = (0..256 * 256).map(|i| i % 256 > i / 256).collect();
        let mask =
            Tensor::<B, 4, Bool>::from_data(TensorData::new(causal, [1, 1, 256, 256]), &device);
        const { assert!(256 * 256 * 128 >= PARALLEL_WORK) };
        let split: Vec<f32> = attend(
            query.clone(),
            keys.clone(),
            values.clone(),
            Some(mask.clone()),
        )
        .into_data()
        .to_vec()
        .unwrap();
        let whole: Vec<f32> = sdpa(
            query,
            keys,
            values,
            Some(mask),
            None,
            AttentionModuleOptions::default(),
        )
        .into_data()
        .to_vec()
        .unwrap();
        assert_eq!(split.len(), whole.len());
        for (a, b) in split.iter().zip(&whole) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}
