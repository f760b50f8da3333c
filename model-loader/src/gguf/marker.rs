//! The marker file that makes imports idempotent: it records which source file (by SHA-256)
//! and which importer version produced a model directory.

use super::GgufError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Version of the importer's output; bump it whenever the files an import writes change, so
/// existing directories are re-imported.
pub const IMPORTER_VERSION: u32 = 3;

/// Name of the marker file inside an imported directory.
pub const MARKER_FILE: &str = ".aquila-import.json";

/// What produced an imported model directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportMarker {
    /// SHA-256 (lowercase hex) of the GGUF file imported.
    pub source_sha256: String,
    /// File name of the GGUF file imported.
    pub source_name: String,
    /// [`IMPORTER_VERSION`] of the importer that wrote the directory.
    pub importer_version: u32,
}

impl ImportMarker {
    /// A marker for an import of `source_name` (digest `source_sha256`) by this importer.
    pub fn new(source_sha256: impl Into<String>, source_name: impl Into<String>) -> Self {
        Self {
            source_sha256: source_sha256.into(),
            source_name: source_name.into(),
            importer_version: IMPORTER_VERSION,
        }
    }

    /// The marker path inside `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(MARKER_FILE)
    }

    /// Reads the marker of `dir`; `None` when there is none.
    pub fn read(dir: &Path) -> Result<Option<Self>, GgufError> {
        let path = Self::path(dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(GgufError::io(path, e)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| GgufError::InvalidMarker {
                path,
                message: e.to_string(),
            })
    }

    /// Writes the marker into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), GgufError> {
        let path = Self::path(dir);
        let text = serde_json::to_string_pretty(self).map_err(|e| GgufError::InvalidMarker {
            path: path.clone(),
            message: e.to_string(),
        })?;
        std::fs::write(&path, text).map_err(|e| GgufError::io(path, e))
    }

    /// Deletes the marker of `dir`, if any (before re-importing into it).
    pub fn remove(dir: &Path) -> Result<(), GgufError> {
        let path = Self::path(dir);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(GgufError::io(path, e)),
            _ => Ok(()),
        }
    }

    /// Whether this marker says the directory was imported from `source_sha256` by this
    /// importer version.
    pub fn is_current_for(&self, source_sha256: &str) -> bool {
        self.importer_version == IMPORTER_VERSION
            && self.source_sha256.eq_ignore_ascii_case(source_sha256)
    }
}

/// SHA-256 of the file at `path`, in lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String, GgufError> {
    let mut file = std::fs::File::open(path).map_err(|e| GgufError::io(path, e))?;
    sha256_reader(&mut file).map_err(|e| GgufError::io(path, e))
}

/// SHA-256 of everything `reader` yields, in lowercase hex.
pub(crate) fn sha256_reader(reader: &mut dyn Read) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(to_hex(&hasher.finalize()))
}

/// Lowercase hex of `bytes`.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_round_trips_and_matches_only_same_source_and_version() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(ImportMarker::read(dir.path()).unwrap(), None);
        let marker = ImportMarker::new("ABCD", "m.gguf");
        marker.write(dir.path()).unwrap();
        let read = ImportMarker::read(dir.path()).unwrap().unwrap();
        assert_eq!(read, marker);
        assert!(read.is_current_for("abcd"));
        assert!(!read.is_current_for("abce"));
        let old = ImportMarker {
            importer_version: 0,
            ..marker
        };
        assert!(!old.is_current_for("abcd"));
        ImportMarker::remove(dir.path()).unwrap();
        ImportMarker::remove(dir.path()).unwrap();
        assert_eq!(ImportMarker::read(dir.path()).unwrap(), None);
    }

    #[test]
    fn corrupt_marker_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(ImportMarker::path(dir.path()), "{").unwrap();
        assert!(matches!(
            ImportMarker::read(dir.path()),
            Err(GgufError::InvalidMarker { .. })
        ));
    }

    #[test]
    fn sha256_of_known_input() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("abc");
        std::fs::write(&path, "abc").unwrap();
        assert_eq!(
            sha256_file(&path).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
