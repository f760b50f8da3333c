//! `WeightLoader`: builds burn parameters from checkpoint tensors in Hugging Face layout
//! (linear weights stay `[out, in]`), fusing projections that share an input. Problems are recorded by the underlying [`StrictReader`] and reported by
//! [`WeightLoader::finish`].

use super::linear::{BlockWeights, LinearBlock, WeightStorage};
use super::SplitLinear;
use crate::checkpoint::{Checkpoint, CheckpointError, StrictReader};
use crate::quant::PackedWeight;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

/// One projection of a fused linear layer: checkpoint prefix (`….q_proj`) and output width.
#[derive(Debug, Clone, Copy)]
pub struct Projection<'p> {
    /// Name prefix of the projection's `.weight` (and `.bias`) tensors.
    pub prefix: &'p str,
    /// Output width of the projection.
    pub out: usize,
}

/// Builds burn parameters from a checkpoint onto one device.
#[derive(Debug)]
pub struct WeightLoader<'a, B: Backend> {
    reader: StrictReader<'a>,
    device: B::Device,
    storage: WeightStorage,
    packed_bytes: usize,
}

impl<'a, B: Backend> WeightLoader<'a, B> {
    /// A loader over `checkpoint` putting tensors on `device`.
    pub fn new(checkpoint: &'a Checkpoint, device: &B::Device) -> Self {
        Self {
            reader: checkpoint.strict(),
            device: device.clone(),
            storage: WeightStorage::default(),
            packed_bytes: 0,
        }
    }

    /// The loader storing the weights of linear layers as `storage` says (`f32` by default).
    pub fn with_storage(mut self, storage: WeightStorage) -> Self {
        self.storage = storage;
        self
    }

    /// Bytes of the packed weights of the layers built so far.
    pub fn packed_bytes(&self) -> usize {
        self.packed_bytes
    }

    /// How linear weights are stored.
    pub fn storage(&self) -> WeightStorage {
        self.storage
    }

    /// The underlying reader (for raw tensors such as `d2t`/`t2d`, or to skip buffers).
    pub fn reader(&mut self) -> &mut StrictReader<'a> {
        &mut self.reader
    }

    /// The target device.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// A tensor from `f32` data already in the wanted layout.
    pub fn tensor<const D: usize>(&self, data: Vec<f32>, shape: [usize; D]) -> Tensor<B, D> {
        Tensor::from_data(TensorData::new(data, shape), &self.device)
    }

    /// A checkpoint tensor of shape `shape`, as stored.
    pub fn take<const D: usize>(&mut self, name: &str, shape: [usize; D]) -> Option<Tensor<B, D>> {
        let data = self.reader.f32(name, &shape)?;
        Some(self.tensor(data, shape))
    }

    /// Like [`WeightLoader::take`], but an absent tensor is not a problem.
    pub fn take_optional<const D: usize>(
        &mut self,
        name: &str,
        shape: [usize; D],
    ) -> Option<Tensor<B, D>> {
        let data = self.reader.optional_f32(name, &shape)?;
        Some(self.tensor(data, shape))
    }

    /// A linear layer from `{prefix}.weight` (`[d_out, d_in]`) and, with `bias`,
    /// `{prefix}.bias` (`[d_out]`).
    pub fn linear(
        &mut self,
        prefix: &str,
        d_in: usize,
        d_out: usize,
        bias: bool,
    ) -> Option<SplitLinear<B>> {
        let block = self.read_block(prefix, d_in, d_out, bias)?;
        Some(self.build(vec![block], d_in))
    }

    /// [`WeightLoader::linear`] with the weight stored as `storage` says rather than as the
    /// loader's other weights (a vocabulary projection kept wider than 4-bit layers).
    pub fn linear_stored(
        &mut self,
        prefix: &str,
        d_in: usize,
        d_out: usize,
        bias: bool,
        storage: WeightStorage,
    ) -> Option<SplitLinear<B>> {
        let layers = std::mem::replace(&mut self.storage, storage);
        let layer = self.linear(prefix, d_in, d_out, bias);
        self.storage = layers;
        layer
    }

    /// One linear layer computing several projections of the same input, one block per
    /// projection (so [`SplitLinear::forward_blocks`] returns each projection's output).
    pub fn projections(
        &mut self,
        parts: &[Projection<'_>],
        d_in: usize,
        bias: bool,
    ) -> Option<SplitLinear<B>> {
        // Read every part before giving up, so that every problem is recorded.
        let blocks: Vec<Option<ReadBlock>> = parts
            .iter()
            .map(|p| self.read_block(p.prefix, d_in, p.out, bias))
            .collect();
        let blocks = blocks.into_iter().collect::<Option<Vec<_>>>()?;
        Some(self.build(blocks, d_in))
    }

    /// A layer of `blocks` stored as the loader stores linear weights.
    fn build(&mut self, blocks: Vec<ReadBlock>, d_in: usize) -> SplitLinear<B> {
        let blocks = blocks
            .into_iter()
            .map(|block| match block {
                ReadBlock::Values(block) => {
                    LinearBlock::new(block.weight, block.bias, d_in, self.storage, &self.device)
                }
                ReadBlock::Packed { weight, bias } => {
                    LinearBlock::from_packed(weight, bias, &self.device)
                }
            })
            .collect();
        let layer = SplitLinear::from_linear_blocks(blocks);
        self.packed_bytes += layer.packed_bytes();
        layer
    }

    /// Reads `{prefix}.weight` (`[d_out, d_in]`) and, with `bias`, `{prefix}.bias`; a weight
    /// kept packed is packed as it is read, a few rows at a time.
    fn read_block(
        &mut self,
        prefix: &str,
        d_in: usize,
        d_out: usize,
        bias: bool,
    ) -> Option<ReadBlock> {
        let name = format!("{prefix}.weight");
        let weight = if self.storage.keeps_packed(d_in) {
            let format = self.storage.format;
            self.reader
                .f32_rows(&name, [d_out, d_in], |read| {
                    PackedWeight::pack_rows(format, d_out, d_in, read)
                })
                .map(|packed| Weight::Packed(packed.expect("the format packs rows this wide")))
        } else {
            self.reader.f32(&name, &[d_out, d_in]).map(Weight::Values)
        };
        // The bias is read even when the weight is unusable, so that its problems are recorded.
        let bias = match bias.then(|| self.reader.f32(&format!("{prefix}.bias"), &[d_out])) {
            Some(loaded) => Some(loaded?),
            None => None,
        };
        Some(match weight? {
            Weight::Values(weight) => ReadBlock::Values(BlockWeights {
                weight,
                bias,
                out: d_out,
            }),
            Weight::Packed(weight) => ReadBlock::Packed { weight, bias },
        })
    }

    /// Fails with every recorded problem and every checkpoint tensor nobody took.
    pub fn finish(self) -> Result<(), CheckpointError> {
        self.reader.finish()
    }
}

/// A weight as read: `f32` values, or packed.
enum Weight {
    Values(Vec<f32>),
    Packed(PackedWeight),
}

/// A block as read: `f32` values (stored as the loader's storage says), or a packed weight
/// with its bias.
enum ReadBlock {
    Values(BlockWeights),
    Packed {
        weight: PackedWeight,
        bias: Option<Vec<f32>>,
    },
}
