//! Reference data and real-model paths shared by the tests of Aquila's crates.
//!
//! The reference outputs of Hugging Face transformers for SmolLM2-135M-Instruct live in this
//! crate's `oracle/` folder (see its README for how they were made), so a clone of the
//! repository carries everything its tests compare against. The real model itself is imported
//! by `cargo xtask import-model` into `models/smollm2-135m-instruct`.
//!
//! ```
//! let oracle = aquila_testdata::GreedyOracle::load();
//! assert_eq!(oracle.prompts.len(), 6);
//! assert!(aquila_testdata::oracle_dir().starts_with(aquila_testdata::workspace_root()));
//! ```

#![warn(missing_docs)]

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The workspace root: the parent of this crate's folder.
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The folder of the transformers reference outputs, inside the repository.
pub fn oracle_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("oracle")
}

/// The oracle file with the shape and sha256 of every f32 tensor of the imported model.
pub fn tensor_hashes_path() -> PathBuf {
    oracle_dir().join("smollm2-135m-instruct-tensors.json")
}

/// The oracle file with greedy continuations and teacher-forced top-5 logits.
pub fn greedy_oracle_path() -> PathBuf {
    oracle_dir().join("smollm2-135m-instruct-greedy.json")
}

/// Reads and parses a JSON file of the test data; panics naming the file on failure (test
/// support: a missing reference file is a broken checkout).
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> T {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading test data {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("parsing test data {}: {e}", path.display()))
}

/// How an oracle prompt was encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OraclePromptKind {
    /// Raw text encoded without special tokens.
    Raw,
    /// One user message through the chat template with the generation prompt.
    Chat,
}

/// The greedy oracle: prompts, their greedy continuations and teacher-forced top-5 logits.
#[derive(Debug, Clone, Deserialize)]
pub struct GreedyOracle {
    /// Every oracle prompt, in file order.
    pub prompts: Vec<OraclePrompt>,
}

impl GreedyOracle {
    /// Loads the oracle from [`greedy_oracle_path`].
    pub fn load() -> Self {
        read_json(&greedy_oracle_path())
    }
}

/// One oracle prompt.
#[derive(Debug, Clone, Deserialize)]
pub struct OraclePrompt {
    /// How `prompt_text` was encoded.
    pub kind: OraclePromptKind,
    /// The prompt as text (for chat prompts, the rendered ChatML).
    pub prompt_text: String,
    /// The prompt's token ids.
    pub prompt_ids: Vec<u32>,
    /// The greedy continuation (EOS does not stop it).
    pub greedy_ids: Vec<u32>,
    /// Teacher-forced figures at each continuation position.
    pub steps: Vec<OracleStep>,
}

impl OraclePrompt {
    /// Positions whose greedy token can be compared: up to the first step whose top-1/top-2
    /// margin is below `min_margin` (near-ties may flip under f32 rounding differences).
    pub fn comparable_positions(&self, min_margin: f64) -> usize {
        self.steps
            .iter()
            .position(|step| step.margin < min_margin)
            .unwrap_or(self.steps.len())
    }
}

/// Teacher-forced figures of one continuation position.
#[derive(Debug, Clone, Deserialize)]
pub struct OracleStep {
    /// The five highest-scoring token ids.
    pub top5_ids: Vec<u32>,
    /// Their logits.
    pub top5_logits: Vec<f32>,
    /// Top-1 logit minus top-2 logit.
    pub margin: f64,
}

/// The oracle's record of one f32 tensor of the imported model.
#[derive(Debug, Clone, Deserialize)]
pub struct TensorHash {
    /// The tensor's shape.
    pub shape: Vec<usize>,
    /// The sha256 of its little-endian f32 bytes, in lower-case hex.
    pub sha256_le_f32: String,
}

/// Every tensor of the imported model by name, from [`tensor_hashes_path`].
pub fn tensor_hashes() -> BTreeMap<String, TensorHash> {
    read_json(&tensor_hashes_path())
}

/// Where `cargo xtask import-model` puts the real SmolLM2 model, relative to the workspace.
pub const REAL_MODEL_DIR: &str = "models/smollm2-135m-instruct";

/// Whether tests on the real model are switched off (`AQUILA_SKIP_REAL_MODEL=1`).
pub fn real_model_skipped() -> bool {
    std::env::var("AQUILA_SKIP_REAL_MODEL").as_deref() == Ok("1")
}

/// The imported real model for a test: `None` (with a line on stderr) when
/// `AQUILA_SKIP_REAL_MODEL=1`, the directory when it is imported; otherwise the test panics with
/// how to import it, so a missing model never passes silently.
pub fn real_model_dir() -> Option<PathBuf> {
    if real_model_skipped() {
        eprintln!("AQUILA_SKIP_REAL_MODEL=1: skipping a test on the real model");
        return None;
    }
    let dir = workspace_root().join(REAL_MODEL_DIR);
    assert!(
        dir.join("config.json").is_file() && dir.join("model.safetensors").is_file(),
        "the real model is missing or incomplete at {}: import it with `cargo xtask \
         import-model`, or set AQUILA_SKIP_REAL_MODEL=1 to skip tests on it",
        dir.display()
    );
    Some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oracle_files_are_inside_the_repository_and_parse() {
        let root = workspace_root();
        assert!(root.join("Cargo.toml").is_file());
        assert!(oracle_dir().starts_with(&root));
        let oracle = GreedyOracle::load();
        assert_eq!(oracle.prompts.len(), 6);
        for prompt in &oracle.prompts {
            assert_eq!(prompt.greedy_ids.len(), prompt.steps.len());
            assert!(prompt.comparable_positions(0.0) == prompt.steps.len());
        }
        let hashes = tensor_hashes();
        assert_eq!(hashes.len(), 272);
        assert_eq!(hashes["model.embed_tokens.weight"].shape, [49152, 576]);
    }
}
