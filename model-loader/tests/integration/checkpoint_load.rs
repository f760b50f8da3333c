//! Opening safetensors checkpoints (single file, directory, sharded index), dtype conversion and
//! the strict name/shape reader.

use aquila_model_loader::checkpoint::{Checkpoint, CheckpointError, Dtype, ShapeMismatch};
use aquila_model_loader::fixtures::tensors::{
    write_safetensors, write_sharded, FloatType, NamedTensor,
};
use std::path::Path;

fn matrix() -> Vec<f32> {
    (0..6).map(|i| i as f32 * 0.5 - 1.0).collect()
}

fn write_file(path: &Path, dtype: FloatType) {
    let tensors = vec![
        NamedTensor::float("a.weight", &[2, 3], &matrix(), dtype),
        NamedTensor::float("b", &[4], &[1.0, 2.0, 3.0, 4.0], dtype),
        NamedTensor::i64("ids", &[3], &[5, -1, 7]),
        NamedTensor::bool("flags", &[2], &[true, false]),
    ];
    write_safetensors(path, &tensors).unwrap();
}

#[test]
fn reads_every_float_dtype_as_f32() {
    let dir = tempfile::tempdir().unwrap();
    for dtype in [FloatType::F32, FloatType::F16, FloatType::BF16] {
        let path = dir.path().join(format!("{dtype:?}.safetensors"));
        write_file(&path, dtype);
        let ckpt = Checkpoint::open(&path).unwrap();
        assert_eq!(ckpt.len(), 4);
        assert_eq!(
            ckpt.names().collect::<Vec<_>>(),
            ["a.weight", "b", "flags", "ids"]
        );
        // Every value is exactly representable in f16 and bf16.
        assert_eq!(ckpt.read_f32("a.weight").unwrap(), matrix());
        assert_eq!(
            ckpt.read_f32_transposed("a.weight").unwrap(),
            [-1.0, 0.5, -0.5, 1.0, 0.0, 1.5]
        );
        assert_eq!(ckpt.info("a.weight").unwrap().shape, vec![2, 3]);
    }
}

#[test]
fn reads_integer_and_boolean_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    write_file(&path, FloatType::F32);
    let ckpt = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(ckpt.origin(), path);
    assert_eq!(ckpt.read_i64("ids").unwrap(), vec![5, -1, 7]);
    assert_eq!(ckpt.read_bool("flags").unwrap(), vec![true, false]);
    assert_eq!(ckpt.info("ids").unwrap().dtype, Dtype::I64);
    assert!(!ckpt.contains("c"));
    assert!(matches!(
        ckpt.read_f32("c"),
        Err(CheckpointError::TensorNotFound { .. })
    ));
}

#[test]
fn opens_sharded_checkpoints_from_the_directory_or_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let tensors: Vec<NamedTensor> = (0..5)
        .map(|i| NamedTensor::f32(&format!("t{i}"), &[2], &[i as f32, -(i as f32)]))
        .collect();
    write_sharded(dir.path(), &tensors, 2).unwrap();
    assert!(dir
        .path()
        .join("model-00001-of-00002.safetensors")
        .is_file());
    for ckpt in [
        Checkpoint::open(dir.path()).unwrap(),
        Checkpoint::open(&dir.path().join("model.safetensors.index.json")).unwrap(),
    ] {
        assert_eq!(ckpt.len(), 5);
        for i in 0..5 {
            assert_eq!(
                ckpt.read_f32(&format!("t{i}")).unwrap(),
                vec![i as f32, -(i as f32)]
            );
        }
    }
}

#[test]
fn strict_reader_reports_every_difference_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    write_file(&path, FloatType::F32);
    let ckpt = Checkpoint::open(&path).unwrap();
    let mut reader = ckpt.strict();
    assert_eq!(reader.f32("b", &[4]).unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    assert!(reader.f32("a.weight", &[3, 2]).is_none());
    assert!(reader.f32("missing.one", &[1]).is_none());
    assert!(reader.f32("missing.two", &[1]).is_none());
    assert!(reader.optional_f32("absent", &[1]).is_none());
    assert!(reader.f32("ids", &[3]).is_none());
    let err = reader.finish().unwrap_err();
    let CheckpointError::Mismatch {
        path: origin,
        report,
    } = &err
    else {
        panic!("expected a mismatch, got {err:?}");
    };
    assert_eq!(origin, &path);
    assert_eq!(report.missing, vec!["missing.one", "missing.two"]);
    assert_eq!(
        report.wrong_shapes,
        vec![ShapeMismatch {
            name: "a.weight".into(),
            expected: vec![3, 2],
            found: vec![2, 3],
        }]
    );
    assert_eq!(report.unreadable.len(), 1);
    assert!(report.unreadable[0].contains("ids") && report.unreadable[0].contains("I64"));
    assert_eq!(report.unexpected, vec!["flags"]);
    let text = err.to_string();
    for needle in [
        "missing.one",
        "a.weight (expected [3, 2], found [2, 3])",
        "1 unexpected tensor: flags",
        "model.safetensors",
    ] {
        assert!(text.contains(needle), "{needle} not in {text}");
    }
}

#[test]
fn strict_reader_accepts_an_exact_match() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    write_file(&path, FloatType::BF16);
    let ckpt = Checkpoint::open(&path).unwrap();
    let mut reader = ckpt.strict();
    assert_eq!(reader.f32_transposed("a.weight", [2, 3]).unwrap().len(), 6);
    assert!(reader.optional_f32("b", &[4]).is_some());
    assert_eq!(reader.i64("ids", &[3]).unwrap(), vec![5, -1, 7]);
    assert_eq!(reader.bool("flags", &[2]).unwrap(), vec![true, false]);
    assert!(reader.report().is_empty());
    reader.finish().unwrap();

    let mut skipping = ckpt.strict();
    skipping.skip_where(|name| name != "b");
    assert!(skipping.f32("b", &[4]).is_some());
    skipping.finish().unwrap();
}

#[test]
fn a_tensor_larger_than_one_conversion_piece_reads_whole_and_again() {
    // 2.5 M f32 values (10 MB) and 5 M bf16 ones (also 10 MB): read in several pieces, each
    // piece's file pages released after conversion; a second read sees the same values.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("large.safetensors");
    let wide: Vec<f32> = (0..2_500_000).map(|i| (i % 1000) as f32 - 500.0).collect();
    let long: Vec<f32> = (0..5_000_000).map(|i| (i % 256) as f32).collect();
    let tensors = vec![
        NamedTensor::float("small", &[3], &[1.0, 2.0, 3.0], FloatType::F32),
        NamedTensor::float("wide", &[2_500_000], &wide, FloatType::F32),
        NamedTensor::float("long", &[5_000_000], &long, FloatType::BF16),
    ];
    write_safetensors(&path, &tensors).unwrap();
    let ckpt = Checkpoint::open(&path).unwrap();
    for _ in 0..2 {
        assert_eq!(ckpt.read_f32("wide").unwrap(), wide);
        assert_eq!(ckpt.read_f32("long").unwrap(), long);
        assert_eq!(ckpt.read_f32("small").unwrap(), vec![1.0, 2.0, 3.0]);
    }
}
