//! `SplitLinear`: a linear layer made of one or more projections of the same input (q, k and
//! v; gate and up), each kept as its own block so that each output comes out contiguous.
//!
//! Weights are stored as Hugging Face stores them, `[out, in]`: every output is the dot
//! product of an input row with a contiguous weight row. The products run through
//! [`KernelBackend::project`]: the CPU kernels on `Flex`, burn's matrix product on the
//! transposed weight elsewhere.
//!
//! A block's weight may be held packed ([`PackedWeight`]: Q8_0 or bfloat16) instead of as an
//! `f32` parameter; only backends whose kernels read packed weights
//! ([`KernelBackend::PACKED_WEIGHTS`]) get packed blocks, the others the packed values widened
//! to floats at load ([`WeightStorage`]).

use super::export::export_linear;
use crate::backend::KernelBackend;
use crate::checkpoint::ExportedTensor;
use crate::quant::{PackedWeight, WeightFormat};
use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

pub use crate::kernels::gemv::MAX_GEMV_ROWS;

/// One projection: `y = x Wᵀ + b` with `W` stored `[out, in]`, as an `f32` parameter or
/// packed (exactly one of the two).
#[derive(Module, Debug)]
pub struct LinearBlock<B: Backend> {
    /// `[out, in]`, when the weight is not packed.
    pub(crate) weight: Option<Param<Tensor<B, 2>>>,
    /// `[out]`.
    pub(crate) bias: Option<Param<Tensor<B, 1>>>,
    /// `[out, in]` in a packed format, read by the CPU kernels.
    #[module(skip)]
    pub(crate) packed: Option<PackedWeight>,
}

impl<B: Backend> LinearBlock<B> {
    /// Input and output widths.
    pub fn dims(&self) -> (usize, usize) {
        let [d_out, d_in] = match (&self.weight, &self.packed) {
            (Some(weight), _) => weight.dims(),
            (None, Some(packed)) => packed.shape(),
            (None, None) => unreachable!("a block holds its weight in one form"),
        };
        (d_in, d_out)
    }

    /// The packed weight, if the block holds one.
    pub fn packed(&self) -> Option<&PackedWeight> {
        self.packed.as_ref()
    }

    /// The weight as a float tensor on `device` (a packed weight widened).
    pub(crate) fn float_weight(&self, device: &B::Device) -> Tensor<B, 2> {
        match (&self.weight, &self.packed) {
            (Some(weight), _) => weight.val(),
            (None, Some(packed)) => {
                Tensor::from_data(TensorData::new(packed.dequantize(), packed.shape()), device)
            }
            (None, None) => unreachable!("a block holds its weight in one form"),
        }
    }

    /// A block of `weight` (`[out, in]`, row-major `d_in` wide) and `bias` stored as `storage`
    /// says.
    pub(crate) fn new(
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
        d_in: usize,
        storage: WeightStorage,
        device: &B::Device,
    ) -> Self {
        let out = weight.len() / d_in.max(1);
        let packed = PackedWeight::pack(storage.format, &weight, out, d_in);
        match packed {
            Some(packed) if storage.packed => Self::from_packed(packed, bias, device),
            widened => {
                let bias = bias_param(bias, out, device);
                let values = widened.map_or(weight, |p| p.dequantize());
                Self {
                    weight: Some(Param::from_tensor(Tensor::from_data(
                        TensorData::new(values, [out, d_in]),
                        device,
                    ))),
                    bias,
                    packed: None,
                }
            }
        }
    }

    /// The block with its weight packed in `format`, packed from its own values a few rows at
    /// a time (a packed weight is widened row by row, never whole); `None` where it already
    /// is in `format` or `format` does not pack rows this wide. The bias is shared.
    fn packed_as(&self, format: WeightFormat) -> Option<Self> {
        let (d_in, d_out) = self.dims();
        if self.packed.as_ref().map(PackedWeight::format) == Some(format) {
            return None;
        }
        let packed = PackedWeight::pack_rows(format, d_out, d_in, |rows| match &self.packed {
            Some(packed) => {
                let mut values = vec![0.0; rows.len() * d_in];
                for (row, out) in rows.zip(values.chunks_exact_mut(d_in)) {
                    packed.dequantize_row(row, out);
                }
                values
            }
            None => {
                let weight = self
                    .weight
                    .as_ref()
                    .expect("a block holds its weight in one form");
                weight
                    .val()
                    .slice([rows, 0..d_in])
                    .into_data()
                    .into_vec::<f32>()
                    .expect("an f32 weight")
            }
        })?;
        Some(Self {
            weight: None,
            bias: self.bias.clone(),
            packed: Some(packed),
        })
    }

