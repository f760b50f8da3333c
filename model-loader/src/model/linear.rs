//! `SplitLinear`: a linear layer whose output columns are stored as a few contiguous blocks,
//! multiplied in parallel when the product is small.
//!
//! The blocks are either the projections of a fused layer (q, k, v; gate, up), each kept as its
//! own contiguous output, or equal column blocks of one projection. The CPU backend runs a
//! matrix product single-threaded below [`PARALLEL_WORK`] multiply-adds, which covers every
//! decode-time projection of a small model (one row times a `[576, 3072]` weight is 1.8M).
//! Decoding is bound by reading the weights, so below that size the blocks are multiplied on
//! different worker threads and every core streams its share; larger products run block after
//! block, each parallel inside.

use super::export::export_linear;
use crate::checkpoint::ExportedTensor;
use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;

/// Multiply-adds from which the CPU backend parallelizes one matrix product by itself.
pub const PARALLEL_WORK: usize = 192 * 192 * 192;

/// A linear layer `y = x W + b` with `W` (`[in, out]`) stored as column blocks.
#[derive(Module, Debug)]
pub struct SplitLinear<B: Backend> {
    blocks: Vec<Linear<B>>,
}

/// One column block: a row-major `[d_in, width]` weight and an optional `[width]` bias.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnBlock {
    /// Row-major `[d_in, width]` weight.
    pub weight: Vec<f32>,
    /// Optional bias.
    pub bias: Option<Vec<f32>>,
    /// Number of columns.
    pub width: usize,
}

impl ColumnBlock {
    /// Cuts a row-major `[d_in, d_out]` weight (and optional bias) into `count` blocks of
    /// nearly equal width (`count` is clamped to `1..=d_out`).
    pub fn split(weight: &[f32], bias: Option<&[f32]>, d_out: usize, count: usize) -> Vec<Self> {
        let count = count.clamp(1, d_out.max(1));
        let bounds: Vec<usize> = (0..=count).map(|i| i * d_out / count).collect();
        bounds
            .windows(2)
            .map(|w| {
                let (start, end) = (w[0], w[1]);
                Self {
                    weight: weight
                        .chunks_exact(d_out)
                        .flat_map(|row| row[start..end].iter().copied())
                        .collect(),
                    bias: bias.map(|b| b[start..end].to_vec()),
                    width: end - start,
                }
            })
            .collect()
    }
}

impl<B: Backend> SplitLinear<B> {
    /// A randomly initialized layer of one block per output width in `widths` (for training).
    pub fn init(d_in: usize, widths: &[usize], bias: bool, device: &B::Device) -> Self {
        Self {
            blocks: widths
                .iter()
                .map(|&w| LinearConfig::new(d_in, w).with_bias(bias).init(device))
                .collect(),
        }
    }

    /// A layer from column blocks of a `d_in`-row weight.
    pub fn from_blocks(blocks: Vec<ColumnBlock>, d_in: usize, device: &B::Device) -> Self {
        let blocks = blocks
            .into_iter()
            .map(|block| Linear {
                weight: Param::from_tensor(Tensor::from_data(
                    TensorData::new(block.weight, [d_in, block.width]),
                    device,
                )),
                bias: block.bias.map(|b| {
                    Param::from_tensor(Tensor::from_data(TensorData::new(b, [block.width]), device))
                }),
            })
            .collect();
        Self { blocks }
    }

    /// Number of column blocks.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// The whole layer as one Hugging Face projection, whatever its column blocks:
    /// `{prefix}.weight` (`[out, in]`, the blocks' columns in order) and, when any block has
    /// a bias, `{prefix}.bias` (`[out]`; zeros for blocks without one).
    pub fn export_projection(&self, prefix: &str) -> Vec<ExportedTensor> {
        export_linear(&self.blocks, prefix)
    }

