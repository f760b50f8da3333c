//! `--device` and `--dtype` of every example that runs a model: parsing, the default (the
//! first GPU in a CUDA build when the machine has one, else the CPU) and the checks that turn
//! an impossible choice into a clear error instead of a panic deep in a backend.

use std::fmt;
use std::path::Path;

use aquila_engine::{DType, Device, EngineConfig};
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
    /// Float type of the model: `f32` (every device), `bf16` or `f16` (CUDA only).
    #[arg(long, value_parser = parse_dtype, default_value = "f32")]
    pub dtype: DType,
}

impl DeviceArgs {
    /// The device and dtype to run on, checked against this build and this machine.
    pub fn resolve(&self) -> Result<DeviceChoice, DeviceError> {
        let device = match self.device {
            Some(device) => device,
            None => default_device(),
        };
        check_device(device)?;
        if device.is_cpu() && self.dtype != DType::F32 {
            return Err(DeviceError::CpuDtype(self.dtype));
        }
        Ok(DeviceChoice {
            device,
            dtype: self.dtype,
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
}

impl DeviceChoice {
    /// Sets the engine configuration's device and dtype.
    pub fn apply(&self, config: &mut EngineConfig) {
        config.device = self.device;
        config.dtype = self.dtype;
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
        write!(f, "{}, {}", self.device, self.dtype)
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
    /// A dtype other than f32 on the CPU.
    #[error("--dtype {0}: the CPU runs f32 only; bf16 and f16 need --device cuda")]
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

/// Parses `f32`, `bf16` or `f16`.
pub fn parse_dtype(text: &str) -> Result<DType, String> {
    match text {
        "f32" => Ok(DType::F32),
        "bf16" => Ok(DType::BF16),
        "f16" => Ok(DType::F16),
        other => Err(format!("`{other}` is not a dtype: use f32, bf16 or f16")),
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
        assert_eq!(parse_dtype("bf16"), Ok(DType::BF16));
        assert!(parse_dtype("f64").unwrap_err().contains("f32, bf16 or f16"));
    }

    #[test]
    fn the_cpu_resolves_in_f32_only() {
        let args = DeviceArgs {
            device: Some(Device::Cpu),
            dtype: DType::F32,
        };
        let choice = args.resolve().unwrap();
        assert_eq!(choice.to_string(), "cpu, f32");
        let mut config = EngineConfig::new("model");
        DeviceChoice {
            device: Device::CpuGeneric,
            dtype: DType::F32,
        }
        .apply(&mut config);
        assert_eq!(config.device, Device::CpuGeneric);
        let half = DeviceArgs {
            dtype: DType::BF16,
            ..args
        };
        let err = half.resolve().unwrap_err();
        assert_eq!(err, DeviceError::CpuDtype(DType::BF16));
        assert!(err.to_string().contains("--device cuda"));
    }

    #[test]
    fn cuda_without_a_cuda_build_or_gpu_names_the_fix() {
        let args = DeviceArgs {
            device: Some(Device::Cuda(0)),
            dtype: DType::F32,
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
            dtype: DType::F32,
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
