//! No safetensors file or shard index breaks the checkpoint reader: mutated files (flipped
//! bytes, truncation, huge header lengths) and edited indexes open with an error or read back
//! consistently, never panic, and never allocate more than the file holds.

use crate::prop_support::{assert_bounded_allocation, json_edit, mutation};

use aquila_model_loader::checkpoint::{
    write_safetensors, write_sharded, Checkpoint, FloatType, NamedTensor,
};
use proptest::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// A valid file with tensors of each kind the reader converts: f32, f16, bf16, i64, bool.
fn valid_file() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let values: Vec<f32> = (0..12).map(|i| i as f32 / 4.0).collect();
        let tensors = vec![
            NamedTensor::f32("a", &[3, 4], &values),
            NamedTensor::float("b", &[12], &values, FloatType::F16),
            NamedTensor::float("c", &[2, 6], &values, FloatType::BF16),
            NamedTensor::i64("d", &[3], &[1, -2, 3]),
            NamedTensor::bool("e", &[2], &[true, false]),
        ];
        write_safetensors(&path, &tensors).unwrap();
        std::fs::read(path).unwrap()
    })
}

/// Opens `path` and reads every tensor it lists in every way; errors are fine.
fn open_and_read_all(path: &Path) {
    let Ok(checkpoint) = Checkpoint::open(path) else {
        return;
    };
    let names: Vec<String> = checkpoint.names().map(str::to_string).collect();
    for name in &names {
        let _ = checkpoint.info(name);
        let _ = checkpoint.read_f32(name);
        let _ = checkpoint.read_f32_transposed(name);
        let _ = checkpoint.read_f32_rows(name, 0..1);
        let _ = checkpoint.read_i64(name);
        let _ = checkpoint.read_bool(name);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn mutated_safetensors_files_open_or_fail(edits in mutation::mutations()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let bytes = mutation::apply(valid_file(), &edits);
        std::fs::write(&path, &bytes).unwrap();
        // f16/bf16 widen to f32 and bools to bytes: at most 2 output bytes per input byte,
        // plus the header's parsed form.
        assert_bounded_allocation("safetensors", bytes.len(), 16, || open_and_read_all(&path));
    }

    #[test]
    fn edited_shard_indexes_open_or_fail(edits in json_edit::json_edits()) {
        let dir = tempfile::tempdir().unwrap();
        let values: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let tensors = vec![
            NamedTensor::f32("x", &[8], &values),
            NamedTensor::f32("y", &[2, 4], &values),
        ];
        write_sharded(dir.path(), &tensors, 2).unwrap();
        let index_path = dir.path().join("model.safetensors.index.json");
        let index: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
        let edited = json_edit::apply_json(&index, &edits).to_string();
        std::fs::write(&index_path, &edited).unwrap();
        assert_bounded_allocation("index", edited.len(), 64, || open_and_read_all(&index_path));
    }
}

#[test]
fn row_ranges_read_as_the_whole_tensor_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    std::fs::write(&path, valid_file()).unwrap();
    let checkpoint = Checkpoint::open(&path).unwrap();
    for (name, rows, width) in [("a", 3, 4), ("b", 12, 1), ("c", 2, 6)] {
        let whole = checkpoint.read_f32(name).unwrap();
        for start in 0..=rows {
            for end in start..=rows {
                let part = checkpoint.read_f32_rows(name, start..end).unwrap();
                assert_eq!(
                    part,
                    whole[start * width..end * width],
                    "{name} {start}..{end}"
                );
            }
        }
        let err = checkpoint.read_f32_rows(name, 0..rows + 1).unwrap_err();
        assert!(err.to_string().contains("outside"), "{err}");
    }
    assert!(checkpoint.read_f32_rows("d", 0..1).is_err());
}

#[test]
fn the_unmutated_file_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    std::fs::write(&path, valid_file()).unwrap();
    let checkpoint = Checkpoint::open(&path).unwrap();
    assert_eq!(checkpoint.len(), 5);
    assert_eq!(checkpoint.read_f32("b").unwrap()[4], 1.0);
}
