//! Tokenizers rebuilt from GGUF metadata encode llama.cpp's tokenizer test inputs into exactly
//! the ids its test suite expects.
//!
//! `model-loader/scripts/llama_vocab_tests.py` fetches the suite (vocabulary-only GGUF files
//! with `.inp`/`.out` files, vendored in the `llama-cpp-python` source package) into the target
//! directory once (needs Python 3 with pip, and PyPI once). Without Python the tests fail and
//! say so.

use aquila_model_loader::gguf::{tokenizer_from_gguf, GgufError};
use aquila_model_loader::tokenizer::TokenModel;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::python_script::run_reference_script;

/// The vocabularies checked: SentencePiece (llama-spm, phi-3) and byte-level BPE with each
/// pre-tokenizer family the suite covers.
const VOCABS: [&str; 12] = [
    "llama-spm",
    "phi-3",
    "llama-bpe",
    "qwen2",
    "qwen35",
    "gpt-2",
    "mpt",
    "starcoder",
    "refact",
    "deepseek-coder",
    "falcon",
    "command-r",
];

/// The SentencePiece vocabularies among them (byte fallback and an unknown token, so their BPE
/// runs on the `tokenizers` crate's model; the byte-level ones run packed).
const SENTENCEPIECE: [&str; 2] = ["llama-spm", "phi-3"];

/// The line after each input of a `.inp` file.
const SEPARATOR: &str = "\n__ggml_vocab_test__\n";

/// Runs the fetch script once per test process; returns the folder of the suite's files.
fn suite_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        run_reference_script(
            "llama_vocab_tests.py",
            "llama-vocab-venv",
            "llama-vocab",
            &VOCABS,
        )
    })
}

/// The suite's cases for `vocab`: each input with its expected ids.
fn cases(dir: &Path, vocab: &str) -> Vec<(String, Vec<u32>)> {
    let stem = dir.join(format!("ggml-vocab-{vocab}.gguf"));
    let inputs = std::fs::read_to_string(stem.with_extension("gguf.inp")).unwrap();
    let outputs = std::fs::read_to_string(stem.with_extension("gguf.out")).unwrap();
    // Every input, the last one included, is followed by a separator.
    let inputs = inputs.strip_suffix(SEPARATOR).unwrap_or(&inputs);
    let inputs: Vec<&str> = inputs.split(SEPARATOR).collect();
    let outputs: Vec<&str> = outputs.lines().collect();
    assert_eq!(inputs.len(), outputs.len(), "{vocab}: inputs and outputs");
    inputs
        .into_iter()
        .zip(outputs)
        .map(|(input, ids)| {
            let ids = ids
                .split_whitespace()
                .map(|id| id.parse().unwrap())
                .collect();
            (input.to_string(), ids)
        })
        .collect()
}

/// Encodes every case of `vocab` without special tokens (as llama.cpp's test does) and
/// compares the ids; returns the number of cases.
fn check_vocab(vocab: &str) -> usize {
    let dir = suite_dir();
    let path = dir.join(format!("ggml-vocab-{vocab}.gguf"));
    let tokenizer = tokenizer_from_gguf(&path).unwrap_or_else(|e| panic!("{vocab}: {e}"));
    assert_eq!(
        matches!(tokenizer.inner().get_model(), TokenModel::Packed(_)),
        !SENTENCEPIECE.contains(&vocab),
        "{vocab}: which model runs"
    );
    let cases = cases(dir, vocab);
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(input, want)| {
            let got = tokenizer.encode(input, false).unwrap();
            (got != *want).then(|| format!("{input:?}: got {got:?}, llama.cpp {want:?}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{vocab}: {} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    cases.len()
}

#[test]
fn llama_spm_matches_llama_cpp() {
    assert!(check_vocab("llama-spm") > 30);
}

#[test]
fn phi_3_matches_llama_cpp() {
    assert!(check_vocab("phi-3") > 30);
}

#[test]
fn llama_bpe_matches_llama_cpp() {
    assert!(check_vocab("llama-bpe") > 30);
}

#[test]
fn qwen2_and_qwen35_match_llama_cpp() {
    assert!(check_vocab("qwen2") > 30);
    assert!(check_vocab("qwen35") > 30);
}

#[test]
fn gpt_2_and_mpt_match_llama_cpp() {
    assert!(check_vocab("gpt-2") > 30);
    assert!(check_vocab("mpt") > 30);
}

#[test]
fn digit_splitting_vocabs_match_llama_cpp() {
    assert!(check_vocab("starcoder") > 30);
    assert!(check_vocab("refact") > 30);
}

#[test]
fn deepseek_coder_matches_llama_cpp() {
    assert!(check_vocab("deepseek-coder") > 30);
}

#[test]
fn falcon_matches_llama_cpp() {
    assert!(check_vocab("falcon") > 30);
}

#[test]
fn command_r_matches_llama_cpp() {
    assert!(check_vocab("command-r") > 30);
}

#[test]
fn encoding_with_special_tokens_adds_bos_where_llama_cpp_does() {
    let dir = suite_dir();
    let encode = |vocab: &str| {
        tokenizer_from_gguf(&dir.join(format!("ggml-vocab-{vocab}.gguf")))
            .unwrap()
            .encode("Hello", true)
            .unwrap()
    };
    // SentencePiece and Llama 3 add a BOS by default; Qwen2 and GPT-2 do not.
    assert_eq!(encode("llama-spm"), [1, 15043]);
    assert_eq!(encode("llama-bpe"), [128000, 9906]);
    assert_eq!(encode("qwen2"), [9707]);
    assert_eq!(encode("gpt-2"), [15496]);
}

#[test]
fn missing_vocabulary_file_is_a_clear_error() {
    let missing = suite_dir().join("ggml-vocab-absent.gguf");
    let err = tokenizer_from_gguf(&missing).unwrap_err();
    assert!(matches!(err, GgufError::Io { .. }), "{err}");
}
