//! A ready [`Tokenizer`] straight from a GGUF file, without writing a model directory.

use super::rebuild_tokenizer;
use crate::gguf::{GgufError, GgufFile};
use crate::tokenizer::Tokenizer;
use std::path::Path;

/// Opens the GGUF file `path` (a vocabulary-only file will do) and builds the tokenizer its
/// `tokenizer.*` metadata describes, as an import would write it.
pub fn tokenizer_from_gguf(path: &Path) -> Result<Tokenizer, GgufError> {
    let file = GgufFile::open(path)?;
    let in_file = |e: GgufError| GgufError::File {
        path: path.to_path_buf(),
        error: Box::new(e),
    };
    let rebuilt = rebuild_tokenizer(file.header(), None).map_err(in_file)?;
    let tokenizer_json = rebuilt
        .tokenizer
        .to_json()
        .map_err(GgufError::from)
        .map_err(in_file)?;
    Tokenizer::from_json(path, &tokenizer_json.to_string(), rebuilt.config.to_json())
        .map_err(GgufError::from)
        .map_err(in_file)
}
