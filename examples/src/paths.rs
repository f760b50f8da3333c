//! Where the examples find models by default.

use std::path::PathBuf;

/// The workspace root: the parent of this crate's manifest directory.
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// The default target model, imported by `cargo xtask import-model`.
pub fn default_model_dir() -> PathBuf {
    workspace_root()
        .join("models")
        .join("smollm2-135m-instruct")
}
