//! Acceptance: the imported SmolLM2-135M-Instruct directory reproduces the oracle's tensor
//! hashes and prompt token ids.
//!
//! Needs `models/smollm2-135m-instruct` (made by
//! `cargo xtask import-model`) and the oracle files in `testdata/oracle`. Without the model the
//! tests fail, unless `AQUILA_SKIP_REAL_MODEL=1`.

use aquila_model_loader::gguf::{ImportMarker, IMPORTER_VERSION};
use aquila_model_loader::tokenizer::{ChatMessage, Tokenizer};
use aquila_testdata::{GreedyOracle, OraclePromptKind};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

const IMPORT_HINT: &str = "re-import it with `cargo xtask import-model` \
     (or set AQUILA_SKIP_REAL_MODEL=1 to skip tests on the real model)";

/// The imported model directory, or `None` when the real model is skipped.
fn model_dir() -> Option<PathBuf> {
    let model = aquila_testdata::real_model_dir()?;
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
    Some(model)
}

#[test]
fn every_tensor_matches_the_oracle_hash() {
    let Some(model) = model_dir() else {
        return;
    };
    let expected = aquila_testdata::tensor_hashes();
    assert_eq!(expected.len(), 272);
    let path = model.join("model.safetensors");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // SAFETY: read-only map of a file nothing else writes during the test.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let st = safetensors::SafeTensors::deserialize(&map).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
    names.sort();
    let want: Vec<&String> = expected.keys().collect();
    assert_eq!(
        names.iter().collect::<Vec<_>>(),
        want,
        "tensor names differ from the oracle"
    );

    let entries: Vec<_> = expected.iter().collect();
    let mismatches: Vec<String> = entries
        .into_par_iter()
        .filter_map(|(name, entry)| {
            let view = st.tensor(name).unwrap();
            let digest: String = Sha256::digest(view.data())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let ok = view.dtype() == safetensors::Dtype::F32
                && view.shape() == entry.shape.as_slice()
                && digest == entry.sha256_le_f32;
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
    let Some(model) = model_dir() else {
        return;
    };
    let tokenizer = Tokenizer::from_dir(&model).unwrap();
    assert_eq!(tokenizer.vocab_size(), 49152);
    assert_eq!(tokenizer.special_tokens().bos, Some(1));
    assert_eq!(tokenizer.special_tokens().eos_id(), Some(2));
    let oracle = GreedyOracle::load();
    assert_eq!(oracle.prompts.len(), 6);
    for prompt in &oracle.prompts {
        let text = prompt.prompt_text.as_str();
        let want = &prompt.prompt_ids;
        let got = match prompt.kind {
            OraclePromptKind::Raw => tokenizer.encode(text, false).unwrap(),
            OraclePromptKind::Chat => {
                let user = chat_user_message(text);
                let rendered = tokenizer
                    .apply_chat_template(&[ChatMessage::user(user)], true)
                    .unwrap();
                assert_eq!(rendered, text, "chat template rendering");
                tokenizer
                    .encode_chat(&[ChatMessage::user(user)], true)
                    .unwrap()
            }
        };
        assert_eq!(&got, want, "prompt {text:?}");
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
