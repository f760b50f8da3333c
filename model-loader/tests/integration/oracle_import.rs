//! Acceptance: the imported SmolLM2-135M-Instruct directory reproduces the oracle's tensor
//! hashes and prompt token ids.
//!
//! Needs `models/smollm2-135m-instruct` (made by
//! `cargo run -p aquila-examples --bin import-model`) and the oracle files in
//! `<workspace>/../shared/oracle` (or `AQUILA_ORACLE_DIR`). Without the model the tests fail,
//! unless `AQUILA_SKIP_REAL_MODEL=1`.

use aquila_model_loader::gguf::{smollm2, ImportMarker, IMPORTER_VERSION};
use aquila_model_loader::tokenizer::{ChatMessage, Tokenizer};
use rayon::prelude::*;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

const IMPORT_HINT: &str = "import it with `cargo run -p aquila-examples --bin import-model` \
     (or set AQUILA_SKIP_REAL_MODEL=1 to skip tests on the real model)";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The imported model and oracle directories, or `None` when the real model is skipped.
fn dirs() -> Option<(PathBuf, PathBuf)> {
    if std::env::var("AQUILA_SKIP_REAL_MODEL").as_deref() == Ok("1") {
        eprintln!("AQUILA_SKIP_REAL_MODEL=1: skipping the SmolLM2 oracle test");
        return None;
    }
    let model = workspace_root().join(smollm2::MODEL_DIR);
    let marker = ImportMarker::read(&model).unwrap_or_else(|e| panic!("{e}; {IMPORT_HINT}"));
    match marker {
        None => panic!("{} is missing or incomplete (no import marker); {IMPORT_HINT}", model.display()),
        Some(m) if m.importer_version != IMPORTER_VERSION => panic!(
            "{} was imported by importer v{}, this is v{IMPORTER_VERSION}; re-run the import: {IMPORT_HINT}",
            model.display(),
            m.importer_version
        ),
        Some(_) => {}
    }
    let oracle = std::env::var_os("AQUILA_ORACLE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("../shared/oracle"));
    assert!(
        oracle.join("smollm2-135m-instruct-tensors.json").is_file(),
        "oracle files not found in {} (set AQUILA_ORACLE_DIR)",
        oracle.display()
    );
    Some((model, oracle))
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_tensor_matches_the_oracle_hash() {
    let Some((model, oracle)) = dirs() else {
        return;
    };
    let expected = read_json(&oracle.join("smollm2-135m-instruct-tensors.json"));
    let expected = expected.as_object().expect("tensor oracle is an object");
    assert_eq!(expected.len(), 272);
    let path = model.join("model.safetensors");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // SAFETY: read-only map of a file nothing else writes during the test.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let st = safetensors::SafeTensors::deserialize(&map).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
    names.sort();
    let mut want: Vec<&String> = expected.keys().collect();
    want.sort();
    assert_eq!(
        names.iter().collect::<Vec<_>>(),
        want,
        "tensor names differ from the oracle"
    );

    let entries: Vec<(&String, &Value)> = expected.iter().collect();
    let mismatches: Vec<String> = entries
        .into_par_iter()
        .filter_map(|(name, entry)| {
            let view = st.tensor(name).unwrap();
            let shape: Vec<usize> = entry["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let digest: String = Sha256::digest(view.data())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let ok = view.dtype() == safetensors::Dtype::F32
                && view.shape() == shape.as_slice()
                && digest == entry["sha256_le_f32"].as_str().unwrap();
            (!ok).then(|| format!("{name}: {:?} {:?} {digest}", view.dtype(), view.shape()))
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} tensors differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[test]
fn rebuilt_tokenizer_reproduces_every_prompt() {
    let Some((model, oracle)) = dirs() else {
        return;
    };
    let tokenizer = Tokenizer::from_dir(&model).unwrap();
    assert_eq!(tokenizer.vocab_size(), 49152);
    assert_eq!(tokenizer.special_tokens().bos, Some(1));
    assert_eq!(tokenizer.special_tokens().eos_id(), Some(2));
    let greedy = read_json(&oracle.join("smollm2-135m-instruct-greedy.json"));
    let prompts = greedy["prompts"].as_array().expect("prompts array");
    assert_eq!(prompts.len(), 6);
    for prompt in prompts {
        let text = prompt["prompt_text"].as_str().unwrap();
        let want: Vec<u32> = prompt["prompt_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_u64().unwrap() as u32)
            .collect();
        let got = match prompt["kind"].as_str().unwrap() {
            "raw" => tokenizer.encode(text, false).unwrap(),
            "chat" => {
                let user = chat_user_message(text);
                let rendered = tokenizer
                    .apply_chat_template(&[ChatMessage::user(user)], true)
                    .unwrap();
                assert_eq!(rendered, text, "chat template rendering");
                tokenizer
                    .encode_chat(&[ChatMessage::user(user)], true)
                    .unwrap()
            }
            other => panic!("unknown prompt kind {other:?}"),
        };
        assert_eq!(got, want, "prompt {text:?}");
        assert_eq!(tokenizer.decode(&got, false).unwrap(), text);
    }
}

/// The user message of a rendered single-turn ChatML prompt.
fn chat_user_message(rendered: &str) -> &str {
    let start =
        rendered.find("<|im_start|>user\n").expect("user turn") + "<|im_start|>user\n".len();
    let len = rendered[start..]
        .find("<|im_end|>")
        .expect("end of user turn");
    &rendered[start..start + len]
}
