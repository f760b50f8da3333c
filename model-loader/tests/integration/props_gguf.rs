//! No input breaks the GGUF reader or the importer: arbitrary bytes and mutations of a valid
//! Llama GGUF file (flipped bytes, truncation, huge lengths and counts) give an error or a
//! consistent result, never a panic, and never an allocation the file cannot justify.

use crate::common::tiny_llama_gguf;
use crate::prop_support::{assert_bounded_allocation, mutation};

use aquila_model_loader::gguf::{
    self, dequant, hparams::LlamaHyperParams, layout::plan_tensors, vocab::rebuild_tokenizer,
    GgufHeader,
};
use proptest::prelude::*;
use std::sync::OnceLock;

/// The bytes of the tiny Llama GGUF file of the import tests (untied, so `output.weight` is
/// there too).
fn tiny_gguf() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let scratch = tempfile::tempdir().unwrap();
        tiny_llama_gguf(scratch.path(), false).build()
    })
}

/// Everything the importer does with a header short of writing files: hyperparameters,
/// tensor plan, tokenizer, and the dequantization of every tensor. Returns how far it got.
fn import_in_memory(bytes: &[u8]) -> usize {
    let Ok(header) = GgufHeader::parse(bytes) else {
        return 0;
    };
    let Ok(hparams) = LlamaHyperParams::from_header(&header) else {
        return 1;
    };
    let Ok(plans) = plan_tensors(&header, &hparams) else {
        return 2;
    };
    if rebuild_tokenizer(&header, Some(hparams.max_position_embeddings as u64)).is_err() {
        return 3;
    }
    for plan in &plans {
        let info = header
            .tensor(&plan.gguf_name)
            .expect("planned tensors exist");
        let start = (header.data_offset + info.offset) as usize;
        let data = &bytes[start..start + info.byte_len as usize];
        let mut out = vec![0.0; info.element_count() as usize];
        if dequant::dequantize(&info.name, info.ggml_type, data, &mut out).is_err() {
            return 4;
        }
    }
    5
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_are_an_error_or_a_header(
        body in proptest::collection::vec(any::<u8>(), 0..512),
        version in 0u32..5,
    ) {
        // Behind a valid magic and version, so the parser reads on into the counts.
        let mut bytes = b"GGUF".to_vec();
        bytes.extend(version.to_le_bytes());
        bytes.extend(&body);
        assert_bounded_allocation("GGUF header", bytes.len(), 64, || GgufHeader::parse(&bytes))
            .ok();
    }

    #[test]
    fn mutated_llama_files_never_break_the_import(edits in mutation::mutations()) {
        let bytes = mutation::apply(tiny_gguf(), &edits);
        // Dequantized tensors are f32: at most 4 bytes per value, and the densest type packs
        // 256 values in 50 bytes (IQ1_S), so 32 bytes per input byte.
        assert_bounded_allocation("GGUF import", bytes.len(), 32, || import_in_memory(&bytes));
    }
}

proptest! {
    // Writes a model directory per case: fewer cases.
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn mutated_files_import_or_fail_with_an_error(edits in mutation::mutations()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.gguf");
        std::fs::write(&path, mutation::apply(tiny_gguf(), &edits)).unwrap();
        if let Err(err) = gguf::import(&path, &dir.path().join("hf"), &()) {
            let message = err.to_string();
            prop_assert!(message.len() < 1000, "long error: {message}");
        }
    }
}

#[test]
fn the_unmutated_file_imports_completely() {
    // The properties above are only meaningful if the file they mutate is valid.
    assert_eq!(import_in_memory(tiny_gguf()), 5);
}
