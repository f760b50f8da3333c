//! The SwiGLU MLP: `down(silu(gate(x)) * up(x))`.

use super::weights::Projection;
use super::{SplitLinear, WeightLoader};
use crate::backend::KernelBackend;
use crate::checkpoint::ExportedTensor;
use crate::config::LlamaConfig;
use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// Shape of a SwiGLU MLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlpSpec {
    /// Width of the input and output rows.
    pub hidden_size: usize,
    /// Width of the gated activation.
    pub intermediate_size: usize,
    /// Whether the projections have biases.
    pub bias: bool,
}

impl MlpSpec {
    /// The MLP of a layer of `config`.
    pub fn from_config(config: &LlamaConfig) -> Self {
        Self {
            hidden_size: config.hidden_size,
            intermediate_size: config.intermediate_size,
            bias: config.mlp_bias,
        }
    }
}

/// A SwiGLU MLP.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    /// gate and up projections, one block each.
    gate_up: SplitLinear<B>,
    /// Down projection `[intermediate, hidden]`.
    down: SplitLinear<B>,
}

impl<B: Backend> Mlp<B> {
    /// A randomly initialized MLP (for training a draft head).
    pub fn init(spec: &MlpSpec, device: &B::Device) -> Self {
        Self::init_with_down(spec, SplitLinear::init, device)
    }

    /// An MLP with random gate and up projections and a zero down projection: it outputs
    /// zeros until trained, so a residual block around it starts as the identity.
    pub fn init_silent(spec: &MlpSpec, device: &B::Device) -> Self {
        Self::init_with_down(spec, SplitLinear::zeros, device)
    }

    /// Random gate and up projections and the down projection `down` makes.
    fn init_with_down(
        spec: &MlpSpec,
        down: fn(usize, &[usize], bool, &B::Device) -> SplitLinear<B>,
        device: &B::Device,
    ) -> Self {
        let (hidden, inter) = (spec.hidden_size, spec.intermediate_size);
        Self {
            gate_up: SplitLinear::init(hidden, &[inter, inter], spec.bias, device),
            down: down(inter, &[hidden], spec.bias, device),
        }
    }

    /// Loads `{prefix}.{gate,up,down}_proj.weight` (and biases as `spec` says), e.g. with
    /// prefix `model.layers.3.mlp`.
    pub fn load(loader: &mut WeightLoader<'_, B>, prefix: &str, spec: &MlpSpec) -> Option<Self> {
        let (gate, up) = (format!("{prefix}.gate_proj"), format!("{prefix}.up_proj"));
        let gate_up = loader.projections(
            &[
                Projection {
                    prefix: &gate,
                    out: spec.intermediate_size,
                },
                Projection {
                    prefix: &up,
                    out: spec.intermediate_size,
                },
            ],
            spec.hidden_size,
            spec.bias,
        );
        let down = loader.linear(
            &format!("{prefix}.down_proj"),
            spec.intermediate_size,
            spec.hidden_size,
            spec.bias,
        );
        Some(Self {
            gate_up: gate_up?,
            down: down?,
        })
    }

    /// The weights as [`Mlp::load`] reads them: `{prefix}.{gate,up,down}_proj.weight`
    /// (`[out, in]`) and their biases if the MLP has them.
    pub fn export(&self, prefix: &str) -> Vec<ExportedTensor> {
        let (gate, up) = (format!("{prefix}.gate_proj"), format!("{prefix}.up_proj"));
        let mut out = self.gate_up.export_projections(&[&gate, &up]);
        out.extend(self.down.export_projection(&format!("{prefix}.down_proj")));
        out
    }
}

impl<B: KernelBackend> Mlp<B> {
    /// `[rows, hidden]` -> `[rows, hidden]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let [gate, up]: [Tensor<B, 2>; 2] = self
            .gate_up
            .forward_blocks(x)
            .try_into()
            .unwrap_or_else(|_| panic!("the gate/up layer has two projections"));
        self.down.forward(B::swiglu(gate, up))
    }
}
