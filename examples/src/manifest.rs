//! The settings a resumable data directory was made with, stored beside its files, so that a
//! resumed run cannot mix data made with other settings.

use std::fmt::Debug;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Creates `data_dir` and writes `settings` to its manifest `file_name` when there is none;
/// otherwise checks that the stored settings equal `settings`, naming both when they differ.
pub fn check_or_write<T>(data_dir: &Path, file_name: &str, settings: &T) -> Result<()>
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let path = data_dir.join(file_name);
    if path.exists() {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let existing: T =
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        if &existing != settings {
            bail!(
                "{} was made with other settings ({existing:?}); use another --work-dir or \
                 remove it",
                data_dir.display()
            );
        }
        return Ok(());
    }
    std::fs::write(&path, serde_json::to_string_pretty(settings)?)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Settings {
        size: usize,
    }

    #[test]
    fn a_directory_keeps_the_settings_it_was_made_with() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        check_or_write(&data, "made.json", &Settings { size: 1 }).unwrap();
        check_or_write(&data, "made.json", &Settings { size: 1 }).unwrap();
        let error = check_or_write(&data, "made.json", &Settings { size: 2 })
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("other settings") && error.contains("size: 1"),
            "{error}"
        );
    }
}
