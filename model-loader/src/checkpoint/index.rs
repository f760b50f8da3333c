//! The index of a sharded checkpoint (`model.safetensors.index.json`): which shard file holds
//! each tensor.

use super::CheckpointError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A parsed shard index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardIndex {
    /// Tensor name -> shard file name (relative to the index's directory).
    pub weight_map: BTreeMap<String, String>,
}

impl ShardIndex {
    /// Reads and parses an index file.
    pub(crate) fn read(path: &Path) -> Result<Self, CheckpointError> {
        let text = std::fs::read_to_string(path).map_err(|source| CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    fn parse(text: &str, path: &Path) -> Result<Self, CheckpointError> {
        let invalid = |message: String| CheckpointError::InvalidIndex {
            path: path.to_path_buf(),
            message,
        };
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let map = value
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| invalid("no `weight_map` object".to_string()))?;
        let mut weight_map = BTreeMap::new();
        for (name, file) in map {
            let file = file
                .as_str()
                .ok_or_else(|| invalid(format!("`weight_map.{name}` is not a file name")))?;
            if file.is_empty() || Path::new(file).components().count() != 1 {
                return Err(invalid(format!(
                    "`weight_map.{name}` = {file:?} is not a plain file name"
                )));
            }
            weight_map.insert(name.clone(), file.to_string());
        }
        if weight_map.is_empty() {
            return Err(invalid("`weight_map` is empty".to_string()));
        }
        Ok(Self { weight_map })
    }

    /// The distinct shard files, in name order, as paths next to the index.
    pub(crate) fn shard_paths(&self, index_path: &Path) -> Vec<PathBuf> {
        let dir = index_path.parent().unwrap_or(Path::new("."));
        let mut files: Vec<&String> = self.weight_map.values().collect();
        files.sort();
        files.dedup();
        files.into_iter().map(|f| dir.join(f)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_weight_map_and_lists_shards_once() {
        let index = ShardIndex::parse(
            r#"{"metadata": {"total_size": 8}, "weight_map": {"a": "s2.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"}}"#,
            Path::new("/m/model.safetensors.index.json"),
        )
        .unwrap();
        assert_eq!(
            index.shard_paths(Path::new("/m/model.safetensors.index.json")),
            vec![
                PathBuf::from("/m/s1.safetensors"),
                PathBuf::from("/m/s2.safetensors")
            ]
        );
    }

    #[test]
    fn rejects_bad_indexes() {
        let path = Path::new("index.json");
        for text in [
            "not json",
            "{}",
            r#"{"weight_map": {}}"#,
            r#"{"weight_map": {"a": 3}}"#,
            r#"{"weight_map": {"a": "../escape.safetensors"}}"#,
        ] {
            let err = ShardIndex::parse(text, path).unwrap_err();
            assert!(err.to_string().contains("index.json"), "{err}");
        }
    }
}
