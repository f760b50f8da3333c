//! RMSNorm as in Hugging Face Llama: `x / sqrt(mean(x^2) + eps) * weight`, over the last
//! dimension. burn's [`burn::nn::RmsNorm`] computes exactly this; this module builds it and
//! applies it ([`rms_norm`]) through [`KernelBackend::rms_norm`].

use super::export::export_tensor;
use super::WeightLoader;
use crate::backend::KernelBackend;
use crate::checkpoint::ExportedTensor;
use burn::module::Param;
use burn::nn::RmsNormConfig;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

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

/// `norm` applied to `x` over its last dimension: by the CPU kernel on `Flex` (contiguous
/// `f32` values), by burn's [`RmsNorm::forward`] elsewhere.
pub fn rms_norm<B: KernelBackend, const D: usize>(
    norm: &RmsNorm<B>,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    B::rms_norm(norm, x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::TensorData;

    fn normed<B: KernelBackend>() -> Vec<f32> {
        let device = Default::default();
        let mut norm = init_rms_norm::<B>(5, 1e-5, &device);
        norm.gamma = Param::from_tensor(Tensor::from_data([0.5f32, 1.0, 1.5, 2.0, -1.0], &device));
        let x: Vec<f32> = (0..15).map(|v| (v as f32 * 0.7).sin() * 3.0).collect();
        let x = Tensor::<B, 2>::from_data(TensorData::new(x, [3, 5]), &device);
        rms_norm(&norm, x)
            .into_data()
            .convert::<f32>()
            .to_vec()
            .unwrap()
    }

    #[test]
    fn kernel_matches_burns_rms_norm() {
        let (cpu, generic) = (normed::<Flex>(), normed::<Autodiff<Flex>>());
        assert_eq!(cpu.len(), 15);
        for (a, b) in cpu.iter().zip(&generic) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}
