//! Corrupt, truncated and inconsistent checkpoints: every error names the file and, where one
//! is involved, the tensor.

use aquila_model_loader::checkpoint::{Checkpoint, CheckpointError, Dtype};
use aquila_model_loader::fixtures::tensors::{
    write_json, write_safetensors, write_sharded, NamedTensor,
};
use std::path::Path;

/// A valid two-tensor file's bytes.
fn valid_bytes(dir: &Path) -> Vec<u8> {
    let path = dir.join("valid.safetensors");
    let tensors = vec![
        NamedTensor::f32("x", &[2, 2], &[1.0, 2.0, 3.0, 4.0]),
        NamedTensor::f32("y", &[3], &[5.0, 6.0, 7.0]),
    ];
    write_safetensors(&path, &tensors).unwrap();
    std::fs::read(path).unwrap()
}

/// Writes `bytes` as `name` and expects `Checkpoint::open` to fail naming that file.
fn expect_invalid(dir: &Path, name: &str, bytes: &[u8]) -> CheckpointError {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let err = Checkpoint::open(&path).expect_err(name);
    assert!(err.to_string().contains(name), "{err}");
    err
}

/// A file with the given header JSON and data bytes.
fn with_header(header: &str, data: &[u8]) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    bytes
}

#[test]
fn corrupt_headers() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty.safetensors", vec![]),
        ("short.safetensors", vec![1, 0, 0]),
        ("huge_len.safetensors", u64::MAX.to_le_bytes().to_vec()),
        (
            "len_past_end.safetensors",
            [200u64.to_le_bytes().as_slice(), b"{}"].concat(),
        ),
        ("not_json.safetensors", with_header("{not json", b"")),
        (
            "not_utf8.safetensors",
            [1u64.to_le_bytes().as_slice(), &[0xff]].concat(),
        ),
        (
            "bad_dtype.safetensors",
            with_header(
                r#"{"x":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}}"#,
                &[0; 4],
            ),
        ),
        (
            "overlap.safetensors",
            with_header(
                r#"{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}"#,
                &[0; 6],
            ),
        ),
        (
            "size_mismatch.safetensors",
            with_header(
                r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
                &[0; 4],
            ),
        ),
    ];
    for (name, bytes) in cases {
        let err = expect_invalid(dir.path(), name, &bytes);
        assert!(
            matches!(err, CheckpointError::InvalidFile { .. }),
            "{name}: {err:?}"
        );
    }
}

#[test]
fn truncated_and_padded_files() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = valid_bytes(dir.path());
    let err = expect_invalid(
        dir.path(),
        "truncated.safetensors",
        &bytes[..bytes.len() - 3],
    );
    assert!(
        matches!(err, CheckpointError::InvalidFile { .. }),
        "{err:?}"
    );
    let mut padded = bytes.clone();
    padded.extend([0u8; 8]);
    let err = expect_invalid(dir.path(), "padded.safetensors", &padded);
    assert!(
        matches!(err, CheckpointError::InvalidFile { .. }),
        "{err:?}"
    );
    // The untouched file opens.
    std::fs::write(dir.path().join("ok.safetensors"), &bytes).unwrap();
    assert_eq!(
        Checkpoint::open(&dir.path().join("ok.safetensors"))
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn missing_files_and_directories() {
    let dir = tempfile::tempdir().unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(err, CheckpointError::NotFound { .. }), "{err:?}");
    let err = Checkpoint::open(&dir.path().join("nope.safetensors")).unwrap_err();
    assert!(
        matches!(err, CheckpointError::Io { .. }) && err.to_string().contains("nope.safetensors"),
        "{err}"
    );
}

#[test]
fn unsupported_dtypes_and_bad_booleans() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    write_safetensors(
        &path,
        &[
            NamedTensor::raw("ints", Dtype::I32, &[2], vec![1, 0, 0, 0, 2, 0, 0, 0]),
            NamedTensor::raw("mask", Dtype::BOOL, &[2], vec![1, 2]),
            NamedTensor::f32("floats", &[1], &[1.0]),
        ],
    )
    .unwrap();
    let ckpt = Checkpoint::open(&path).unwrap();
    let err = ckpt.read_f32("ints").unwrap_err();
    assert!(
        matches!(err, CheckpointError::UnsupportedDtype { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("`ints`") && err.to_string().contains("I32"),
        "{err}"
    );
    assert_eq!(ckpt.read_i64("ints").unwrap(), vec![1, 2]);
    let err = ckpt.read_bool("mask").unwrap_err();
    assert!(
        matches!(err, CheckpointError::InvalidTensor { .. }) && err.to_string().contains("`mask`"),
        "{err}"
    );
    assert!(matches!(
        ckpt.read_i64("floats"),
        Err(CheckpointError::UnsupportedDtype { .. })
    ));
    assert!(matches!(
        ckpt.read_bool("floats"),
        Err(CheckpointError::UnsupportedDtype { .. })
    ));
    let err = ckpt.read_f32_transposed("floats").unwrap_err();
    assert!(
        matches!(err, CheckpointError::InvalidTensor { .. }),
        "{err:?}"
    );
}

#[test]
fn inconsistent_shard_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let tensors: Vec<NamedTensor> = (0..4)
        .map(|i| NamedTensor::f32(&format!("t{i}"), &[1], &[i as f32]))
        .collect();
    write_sharded(dir.path(), &tensors, 2).unwrap();
    let index_path = dir.path().join("model.safetensors.index.json");
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();

    // A shard named by the index is missing.
    let mut missing_shard = index.clone();
    missing_shard["weight_map"]["t0"] = "model-00009-of-00009.safetensors".into();
    write_json(&index_path, &missing_shard).unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(
        matches!(err, CheckpointError::Io { .. })
            && err.to_string().contains("model-00009-of-00009"),
        "{err}"
    );

    // The index puts a tensor in the wrong shard.
    let mut wrong_shard = index.clone();
    wrong_shard["weight_map"]["t0"] = "model-00002-of-00002.safetensors".into();
    write_json(&index_path, &wrong_shard).unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(
        matches!(err, CheckpointError::InvalidIndex { .. }) && err.to_string().contains("`t0`"),
        "{err}"
    );

    // The index names a tensor no shard has.
    let mut phantom = index.clone();
    phantom["weight_map"]["ghost"] = "model-00001-of-00002.safetensors".into();
    write_json(&index_path, &phantom).unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("`ghost`"), "{err}");

    // The index is not JSON.
    std::fs::write(&index_path, "{").unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(
        matches!(err, CheckpointError::InvalidIndex { .. })
            && err.to_string().contains("index.json"),
        "{err}"
    );

    // Two shards hold the same tensor.
    write_json(&index_path, &index).unwrap();
    write_safetensors(
        &dir.path().join("model-00002-of-00002.safetensors"),
        &[NamedTensor::f32("t0", &[1], &[9.0])],
    )
    .unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(
        matches!(err, CheckpointError::DuplicateTensor { .. }) && err.to_string().contains("`t0`"),
        "{err}"
    );
}
