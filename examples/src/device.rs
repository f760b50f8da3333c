//! `--device` and `--dtype` of every example that runs a model: parsing, the default (the
//! first GPU in a CUDA build when the machine has one, else the CPU) and the checks that turn
//! an impossible choice into a clear error instead of a panic deep in a backend.

use std::fmt;
use std::path::Path;

use aquila_engine::{DType, Device, EngineConfig, WeightFormat};
use aquila_model_loader::backend::{GenericCpu, KernelBackend};
use burn::backend::Flex;
use clap::Args;

/// Where a model runs, as the command line chose it; [`DeviceArgs::resolve`] checks it.
#[derive(Args, Debug, Clone, Default)]
pub struct DeviceArgs {
    /// Where the model runs: `cpu`, `cpu-generic` (the CPU through burn's generic operations,
    /// without Aquila's kernels: the code path CUDA runs) or `cuda[:N]`. Default: `cuda:0` in
    /// a CUDA build on a machine with a GPU, else `cpu`.
    #[arg(long, value_parser = parse_device)]
    pub device: Option<Device>,
    /// Type of the model: `f32` (every device); `bf16` (bfloat16 weights on the CPU, the
    /// float type on CUDA); `f16` (CUDA only); `q8_0` (8-bit weights in blocks of 32 with a
    /// scale each, read packed by the CPU kernels); `q4_1` (4-bit layer weights in blocks of 32
    /// with a scale and a minimum each, beside a Q8_0 token table and lm_head: the layout of
    /// the SmolLM2 GGUF, whose weights it holds exactly).
    #[arg(long, value_parser = parse_dtype, default_value = "f32")]
    pub dtype: DtypeArg,
}

/// The `--dtype` choices (see [`DeviceArgs::dtype`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DtypeArg {
    /// 32-bit floats.
    #[default]
    F32,
    /// bfloat16: weights on the CPU, the float type on CUDA.
    Bf16,
    /// Half precision (CUDA only).
    F16,
    /// Q8_0 weights.
    Q8_0,
    /// Q4_1 layer weights beside a Q8_0 token table and lm_head.
    Q4_1,
}

impl DeviceArgs {
    /// The device and dtype to run on, checked against this build and this machine.
    pub fn resolve(&self) -> Result<DeviceChoice, DeviceError> {
        let device = match self.device {
            Some(device) => device,
            None => default_device(),
        };
        check_device(device)?;
        let (dtype, weights) = match (self.dtype, device.is_cpu()) {
            (DtypeArg::F32, _) => (DType::F32, WeightFormat::F32),
            (DtypeArg::Q8_0, _) => (DType::F32, WeightFormat::Q8_0),
            (DtypeArg::Q4_1, _) => (DType::F32, WeightFormat::Q4_1),
            (DtypeArg::Bf16, true) => (DType::F32, WeightFormat::Bf16),
            (DtypeArg::Bf16, false) => (DType::BF16, WeightFormat::F32),
            (DtypeArg::F16, true) => return Err(DeviceError::CpuDtype(DType::F16)),
            (DtypeArg::F16, false) => (DType::F16, WeightFormat::F32),
        };
        Ok(DeviceChoice {
            device,
            dtype,
            weights,
        })
    }
}

/// A checked device and dtype; its `Display` (`cpu, f32`) is the line of report headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceChoice {
    /// Where the model runs.
    pub device: Device,
    /// The model's float type.
    pub dtype: DType,
    /// The format of the projection and lm_head weights.
    pub weights: WeightFormat,
}

impl DeviceChoice {
    /// Sets the engine configuration's device and dtype.
    pub fn apply(&self, config: &mut EngineConfig) {
        config.device = self.device;
        config.dtype = self.dtype;
        config.weights = self.weights;
    }
}

/// A computation generic over the backend, run by [`DeviceChoice::run`] on the chosen one.
///
/// A model it loads should drop gradient tracking (`Module::no_grad`): the generic CPU path is
/// an autodiff backend.
pub trait BackendTask {
    /// What the computation returns.
    type Output;

    /// Runs on backend `B`, device `device`.
    fn run<B: KernelBackend>(self, device: &B::Device) -> Self::Output;
}

impl DeviceChoice {
    /// Runs `task` on the chosen backend: `Flex`, the generic CPU path, or CUDA in the chosen
    /// float type.
    pub fn run<T: BackendTask>(&self, task: T) -> Result<T::Output, DeviceError> {
        match self.device {
            Device::Cpu => Ok(task.run::<Flex>(&Default::default())),
            Device::CpuGeneric => Ok(task.run::<GenericCpu>(&Default::default())),
            Device::Cuda(index) => run_on_cuda(task, index, self.dtype),
        }
    }
}

