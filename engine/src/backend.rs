//! Picks the burn backend for the configured device and dtype, and puts the backend-generic
//! [`Engine`] behind the [`EngineCore`] trait object the façade uses.

use std::any::Any;
use std::sync::Arc;

use aquila_metrics::Recorder;
use aquila_model_loader::backend::{GenericCpu, KernelBackend};
use aquila_model_loader::model::LlamaModel;
use aquila_model_loader::tokenizer::Tokenizer;

use crate::config::{Device, EngineConfig};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::llm::EngineCore;
use crate::output::{RequestId, RequestOutput, StepOutput};
use crate::prompt::Prompt;
use crate::request::PreparedRequest;
use crate::sampling_params::SamplingParams;
use crate::speculation::FeaturelessProposer;

/// Builds the engine for `config` (validated) on its device and dtype, drafting with
/// `custom_proposer` when given, on the weights of `shared` (another engine's
/// [`EngineCore::loaded_model`]) when given instead of loading them.
pub(crate) fn build_engine(
    config: &EngineConfig,
    custom_proposer: Option<FeaturelessProposer>,
    shared: Option<&dyn Any>,
) -> Result<Box<dyn EngineCore + Send>, EngineError> {
    match config.device {
        Device::Cpu => {
            let device = burn::backend::flex::FlexDevice;
            Ok(Box::new(Engine::<burn::backend::Flex>::new(
                config,
                &device,
                custom_proposer,
                shared_model(shared)?,
            )?))
        }
        Device::CpuGeneric => Ok(Box::new(Engine::<GenericCpu>::new(
            config,
            &Default::default(),
            custom_proposer,
            shared_model(shared)?,
        )?)),
        Device::Cuda(index) => build_cuda_engine(config, index, custom_proposer, shared),
    }
}

/// The model behind `shared`, which must have been loaded for backend `B`.
fn shared_model<B: KernelBackend>(
    shared: Option<&dyn Any>,
) -> Result<Option<LlamaModel<B>>, EngineError> {
    shared
        .map(|model| {
            model
                .downcast_ref::<LlamaModel<B>>()
                .cloned()
                .ok_or_else(|| EngineError::Config {
                    field: "device",
                    reason: "the engine whose weights are shared runs on another device or dtype"
                        .into(),
                })
        })
        .transpose()
}

/// Builds the engine on CUDA device `index` with the configured float type.
#[cfg(feature = "cuda")]
fn build_cuda_engine(
    config: &EngineConfig,
    index: usize,
    custom_proposer: Option<FeaturelessProposer>,
    shared: Option<&dyn Any>,
) -> Result<Box<dyn EngineCore + Send>, EngineError> {
    use burn::backend::cuda::{Cuda, CudaDevice};
    use burn::tensor::{bf16, f16};

    use crate::config::DType;

    let device = CudaDevice::new(index);
    Ok(match config.dtype {
        DType::F32 => Box::new(Engine::<Cuda<f32>>::new(
            config,
            &device,
            custom_proposer,
            shared_model(shared)?,
        )?),
        DType::BF16 => Box::new(Engine::<Cuda<bf16>>::new(
            config,
            &device,
            custom_proposer,
            shared_model(shared)?,
        )?),
        DType::F16 => Box::new(Engine::<Cuda<f16>>::new(
            config,
            &device,
            custom_proposer,
            shared_model(shared)?,
        )?),
    })
}

/// Without the `cuda` feature, CUDA devices are unavailable.
#[cfg(not(feature = "cuda"))]
fn build_cuda_engine(
    _config: &EngineConfig,
    index: usize,
    _custom_proposer: Option<FeaturelessProposer>,
    _shared: Option<&dyn Any>,
) -> Result<Box<dyn EngineCore + Send>, EngineError> {
    Err(EngineError::DeviceUnavailable {
        device: Device::Cuda(index),
        reason: "this build of aquila-engine lacks the `cuda` feature".to_string(),
    })
}

impl<B: KernelBackend> EngineCore for Engine<B> {
    fn prepare(
        &self,
        prompt: Prompt,
        params: SamplingParams,
    ) -> Result<PreparedRequest, EngineError> {
        Engine::prepare(self, prompt, params)
    }

    fn submit(&mut self, request: PreparedRequest) -> RequestId {
        Engine::submit(self, request)
    }

    fn step(&mut self) -> Result<StepOutput, EngineError> {
        Engine::step(self)
    }

    fn abort(&mut self, id: RequestId) -> Result<RequestOutput, EngineError> {
        Engine::abort(self, id)
    }

    fn has_unfinished(&self) -> bool {
        Engine::has_unfinished(self)
    }

    fn recorder(&self) -> &Arc<Recorder> {
        Engine::recorder(self)
    }

    fn tokenizer(&self) -> &Tokenizer {
        Engine::tokenizer(self)
    }

    fn max_model_len(&self) -> usize {
        Engine::max_model_len(self)
    }

    fn vocab_size(&self) -> usize {
        Engine::vocab_size(self)
    }

    fn loaded_model(&self) -> &dyn Any {
        Engine::model(self)
    }
}
