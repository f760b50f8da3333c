//! `tokenize`: prints the token ids of each line of a text file, one JSON array per line, as the
//! model's tokenizer encodes it with its special tokens (a BOS only where the model adds one),
//! for checking a tokenizer by hand against another implementation such as llama.cpp.
//!
//! The model is a Hugging Face directory (`tokenizer.json` and its config files) or a GGUF file,
//! whose tokenizer is rebuilt from its metadata as an import would write it.

use anyhow::{Context, Result};
use aquila_model_loader::gguf::tokenizer_from_gguf;
use aquila_model_loader::tokenizer::Tokenizer;
use clap::Parser;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "tokenize",
    about = "Print the token ids of each input line as a JSON array"
)]
struct Args {
    /// A GGUF file, or a Hugging Face model directory.
    #[arg(long)]
    model: PathBuf,
    /// Text file; each line (without its line break) is encoded on its own.
    #[arg(long)]
    input: PathBuf,
}

/// The tokenizer of a GGUF file or of a model directory.
fn load_tokenizer(model: &Path) -> Result<Tokenizer> {
    if model.is_dir() {
        Tokenizer::from_dir(model)
            .with_context(|| format!("loading the tokenizer of {}", model.display()))
    } else {
        tokenizer_from_gguf(model)
            .with_context(|| format!("rebuilding the tokenizer of {}", model.display()))
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let tokenizer = load_tokenizer(&args.model)?;
    let text = std::fs::read_to_string(&args.input)
        .with_context(|| format!("reading {}", args.input.display()))?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    for (number, line) in text.lines().enumerate() {
        let ids = tokenizer
            .encode(line, true)
            .with_context(|| format!("{}:{}", args.input.display(), number + 1))?;
        writeln!(out, "{}", serde_json::to_string(&ids)?)?;
    }
    out.flush()?;
    Ok(())
}