/// Runs `task` on CUDA device `index` in `dtype`.
#[cfg(feature = "cuda")]
fn run_on_cuda<T: BackendTask>(
    task: T,
    index: usize,
    dtype: DType,
) -> Result<T::Output, DeviceError> {
    use burn::backend::cuda::{Cuda, CudaDevice};
    use burn::tensor::{bf16, f16};

    let device = CudaDevice::new(index);
    Ok(match dtype {
        DType::F32 => task.run::<Cuda<f32>>(&device),
        DType::BF16 => task.run::<Cuda<bf16>>(&device),
        DType::F16 => task.run::<Cuda<f16>>(&device),
    })
}

/// Without the `cuda` feature there is no CUDA backend.
#[cfg(not(feature = "cuda"))]
fn run_on_cuda<T: BackendTask>(_: T, index: usize, _: DType) -> Result<T::Output, DeviceError> {
    Err(DeviceError::NotBuiltWithCuda(Device::Cuda(index)))
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.weights == WeightFormat::F32 {
            write!(f, "{}, {}", self.device, self.dtype)
        } else {
            write!(f, "{}, {} weights", self.device, self.weights)
        }
    }
}

/// Why a device choice cannot run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceError {
    /// CUDA asked of a binary built without it.
    #[error(
        "--device {0}: this binary was built without CUDA; build it with \
         `AQUILA_CUDA=1 cargo xtask ...` (or `cargo build --features cuda`)"
    )]
    NotBuiltWithCuda(Device),
    /// CUDA asked on a machine without an NVIDIA GPU.
    #[error("--device {0}: no NVIDIA GPU found on this machine; use --device cpu")]
    NoGpu(Device),
    /// A GPU index beyond the machine's GPUs.
    #[error(
        "--device {device}: this machine has {count} GPU(s), cuda:0 to cuda:{last}",
        last = count - 1
    )]
    NoSuchGpu {
        /// The device asked for.
        device: Device,
        /// GPUs found.
        count: usize,
    },
    /// A dtype the CPU does not run.
    #[error("--dtype {0}: the CPU runs f32, bf16 or q8_0 weights; f16 needs --device cuda")]
    CpuDtype(DType),
}

/// Parses `cpu`, `cpu-generic`, `cuda` (device 0) or `cuda:N`.
pub fn parse_device(text: &str) -> Result<Device, String> {
    match text {
        "cpu" => return Ok(Device::Cpu),
        "cpu-generic" => return Ok(Device::CpuGeneric),
        "cuda" => return Ok(Device::Cuda(0)),
        _ => {}
    }
    text.strip_prefix("cuda:")
        .and_then(|index| index.parse().ok())
        .map(Device::Cuda)
        .ok_or_else(|| format!("`{text}` is not a device: use cpu, cpu-generic, cuda or cuda:N"))
}

/// Parses `f32`, `bf16`, `f16`, `q8_0` or `q4_1`.
pub fn parse_dtype(text: &str) -> Result<DtypeArg, String> {
    match text {
        "f32" => Ok(DtypeArg::F32),
        "bf16" => Ok(DtypeArg::Bf16),
        "f16" => Ok(DtypeArg::F16),
        "q8_0" => Ok(DtypeArg::Q8_0),
        "q4_1" => Ok(DtypeArg::Q4_1),
        other => Err(format!(
            "`{other}` is not a dtype: use f32, bf16, f16, q8_0 or q4_1"
        )),
    }
}

/// Whether this binary was built with the CUDA backend.
pub fn built_with_cuda() -> bool {
    cfg!(feature = "cuda")
}

/// `cuda:0` in a CUDA build on a machine with a GPU, else the CPU.
pub fn default_device() -> Device {
    if built_with_cuda() && gpu_count() > 0 {
        Device::Cuda(0)
    } else {
        Device::Cpu
    }
}

/// Checks that `device` exists in this build and on this machine.
pub fn check_device(device: Device) -> Result<(), DeviceError> {
    let Device::Cuda(index) = device else {
        return Ok(());
    };
    if !built_with_cuda() {
        return Err(DeviceError::NotBuiltWithCuda(device));
    }
    match gpu_count() {
        0 => Err(DeviceError::NoGpu(device)),
        count if index >= count => Err(DeviceError::NoSuchGpu { device, count }),
        _ => Ok(()),
    }
}

