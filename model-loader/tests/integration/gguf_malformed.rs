//! Corrupt or unsupported GGUF files are rejected with errors that name the problem.

use crate::common;

use aquila_model_loader::gguf::{self, GgufError, GgufFile, GgufHeader};
use common::*;

/// A small valid file: two metadata entries and two tensors.
fn small() -> GgufBuilder {
    let mut b = GgufBuilder::new();
    b.meta("general.architecture", Meta::Str("llama".into()))
        .meta("general.name", Meta::Str("t".into()))
        .tensor("a", &[4], F32, f32_bytes(&[1.0, 2.0, 3.0, 4.0]))
        .tensor("b", &[32, 2], Q8_0, q8_0_bytes(&[0.5; 64]));
    b
}

fn parse(bytes: &[u8]) -> Result<GgufHeader, GgufError> {
    GgufHeader::parse(bytes)
}

/// Unwraps the file-name context of errors from `GgufFile::open` / `import`.
fn inner(err: GgufError) -> GgufError {
    match err {
        GgufError::File { error, .. } => inner(*error),
        other => other,
    }
}

#[test]
fn valid_file_parses() {
    let header = parse(&small().build()).unwrap();
    assert_eq!(header.version, 3);
    assert_eq!(header.tensors().len(), 2);
    assert_eq!(header.tensor("b").unwrap().byte_len, 2 * 34);
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let bytes = small().build();
    for len in 0..bytes.len() {
        assert!(
            parse(&bytes[..len]).is_err(),
            "prefix of {len} bytes parsed"
        );
    }
}

#[test]
fn bad_magic_and_versions() {
    let mut bytes = small().build();
    bytes[..4].copy_from_slice(b"GGML");
    assert!(matches!(parse(&bytes), Err(GgufError::BadMagic { found }) if &found == b"GGML"));
    for version in [1, 4, 0xFFFF] {
        let mut b = small();
        b.version = version;
        assert!(matches!(parse(&b.build()), Err(GgufError::UnsupportedVersion(v)) if v == version));
    }
}

#[test]
fn absurd_counts_and_lengths_are_capped() {
    let mut bytes = small().build();
    bytes[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes()); // tensor count
    assert!(
        matches!(parse(&bytes), Err(GgufError::LimitExceeded { .. })),
        "tensor count"
    );

    let mut bytes = small().build();
    bytes[16..24].copy_from_slice(&u64::MAX.to_le_bytes()); // metadata count
    assert!(
        matches!(parse(&bytes), Err(GgufError::LimitExceeded { .. })),
        "metadata count"
    );

    let mut bytes = small().build();
    bytes[24..32].copy_from_slice(&(1u64 << 62).to_le_bytes()); // first key's length
    assert!(
        matches!(parse(&bytes), Err(GgufError::LimitExceeded { .. })),
        "string length"
    );

    // An array claiming 2^24 strings in a file of a few hundred bytes.
    let mut b = small();
    let mut payload = 8u32.to_le_bytes().to_vec();
    payload.extend((1u64 << 24).to_le_bytes());
    b.meta("x", Meta::Raw(9, payload));
    assert!(
        matches!(parse(&b.build()), Err(GgufError::Truncated { .. })),
        "array length"
    );

    let mut b = small();
    let mut payload = 8u32.to_le_bytes().to_vec();
    payload.extend(u64::MAX.to_le_bytes());
    b.meta("x", Meta::Raw(9, payload));
    assert!(
        matches!(parse(&b.build()), Err(GgufError::LimitExceeded { .. })),
        "array cap"
    );
}

#[test]
fn nested_arrays_are_limited() {
    let mut payload = Vec::new();
    for _ in 0..10 {
        payload.extend(9u32.to_le_bytes());
        payload.extend(1u64.to_le_bytes());
    }
    payload.extend(4u32.to_le_bytes());
    payload.extend(0u64.to_le_bytes());
    let mut b = small();
    b.meta("deep", Meta::Raw(9, payload));
    let err = parse(&b.build()).unwrap_err();
    assert!(matches!(err, GgufError::LimitExceeded { .. }), "{err}");
}

#[test]
fn unknown_value_and_tensor_types() {
    let mut b = small();
    b.meta("weird", Meta::Raw(13, vec![0; 8]));
    let err = parse(&b.build()).unwrap_err();
    assert!(
        matches!(&err, GgufError::UnknownValueType { key, type_id: 13 } if key == "weird"),
        "{err}"
    );

    let mut b = small();
    b.tensor("c", &[4], 4, vec![0; 16]); // type 4 (old Q4_2) no longer exists
    let err = parse(&b.build()).unwrap_err();
    assert!(
        matches!(&err, GgufError::UnknownTensorType { tensor, type_id: 4 } if tensor == "c"),
        "{err}"
    );

    let mut b = small();
    b.meta("flag", Meta::Raw(7, vec![2]));
    assert!(matches!(
        parse(&b.build()),
        Err(GgufError::InvalidBool { byte: 2, .. })
    ));
}

#[test]
fn tensor_declarations_are_checked() {
    let mut b = small();
    b.tensor("c", &[33], Q8_0, vec![0; 34]);
    let err = parse(&b.build()).unwrap_err();
    assert!(
        err.to_string()
            .contains("not a multiple of the Q8_0 block length"),
        "{err}"
    );

    let mut b = small();
    b.tensor("c", &[1, 1, 1, 1, 1], F32, vec![0; 4]);
    assert!(matches!(
        parse(&b.build()),
        Err(GgufError::InvalidTensor { .. })
    ));

    let mut b = small();
    b.tensor("c", &[4, 0], F32, vec![]);
    assert!(matches!(
        parse(&b.build()),
        Err(GgufError::InvalidTensor { .. })
    ));

    let mut b = small();
    b.tensor("c", &[u64::MAX, 4], F32, vec![]);
    assert!(matches!(
        parse(&b.build()),
        Err(GgufError::InvalidTensor { .. })
    ));

    let mut b = small();
    b.meta("general.alignment", Meta::U32(24));
    assert!(matches!(
        parse(&b.build()),
        Err(GgufError::InvalidMetadata { .. })
    ));
}