    /// A block of a packed weight and `bias`.
    pub(crate) fn from_packed(
        packed: PackedWeight,
        bias: Option<Vec<f32>>,
        device: &B::Device,
    ) -> Self {
        let [out, _] = packed.shape();
        Self {
            weight: None,
            bias: bias_param(bias, out, device),
            packed: Some(packed),
        }
    }
}

/// `bias` (`[out]`) as a parameter on `device`.
fn bias_param<B: Backend>(
    bias: Option<Vec<f32>>,
    out: usize,
    device: &B::Device,
) -> Option<Param<Tensor<B, 1>>> {
    bias.map(|b| Param::from_tensor(Tensor::from_data(TensorData::new(b, [out]), device)))
}

/// How a loader stores the weights of linear layers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WeightStorage {
    /// The format the values are rounded to.
    pub format: WeightFormat,
    /// Whether packed formats stay packed ([`KernelBackend::PACKED_WEIGHTS`]); otherwise
    /// their values are widened back to `f32` parameters.
    pub packed: bool,
}

impl WeightStorage {
    /// Whether weights whose rows are `d_in` wide are kept packed.
    pub fn keeps_packed(&self, d_in: usize) -> bool {
        self.packed && self.format.packs(d_in)
    }

    /// The storage of the token table and lm_head beside layers stored as `self`: the same,
    /// in the format's [`WeightFormat::table_format`].
    pub fn for_table(self) -> Self {
        Self {
            format: self.format.table_format(),
            ..self
        }
    }

    /// Weights in `format`, packed when backend `B` reads packed weights.
    pub fn for_backend<B: KernelBackend>(format: WeightFormat) -> Self {
        Self {
            format,
            packed: B::PACKED_WEIGHTS,
        }
    }
}

/// The values of one block: a row-major `[out, in]` weight and an optional `[out]` bias.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockWeights {
    /// Row-major `[out, in]` weight (Hugging Face layout).
    pub weight: Vec<f32>,
    /// Optional bias.
    pub bias: Option<Vec<f32>>,
    /// Number of outputs.
    pub out: usize,
}

/// A linear layer whose outputs are one or more blocks (see the module docs).
#[derive(Module, Debug)]
pub struct SplitLinear<B: Backend> {
    blocks: Vec<LinearBlock<B>>,
}

impl<B: Backend> SplitLinear<B> {
    /// A randomly initialized layer of one block per output width in `widths` (for training),
    /// drawn as burn's `Linear` draws: uniform in `±1/sqrt(d_in)`.
    pub fn init(d_in: usize, widths: &[usize], bias: bool, device: &B::Device) -> Self {
        let initializer = Initializer::KaimingUniform {
            gain: 1.0 / 3.0f64.sqrt(),
            fan_out_only: false,
        };
        Self {
            blocks: widths
                .iter()
                .map(|&out| LinearBlock {
                    weight: Some(initializer.init_with([out, d_in], Some(d_in), Some(out), device)),
                    bias: bias.then(|| initializer.init_with([out], Some(d_in), Some(out), device)),
                    packed: None,
                })
                .collect(),
        }
    }

    /// A layer of one block per output width in `widths` whose weights (and biases) are all
    /// zero: it outputs zeros, so a residual block ending in it adds nothing until trained.
    pub fn zeros(d_in: usize, widths: &[usize], bias: bool, device: &B::Device) -> Self {
        Self {
            blocks: widths
                .iter()
                .map(|&out| LinearBlock {
                    weight: Some(Param::from_tensor(Tensor::zeros([out, d_in], device))),
                    bias: bias.then(|| Param::from_tensor(Tensor::zeros([out], device))),
                    packed: None,
                })
                .collect(),
        }
    }

    /// A layer from the values of its blocks, all `d_in` wide, in `f32`.
    pub fn from_blocks(blocks: Vec<BlockWeights>, d_in: usize, device: &B::Device) -> Self {
        Self::from_blocks_stored(blocks, d_in, WeightStorage::default(), device)
    }