/// NVIDIA GPUs the driver reports (`/proc/driver/nvidia/gpus/*`, else `/dev/nvidiaN`), found
/// without loading the CUDA library, which a machine without a driver lacks.
pub fn gpu_count() -> usize {
    let proc_gpus = count_entries(Path::new("/proc/driver/nvidia/gpus"), |_| true);
    if proc_gpus > 0 {
        return proc_gpus;
    }
    count_entries(Path::new("/dev"), |name| {
        name.strip_prefix("nvidia")
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// Entries of `dir` whose name passes `keep` (0 when `dir` cannot be read).
fn count_entries(dir: &Path, keep: impl Fn(&str) -> bool) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_str().is_some_and(&keep))
            .count()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_dtypes_parse() {
        assert_eq!(parse_device("cpu"), Ok(Device::Cpu));
        assert_eq!(parse_device("cpu-generic"), Ok(Device::CpuGeneric));
        assert_eq!(parse_device("cuda"), Ok(Device::Cuda(0)));
        assert_eq!(parse_device("cuda:3"), Ok(Device::Cuda(3)));
        for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1", "CPU"] {
            let err = parse_device(bad).unwrap_err();
            assert!(err.contains(bad) && err.contains("cuda:N"), "{err}");
        }
        assert_eq!(parse_dtype("bf16"), Ok(DtypeArg::Bf16));
        assert_eq!(parse_dtype("q8_0"), Ok(DtypeArg::Q8_0));
        assert_eq!(parse_dtype("q4_1"), Ok(DtypeArg::Q4_1));
        assert!(parse_dtype("f64")
            .unwrap_err()
            .contains("f32, bf16, f16, q8_0 or q4_1"));
    }

    #[test]
    fn the_cpu_computes_in_f32_with_packed_weights() {
        let args = DeviceArgs {
            device: Some(Device::Cpu),
            dtype: DtypeArg::F32,
        };
        let choice = args.clone().resolve().unwrap();
        assert_eq!(choice.to_string(), "cpu, f32");
        let q8 = DeviceArgs {
            dtype: DtypeArg::Q8_0,
            ..args.clone()
        };
        let choice = q8.resolve().unwrap();
        assert_eq!(choice.to_string(), "cpu, q8_0 weights");
        let mut config = EngineConfig::new("model");
        choice.apply(&mut config);
        assert_eq!(
            (config.device, config.dtype, config.weights),
            (Device::Cpu, DType::F32, WeightFormat::Q8_0)
        );
        let bf16 = DeviceArgs {
            dtype: DtypeArg::Bf16,
            ..args.clone()
        };
        assert_eq!(bf16.resolve().unwrap().weights, WeightFormat::Bf16);
        let q4 = DeviceArgs {
            dtype: DtypeArg::Q4_1,
            ..args.clone()
        };
        assert_eq!(q4.resolve().unwrap().to_string(), "cpu, q4_1 weights");
        let half = DeviceArgs {
            dtype: DtypeArg::F16,
            ..args
        };
        let err = half.resolve().unwrap_err();
        assert_eq!(err, DeviceError::CpuDtype(DType::F16));
        assert!(err.to_string().contains("--device cuda"));
    }

    #[test]
    fn cuda_without_a_cuda_build_or_gpu_names_the_fix() {
        let args = DeviceArgs {
            device: Some(Device::Cuda(0)),
            dtype: DtypeArg::F32,
        };
        match args.resolve() {
            Err(DeviceError::NotBuiltWithCuda(_)) => {
                assert!(!built_with_cuda());
                let err = args.resolve().unwrap_err().to_string();
                assert!(err.contains("AQUILA_CUDA=1") && err.contains("--features cuda"));
            }
            Err(DeviceError::NoGpu(_)) => assert_eq!(gpu_count(), 0),
            other => assert!(gpu_count() > 0, "{other:?}"),
        }
        let beyond = DeviceArgs {
            device: Some(Device::Cuda(gpu_count() + 7)),
            dtype: DtypeArg::F32,
        };
        assert!(beyond.resolve().is_err());
    }

    #[test]
    fn the_default_is_the_cpu_without_a_cuda_build() {
        if !built_with_cuda() {
            assert_eq!(default_device(), Device::Cpu);
        }
        assert!(check_device(default_device()).is_ok());
    }
}
