//! Dequantization matches gguf-py (llama.cpp's own Python package) bit for bit, on random
//! blocks of every type it can dequantize.
//!
//! `model-loader/scripts/gguf_dequant_reference.py` writes the blocks and gguf-py's values
//! (in a virtual environment under the target directory that it creates on first use: needs
//! Python 3 with pip, and PyPI once). Without Python the test fails and says so.

use aquila_model_loader::gguf::{dequant::dequantize, GgmlType, GgufError};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::python_script::run_reference_script;

/// Runs the reference script into the target directory; returns its output directory.
fn reference_dir() -> PathBuf {
    run_reference_script(
        "gguf_dequant_reference.py",
        "gguf-py-venv",
        "gguf-dequant-reference",
        &[],
    )
}

/// gguf-py's lists of the types it does and does not dequantize.
fn manifest(dir: &Path) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let names = |key: &str| -> Vec<String> {
        json[key]
            .as_array()
            .unwrap_or_else(|| panic!("manifest has no {key}"))
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    (names("dequantized"), names("not_dequantized"))
}

/// Dequantizes the reference blocks of `name` and compares every value's bits.
fn check_type(dir: &Path, ggml_type: GgmlType) -> usize {
    let name = ggml_type.name();
    let blocks = std::fs::read(dir.join(format!("{name}.blocks"))).unwrap();
    let want: Vec<f32> = std::fs::read(dir.join(format!("{name}.f32")))
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let mut got = vec![f32::NAN; want.len()];
    dequantize(name, ggml_type, &blocks, &mut got).unwrap_or_else(|e| panic!("{name}: {e}"));
    let block_len = ggml_type.block_len() as usize;
    if let Some(i) = (0..want.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!(
            "{name}: block {}, value {}: got {} ({:#010x}), gguf-py {} ({:#010x})",
            i / block_len,
            i % block_len,
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
    want.len() / block_len
}

#[test]
fn every_type_gguf_py_dequantizes_matches_it_bit_for_bit() {
    let dir = reference_dir();
    let (dequantized, not_dequantized) = manifest(&dir);
    let mut checked = BTreeSet::new();
    for name in &dequantized {
        let ggml_type = GgmlType::from_name(name)
            .unwrap_or_else(|| panic!("gguf-py dequantizes {name}, a type Aquila does not know"));
        assert!(check_type(&dir, ggml_type) > 0, "{name}: no blocks");
        checked.insert(ggml_type.name());
    }
    let ours: BTreeSet<&str> = GgmlType::ALL
        .into_iter()
        .filter(|t| t.is_dequantizable())
        .map(GgmlType::name)
        .collect();
    assert_eq!(
        ours, checked,
        "Aquila's dequantizable types against gguf-py's"
    );
    for name in &not_dequantized {
        let Some(ggml_type) = GgmlType::from_name(name) else {
            continue;
        };
        let bytes = vec![0u8; ggml_type.block_bytes() as usize];
        let mut out = vec![0.0; ggml_type.block_len() as usize];
        let err = dequantize("t", ggml_type, &bytes, &mut out).unwrap_err();
        assert!(
            matches!(err, GgufError::UnsupportedTensorType { type_name, .. } if type_name == *name),
            "{name}: {err}"
        );
    }
}