    /// A layer from the values of its blocks, all `d_in` wide, stored as `storage` says.
    pub fn from_blocks_stored(
        blocks: Vec<BlockWeights>,
        d_in: usize,
        storage: WeightStorage,
        device: &B::Device,
    ) -> Self {
        let blocks = blocks
            .into_iter()
            .map(|block| {
                debug_assert_eq!(block.weight.len(), block.out * d_in);
                LinearBlock::new(block.weight, block.bias, d_in, storage, device)
            })
            .collect();
        Self { blocks }
    }

    /// A layer of `blocks`.
    pub(crate) fn from_linear_blocks(blocks: Vec<LinearBlock<B>>) -> Self {
        Self { blocks }
    }

    /// A one-block layer without bias sharing `weight` (`[out, in]`), e.g. a tied lm_head on
    /// the embedding table.
    pub fn from_weight(weight: Tensor<B, 2>) -> Self {
        Self {
            blocks: vec![LinearBlock {
                weight: Some(Param::from_tensor(weight)),
                bias: None,
                packed: None,
            }],
        }
    }

    /// A one-block layer without bias holding `weight` packed.
    pub fn from_packed(weight: PackedWeight) -> Self {
        Self {
            blocks: vec![LinearBlock {
                weight: None,
                bias: None,
                packed: Some(weight),
            }],
        }
    }

    /// The packed weight of a one-block layer that holds one.
    pub fn packed_weight(&self) -> Option<&PackedWeight> {
        match self.blocks.as_slice() {
            [block] => block.packed(),
            _ => None,
        }
    }

    /// Bytes of the layer's packed weights.
    pub fn packed_bytes(&self) -> usize {
        self.blocks
            .iter()
            .filter_map(LinearBlock::packed)
            .map(PackedWeight::bytes)
            .sum()
    }

    /// The layer with its blocks held packed in `format` (for the CPU kernels; see
    /// [`KernelBackend::PACKED_WEIGHTS`]), each packed from its own values a few rows at a
    /// time; blocks already in `format`, or too narrow for it, are shared as they are.
    pub fn packed_as(&self, format: WeightFormat) -> Self {
        Self {
            blocks: self
                .blocks
                .iter()
                .map(|block| block.packed_as(format).unwrap_or_else(|| block.clone()))
                .collect(),
        }
    }

    /// Number of blocks.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// The whole layer as one Hugging Face projection: `{prefix}.weight` (`[out, in]`, the
    /// blocks' rows in order) and, when any block has a bias, `{prefix}.bias` (`[out]`; zeros
    /// for blocks without one).
    pub fn export_projection(&self, prefix: &str) -> Vec<ExportedTensor> {
        export_linear(&self.blocks, prefix)
    }

    /// A fused layer as one projection per block, in block order: `{prefixes[i]}.weight`
    /// (`[out_i, in]`) and `{prefixes[i]}.bias` when block `i` has a bias. This is the
    /// inverse of [`super::WeightLoader::projections`].
    ///
    /// # Panics
    /// If `prefixes` does not name exactly one projection per block.
    pub fn export_projections(&self, prefixes: &[&str]) -> Vec<ExportedTensor> {
        assert_eq!(
            prefixes.len(),
            self.blocks.len(),
            "export_projections: {} prefixes {prefixes:?} for a layer of {} blocks",
            prefixes.len(),
            self.blocks.len()
        );
        self.blocks
            .iter()
            .zip(prefixes)
            .flat_map(|(block, prefix)| export_linear(std::slice::from_ref(block), prefix))
            .collect()
    }
}