    /// A fused layer as one projection per block, in block order: `{prefixes[i]}.weight`
    /// (`[width_i, in]`) and `{prefixes[i]}.bias` when block `i` has a bias. This is the
    /// inverse of [`super::WeightLoader::projections`].
    ///
    /// # Panics
    /// If `prefixes` does not name exactly one projection per block (a layer cut into column
    /// blocks of one projection must be exported with [`SplitLinear::export_projection`]).
    pub fn export_projections(&self, prefixes: &[&str]) -> Vec<ExportedTensor> {
        assert_eq!(
            prefixes.len(),
            self.blocks.len(),
            "export_projections: {} prefixes {prefixes:?} for a layer of {} column blocks",
            prefixes.len(),
            self.blocks.len()
        );
        self.blocks
            .iter()
            .zip(prefixes)
            .flat_map(|(block, prefix)| export_linear(std::slice::from_ref(block), prefix))
            .collect()
    }

    /// Each block's output `[rows, width_i]` for input `[rows, in]`, in block order.
    pub fn forward_blocks(&self, x: Tensor<B, 2>) -> Vec<Tensor<B, 2>> {
        let [rows, d_in] = x.dims();
        let d_out: usize = self.blocks.iter().map(|b| b.weight.dims()[1]).sum();
        if self.blocks.len() > 1 && rows * d_in * d_out < PARALLEL_WORK {
            self.blocks
                .par_iter()
                .map(|block| block.forward(x.clone()))
                .collect()
        } else {
            self.blocks
                .iter()
                .map(|block| block.forward(x.clone()))
                .collect()
        }
    }

    /// `[rows, in]` -> `[rows, out]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let mut parts = self.forward_blocks(x);
        if parts.len() == 1 {
            parts.pop().expect("one block")
        } else {
            Tensor::cat(parts, 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    type B = Flex;

    #[test]
    fn split_blocks_cover_the_columns() {
        let weight: Vec<f32> = (0..2 * 5).map(|v| v as f32).collect(); // [2, 5]
        let blocks = ColumnBlock::split(&weight, Some(&[1.0, 2.0, 3.0, 4.0, 5.0]), 5, 2);
        assert_eq!(blocks.len(), 2);
        assert_eq!((blocks[0].width, blocks[1].width), (2, 3));
        assert_eq!(blocks[0].weight, vec![0.0, 1.0, 5.0, 6.0]);
        assert_eq!(blocks[1].weight, vec![2.0, 3.0, 4.0, 7.0, 8.0, 9.0]);
        assert_eq!(blocks[1].bias.as_deref(), Some([3.0, 4.0, 5.0].as_slice()));
        assert_eq!(ColumnBlock::split(&weight, None, 5, 9).len(), 5);
    }

    #[test]
    fn split_layer_equals_whole_layer() {
        let device = Default::default();
        let (d_in, d_out) = (7, 11);
        let weight: Vec<f32> = (0..d_in * d_out).map(|v| (v as f32 * 0.37).sin()).collect();
        let bias: Vec<f32> = (0..d_out).map(|v| v as f32 * 0.1).collect();
        let whole = SplitLinear::<B>::from_blocks(
            ColumnBlock::split(&weight, Some(&bias), d_out, 1),
            d_in,
            &device,
        );
        let split = SplitLinear::<B>::from_blocks(
            ColumnBlock::split(&weight, Some(&bias), d_out, 3),
            d_in,
            &device,
        );
        assert_eq!((whole.num_blocks(), split.num_blocks()), (1, 3));
        for rows in [1, 300] {
            let x: Vec<f32> = (0..rows * d_in).map(|v| (v as f32 * 0.11).cos()).collect();
            let x = Tensor::<B, 2>::from_data(TensorData::new(x, [rows, d_in]), &device);
            let a: Vec<f32> = whole.forward(x.clone()).into_data().to_vec().unwrap();
            let b: Vec<f32> = split.forward(x).into_data().to_vec().unwrap();
            assert_eq!(a.len(), rows * d_out);
            for (a, b) in a.iter().zip(&b) {
                assert!((a - b).abs() < 1e-5, "{a} vs {b}");
            }
        }
    }
}