#[test]
fn duplicates_are_rejected() {
    let mut b = small();
    b.metadata
        .push(("general.name".into(), Meta::Str("again".into())));
    assert!(matches!(parse(&b.build()), Err(GgufError::DuplicateKey(k)) if k == "general.name"));
    let mut b = small();
    let first = b.tensors[0].clone();
    b.tensors.push(first);
    assert!(matches!(parse(&b.build()), Err(GgufError::DuplicateTensor(n)) if n == "a"));
}

#[test]
fn tensor_data_past_the_end_is_out_of_bounds() {
    let mut bytes = small().build();
    bytes.truncate(bytes.len() - 1);
    let err = parse(&bytes).unwrap_err();
    assert!(
        matches!(&err, GgufError::TensorOutOfBounds { tensor, .. } if tensor == "b"),
        "{err}"
    );
}

#[test]
fn open_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.gguf");
    std::fs::write(&path, b"GGUF\x03\x00\x00\x00").unwrap();
    let err = GgufFile::open(&path).unwrap_err();
    assert!(err.to_string().contains("broken.gguf"), "{err}");
    // The cause is in the message, and not repeated as a source by error-chain printers.
    assert!(std::error::Error::source(&err).is_none());
    assert!(matches!(inner(err), GgufError::Truncated { .. }));
    let missing = GgufFile::open(&dir.path().join("missing.gguf")).unwrap_err();
    assert!(matches!(missing, GgufError::Io { .. }));
}

/// Imports `builder` and returns the error (with file context removed).
fn import_error(builder: &GgufBuilder) -> GgufError {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    builder.write(&path);
    let out = dir.path().join("out");
    let err = gguf::import(&path, &out, &()).expect_err("import should fail");
    assert!(
        !out.join("model.safetensors").exists(),
        "nothing is written on error"
    );
    inner(err)
}

#[test]
fn import_rejects_inconsistent_models() {
    let scratch = tempfile::tempdir().unwrap();
    let base = tiny_llama_gguf(scratch.path(), true);

    let mut b = base.clone();
    b.tensor(
        "blk.1.ffn_up.weight",
        &[HIDDEN as u64, FFN as u64 + 32],
        F32,
        vec![0; HIDDEN * (FFN + 32) * 4],
    );
    let err = import_error(&b);
    assert!(
        matches!(&err, GgufError::ShapeMismatch { tensor, .. } if tensor == "blk.1.ffn_up.weight"),
        "{err}"
    );

    let mut b = base.clone();
    b.tensors.retain(|t| t.name != "blk.0.attn_k.weight");
    assert!(matches!(import_error(&b), GgufError::MissingTensor(n) if n == "blk.0.attn_k.weight"));

    let mut b = base.clone();
    b.tensor("blk.0.extra.weight", &[4], F32, vec![0; 16]);
    assert!(
        matches!(import_error(&b), GgufError::UnexpectedTensor(n) if n == "blk.0.extra.weight")
    );

    let mut b = base.clone();
    b.meta("general.architecture", Meta::Str("gemma".into()));
    assert!(matches!(import_error(&b), GgufError::Unsupported(_)));

    let mut b = base.clone();
    b.meta("llama.block_count", Meta::Str("two".into()));
    let err = import_error(&b);
    assert!(
        matches!(&err, GgufError::MetadataType { key, .. } if key == "llama.block_count"),
        "{err}"
    );

    let mut b = base.clone();
    b.metadata.retain(|(k, _)| k != "llama.embedding_length");
    assert!(
        matches!(import_error(&b), GgufError::MissingMetadata(k) if k == "llama.embedding_length")
    );

    let mut b = base.clone();
    b.meta("llama.attention.head_count_kv", Meta::U32(3));
    assert!(matches!(
        import_error(&b),
        GgufError::InvalidMetadata { .. }
    ));

    let mut b = base.clone();
    b.meta("tokenizer.ggml.pre", Meta::Str("chameleon".into()));
    assert!(matches!(import_error(&b), GgufError::Unsupported(m) if m.contains("chameleon")));

    let mut b = base.clone();
    b.meta(
        "tokenizer.ggml.merges",
        Meta::Strings(vec!["nospace".into()]),
    );
    assert!(matches!(
        import_error(&b),
        GgufError::InvalidMetadata { .. }
    ));

    let mut b = base.clone();
    b.meta("tokenizer.ggml.eos_token_id", Meta::U32(100_000));
    assert!(matches!(
        import_error(&b),
        GgufError::InvalidMetadata { .. }
    ));

    // Q8_1 (type 9) has a block layout but no dequantization, in gguf-py either.
    let mut b = base;
    b.tensor(
        "blk.0.ffn_up.weight",
        &[HIDDEN as u64, FFN as u64],
        9,
        vec![0; HIDDEN * FFN / 32 * 36],
    );
    let err = import_error(&b);
    assert!(
        matches!(
            &err,
            GgufError::UnsupportedTensorType {
                type_name: "Q8_1",
                ..
            }
        ),
        "{err}"
    );
}