impl<B: KernelBackend> SplitLinear<B> {
    /// Each block's output `[rows, out_i]` for input `[rows, in]`, in block order.
    pub fn forward_blocks(&self, x: Tensor<B, 2>) -> Vec<Tensor<B, 2>> {
        B::project(x, &self.blocks)
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
    use burn::backend::{Autodiff, Flex};

    fn layer<B: KernelBackend>(d_in: usize, widths: &[usize]) -> SplitLinear<B> {
        let blocks = widths
            .iter()
            .enumerate()
            .map(|(b, &out)| BlockWeights {
                weight: (0..out * d_in)
                    .map(|v| ((v + 31 * b) as f32 * 0.37).sin())
                    .collect(),
                bias: (b != 1).then(|| (0..out).map(|v| v as f32 * 0.1).collect()),
                out,
            })
            .collect();
        SplitLinear::from_blocks(blocks, d_in, &Default::default())
    }

    fn run<B: KernelBackend>(layer: &SplitLinear<B>, rows: usize, d_in: usize) -> Vec<f32> {
        let x: Vec<f32> = (0..rows * d_in).map(|v| (v as f32 * 0.11).cos()).collect();
        let x = Tensor::<B, 2>::from_data(TensorData::new(x, [rows, d_in]), &Default::default());
        let out = layer.forward(x);
        out.into_data().convert::<f32>().to_vec().unwrap()
    }

    #[test]
    fn kernel_and_generic_paths_agree() {
        let (d_in, widths) = (37, [11, 5, 20]);
        let cpu = layer::<Flex>(d_in, &widths);
        // Autodiff<Flex> runs burn's generic operations on the same values.
        let generic = layer::<Autodiff<Flex>>(d_in, &widths);
        // Below, at and above the kernel's row limit.
        for rows in [1, 3, MAX_GEMV_ROWS, MAX_GEMV_ROWS + 1, 300] {
            let (a, b) = (run(&cpu, rows, d_in), run(&generic, rows, d_in));
            assert_eq!(a.len(), rows * 36);
            for (a, b) in a.iter().zip(&b) {
                assert!((a - b).abs() < 1e-4, "{rows} rows: {a} vs {b}");
            }
        }
    }

    /// The blocks' packed weights, in block order.
    fn packed_weights(layer: &SplitLinear<Flex>) -> Vec<Vec<f32>> {
        layer
            .blocks
            .iter()
            .map(|block| block.packed().expect("packed").dequantize())
            .collect()
    }

    #[test]
    fn packed_as_packs_each_block_from_its_values() {
        // 64 wide, so that Q8_0 (32-value groups) packs every block.
        let (d_in, widths) = (64, [3, 700, 2]);
        let float = layer::<Flex>(d_in, &widths);
        let q8 = float.packed_as(WeightFormat::Q8_0);
        let floats: Vec<Vec<f32>> = float
            .blocks
            .iter()
            .map(|block| {
                block
                    .float_weight(&Default::default())
                    .into_data()
                    .to_vec()
                    .unwrap()
            })
            .collect();
        let expected: Vec<Vec<f32>> = floats
            .iter()
            .zip(widths)
            .map(|(values, out)| {
                PackedWeight::pack(WeightFormat::Q8_0, values, out, d_in)
                    .unwrap()
                    .dequantize()
            })
            .collect();
        assert_eq!(packed_weights(&q8), expected);
        // Biases are kept: the packed layer computes what the float layer computes, to within
        // the rounding of weights and of inputs (the decode kernel multiplies byte inputs); a
        // lost bias (0.1 per output index) would be far outside.
        for (a, b) in run(&float, 3, d_in).iter().zip(run(&q8, 3, d_in)) {
            assert!((a - b).abs() < 0.1, "{a} vs {b}");
        }
        // From another packed format: packed from the widened values.
        let bf16 = float.packed_as(WeightFormat::Bf16);
        let expected: Vec<Vec<f32>> = packed_weights(&bf16)
            .iter()
            .zip(widths)
            .map(|(values, out)| {
                PackedWeight::pack(WeightFormat::Q8_0, values, out, d_in)
                    .unwrap()
                    .dequantize()
            })
            .collect();
        assert_eq!(
            packed_weights(&bf16.packed_as(WeightFormat::Q8_0)),
            expected
        );
        // Already in the format, or a format that does not pack: the blocks as they are.
        assert_eq!(
            packed_weights(&q8.packed_as(WeightFormat::Q8_0)),
            packed_weights(&q8)
        );
        let unchanged = float.packed_as(WeightFormat::F32);
        assert!(unchanged
            .blocks
            .iter()
            .all(|block| block.packed().is_none()));
        assert_eq!(run(&unchanged, 2, d_in), run(&float, 2, d_in));
    }

    #[test]
    fn blocks_come_out_separately() {
        let cpu = layer::<Flex>(8, &[3, 2]);
        let x = Tensor::<Flex, 2>::ones([2, 8], &Default::default());
        let parts = cpu.forward_blocks(x);
        assert_eq!(parts.len(), 2);
        assert_eq!((parts[0].dims(), parts[1].dims()), ([2, 3], [2, 2]));
    }
}
