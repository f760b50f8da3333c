//! RMSNorm as in Hugging Face Llama: `x / sqrt(mean(x^2) + eps) * weight`, over the last
//! dimension. burn's [`burn::nn::RmsNorm`] computes exactly this; this module builds it.

use super::export::export_tensor;
use super::WeightLoader;
use crate::checkpoint::ExportedTensor;
use burn::module::Param;
use burn::nn::RmsNormConfig;
use burn::tensor::backend::Backend;

pub use burn::nn::RmsNorm;

/// A unit-weight RMSNorm of width `dim` (for training a draft head).
pub fn init_rms_norm<B: Backend>(dim: usize, eps: f64, device: &B::Device) -> RmsNorm<B> {
    RmsNormConfig::new(dim).with_epsilon(eps).init(device)
}

/// Loads an RMSNorm of width `dim` from the weight `name` (`[dim]`).
pub fn load_rms_norm<B: Backend>(
    loader: &mut WeightLoader<'_, B>,
    name: &str,
    dim: usize,
    eps: f64,
) -> Option<RmsNorm<B>> {
    let weight = loader.take(name, [dim])?;
    Some(RmsNorm {
        gamma: Param::from_tensor(weight),
        epsilon: eps,
    })
}

/// An RMSNorm's weight (gamma) as the tensor `name` (`[dim]`), the inverse of
/// [`load_rms_norm`].
pub fn export_rms_norm<B: Backend>(norm: &RmsNorm<B>, name: &str) -> ExportedTensor {
    export_tensor(name, norm.gamma.val())
}
