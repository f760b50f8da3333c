//! [`KernelBackend`]: the backend extension through which the model runs its hot operations
//! (projections, attention, RMSNorm, RoPE, SwiGLU).
//!
//! This is burn's idiom for custom kernels: a trait that extends [`Backend`] with the fused
//! operations, implemented by every backend the model runs on. Each operation has a default
//! body made of burn's tensor operations ([`generic`]), so a backend opts in with an empty
//! `impl`; burn's `Flex` CPU backend overrides them with the AVX-512 kernels of
//! [`crate::kernels`] ([`flex`]). Backend selection is static: no run-time type checks.
//!
//! | backend | operations |
//! |---|---|
//! | [`Flex`] | the CPU kernels ([`crate::kernels`]) on contiguous `f32` tensors |
//! | [`GenericCpu`] (`Autodiff<Flex>`) | burn's generic operations on the CPU |
//! | `Autodiff<B>` (training) | burn's generic operations, differentiable |
//! | `burn::backend::Cuda` (feature `cuda`) | burn's generic operations on the GPU |
//!
//! **Kernels off.** The generic path is what CUDA runs, so it is checked on the CPU against
//! the same oracle as the kernels. Running a model as [`GenericCpu`] does that: burn's own
//! `Autodiff` decorator over `Flex` takes the generic defaults, and a model whose parameters
//! do not require gradients ([`burn::module::Module::no_grad`]; [`load_generic_cpu`] does it)
//! records no autodiff graph, so every operation is the `Flex` backend's own.
//!
//! ```
//! use aquila_model_loader::backend::{load_generic_cpu, GenericCpu, KernelBackend};
//! use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
//! use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
//! use burn::backend::Flex;
//!
//! fn next_token<B: KernelBackend>(model: &LlamaModel<B>) -> Vec<f32> {
//!     let mut cache = model.new_kv_cache(1);
//!     let batch = ForwardBatch::new(vec![SequenceInput::new(0, vec![1, 40, 41], 0)]);
//!     let out = model.forward(&batch, &mut cache, &FeatureTap::None).unwrap();
//!     out.logits.into_data().to_vec().unwrap()
//! }
//!
//! let dir = tempfile::tempdir()?;
//! write_tiny_llama(dir.path(), &TinyLlamaOptions::default())?;
//! let kernels = next_token(&LlamaModel::<Flex>::load(dir.path(), &Default::default())?);
//! let generic: LlamaModel<GenericCpu> = load_generic_cpu(dir.path())?;
//! let generic = next_token(&generic);
//! assert!(kernels.iter().zip(&generic).all(|(a, b)| (a - b).abs() < 1e-4));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod flex;
pub mod generic;

use crate::model::{AttentionContext, KvCache, LinearBlock, LlamaModel, RmsNorm, RopeTables};
use crate::LoadError;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use std::path::Path;

/// A burn backend that runs the model's hot operations, each with a generic default (see the
/// module docs). Model code is generic over `B: KernelBackend`.
pub trait KernelBackend: Backend {
    /// Whether attention reads its masks as tensors, built once per forward pass and shared
    /// by the layers (burn's attention), rather than from each span's visibility (the CPU
    /// kernel).
    const ATTENTION_MASK_TENSORS: bool = true;

    /// Whether [`KernelBackend::project`] reads packed weights ([`crate::quant::PackedWeight`])
    /// as they are; backends without kernels for them get the packed values widened to floats
    /// at load ([`crate::model::WeightStorage`]).
    const PACKED_WEIGHTS: bool = false;

    /// Asks the system to back the parameter buffers of `module` (a loaded model) with huge
    /// pages, where the backend's memory is the process's own (the CPU): decoding streams every
    /// weight once per step. Nothing by default.
    fn back_with_huge_pages<M: burn::module::Module<Self>>(_module: &M) {}

    /// Runs `pass` (one forward pass of a model, or a run of small passes such as a drafting
    /// round) on the threads where the backend's parallel kernels start their work cheapest;
    /// passes nested in it run as part of it. On the calling thread by default.
    fn on_kernel_threads<R: Send>(pass: impl FnOnce() -> R + Send) -> R {
        pass()
    }

    /// Each block's `x Wᵀ + b` for `x` of shape `[rows, in]`: `[rows, out_i]`, in block
    /// order.
    fn project(x: Tensor<Self, 2>, blocks: &[LinearBlock<Self>]) -> Vec<Tensor<Self, 2>> {
        generic::project(x, blocks)
    }

    /// `norm` applied to `x` over its last dimension.
    fn rms_norm<const D: usize>(norm: &RmsNorm<Self>, x: Tensor<Self, D>) -> Tensor<Self, D> {
        generic::rms_norm(norm, x)
    }

    /// `x` (`[rows, heads, head_dim]`) rotated by the angles of `tables`.
    fn rope(tables: &RopeTables<Self>, x: Tensor<Self, 3>) -> Tensor<Self, 3> {
        generic::rope(tables, x)
    }

    /// SwiGLU's `silu(gate) * up`.
    fn swiglu(gate: Tensor<Self, 2>, up: Tensor<Self, 2>) -> Tensor<Self, 2> {
        generic::swiglu(gate, up)
    }

    /// Grouped-query attention of `query` (`[rows, heads, head_dim]`, RoPE applied) over each
    /// sequence's history in `layer` of `cache`, after appending the new `key` and `value`
    /// rows (`[rows, kv_heads, head_dim]`) there. Returns `[rows, heads * head_dim]`.
    fn cached_attention(
        query: Tensor<Self, 3>,
        key: Tensor<Self, 3>,
        value: Tensor<Self, 3>,
        context: &AttentionContext<Self>,
        cache: &mut KvCache<Self>,
        layer: usize,
    ) -> Tensor<Self, 2> {
        generic::cached_attention(query, key, value, context, cache, layer)
    }
}

/// Training, and the generic path on the CPU ([`GenericCpu`]).
impl<B: Backend, C: CheckpointStrategy> KernelBackend for Autodiff<B, C> {}

/// burn's CUDA backend, in each float type the engine runs it in.
#[cfg(feature = "cuda")]
impl KernelBackend for burn::backend::Cuda<f32> {}
/// burn's CUDA backend in bfloat16.
#[cfg(feature = "cuda")]
impl KernelBackend for burn::backend::Cuda<burn::tensor::bf16> {}
/// burn's CUDA backend in half precision.
#[cfg(feature = "cuda")]
impl KernelBackend for burn::backend::Cuda<burn::tensor::f16> {}

/// The CPU through burn's generic operations only, without Aquila's kernels: what CUDA runs,
/// on the CPU (see the module docs).
pub type GenericCpu = Autodiff<Flex>;

/// Loads a Hugging Face model directory on [`GenericCpu`], its parameters without gradients
/// so that inference records no autodiff graph.
pub fn load_generic_cpu(dir: &Path) -> Result<LlamaModel<GenericCpu>, LoadError> {
    Ok(LlamaModel::load(dir, &Default::default())?.no_grad())
}
