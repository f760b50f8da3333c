//! Writing EAGLE heads as Hugging Face head directories (`config.json` and
//! `model.safetensors`), in the layout [`super::EagleHead::load`] and the reference
//! implementations read: [`write_head_dir`], and the config builders [`eagle1_config_json`]
//! and [`eagle3_config_json`] (from `aquila_model_loader::config`, where the fixtures use them
//! too).

use std::path::Path;

use aquila_model_loader::checkpoint::{
    write_json, write_safetensors, ExportedTensor, FloatType, NamedTensor, WriteError,
    SINGLE_FILE_NAME,
};

pub use aquila_model_loader::config::{eagle1_config_json, eagle3_config_json};

/// Name of a head directory's config file.
pub const CONFIG_FILE_NAME: &str = "config.json";

/// Writes a head directory: `dir/config.json` (`config_json`, its `torch_dtype` set to match
/// `dtype` when it is an object) and `dir/model.safetensors` holding `tensors`, floats stored
/// as `dtype` (f32, f16 or bf16, rounded to nearest), integers (`d2t`) as `I64` and flags
/// (`t2d`) as `BOOL`. `dir` is created if needed; it should not hold a sharded checkpoint,
/// whose index loading would prefer.
///
/// Fails, naming the file, if a tensor's values do not fill its shape, two tensors share a
/// name, or a file cannot be written.
pub fn write_head_dir(
    dir: &Path,
    config_json: &serde_json::Value,
    tensors: &[ExportedTensor],
    dtype: FloatType,
) -> Result<(), WriteError> {
    let mut config = config_json.clone();
    if let Some(fields) = config.as_object_mut() {
        fields.insert("torch_dtype".into(), dtype.torch_dtype().into());
    }
    let stored: Vec<NamedTensor> = tensors.iter().map(|t| t.to_named(dtype)).collect();
    write_safetensors(&dir.join(SINGLE_FILE_NAME), &stored)?;
    write_json(&dir.join(CONFIG_FILE_NAME), &config)
}
