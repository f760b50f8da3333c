//! The text sources a fresh machine gets from the package registries: which package, its
//! licence, how it is fetched (`apt-get download`, `pip download`) and how its files become
//! [`Document`]s.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::dialog_yaml::conversations;
use super::format::{Content, Document};
use super::rst::sections;

/// How a source's package is fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Package {
    /// A Debian package (`apt-get download NAME`, unpacked with `dpkg-deb -x`).
    Debian(&'static str),
    /// A PyPI wheel (`pip download --no-deps REQUIREMENT`, unpacked with the zip reader).
    Pypi(&'static str),
}

/// How a source's files are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// reStructuredText documentation, read as titled sections.
    Rst,
    /// ChatterBot dialogue YAML, read as conversations.
    DialogYaml,
}

/// A text source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// Short name, recorded with every sample.
    pub name: &'static str,
    /// Where the text comes from.
    pub package: Package,
    /// The folder of the unpacked package holding the text files.
    pub folder: &'static str,
    /// The text files' name ending.
    pub suffix: &'static str,
    /// Files under these sub-folders are skipped.
    pub skipped: &'static [&'static str],
    /// How the files are read.
    pub format: Format,
    /// The text's licence.
    pub licence: &'static str,
    /// What it holds.
    pub description: &'static str,
}

/// The built-in sources.
pub const SOURCES: &[Source] = &[
    Source {
        name: "python-docs",
        package: Package::Debian("python3.11-doc"),
        folder: "usr/share/doc/python3.11/html/_sources",
        suffix: ".rst.txt",
        skipped: &["whatsnew/"],
        format: Format::Rst,
        licence: "PSF-2.0 (Python documentation; code examples 0BSD)",
        description: "the Python 3.11 documentation's reStructuredText sources: tutorial, \
                      library reference, HOWTOs, FAQs (the `whatsnew/` change logs skipped)",
    },
    Source {
        name: "chatterbot",
        package: Package::Pypi("chatterbot-corpus==1.3.3"),
        folder: "chatterbot_corpus/data/english",
        suffix: ".yml",
        skipped: &[],
        format: Format::DialogYaml,
        licence: "BSD-3-Clause",
        description: "the English dialogue files of the ChatterBot corpus: small talk, \
                      trivia, coding and tech-support questions with answers",
    },
];

/// The source named `name`.
pub fn source_named(name: &str) -> Result<Source> {
    SOURCES
        .iter()
        .copied()
        .find(|s| s.name == name)
        .with_context(|| {
            let names: Vec<&str> = SOURCES.iter().map(|s| s.name).collect();
            format!(
                "unknown corpus source `{name}` (known: {})",
                names.join(", ")
            )
        })
}

impl Source {
    /// Fetches (once) and unpacks the package under `download_dir`, then reads its documents
    /// in a fixed order.
    pub fn documents(&self, download_dir: &Path) -> Result<Vec<Document>> {
        let root = self.unpacked(download_dir)?;
        let base = root.join(self.folder);
        let mut files = Vec::new();
        collect_files(&base, self.suffix, &mut files)?;
        files.sort();
        let mut documents = Vec::new();
        for path in files {
            let id = path
                .strip_prefix(&base)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            if self.skipped.iter().any(|prefix| id.starts_with(prefix)) {
                continue;
            }
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let content = match self.format {
                Format::Rst => Content::Sections(sections(&text)),
                Format::DialogYaml => Content::Conversations(conversations(&text)),
            };
            documents.push(Document {
                source: self.name.to_string(),
                id,
                content,
            });
        }
        if documents.is_empty() {
            bail!("{} holds no {} file", base.display(), self.suffix);
        }
        Ok(documents)
    }

    /// The directory the package is unpacked into, fetching and unpacking it when missing.
    fn unpacked(&self, download_dir: &Path) -> Result<PathBuf> {
        let dir = download_dir.join(self.name);
        let done = dir.join(".unpacked");
        if done.exists() {
            return Ok(dir);
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        match self.package {
            Package::Debian(name) => {
                run(Command::new("apt-get")
                    .args(["download", name])
                    .current_dir(&dir))?;
                let deb = find_file(&dir, ".deb")?;
                run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&dir))?;
            }
            Package::Pypi(requirement) => {
                run(Command::new("python3")
                    .args(["-m", "pip", "download", "--no-deps", requirement, "-d"])
                    .arg(&dir))?;
                let wheel = find_file(&dir, ".whl")?;
                let file = std::fs::File::open(&wheel)?;
                zip::ZipArchive::new(file)
                    .and_then(|mut archive| archive.extract(&dir))
                    .with_context(|| format!("unpacking {}", wheel.display()))?;
            }
        }
        std::fs::write(&done, b"")?;
        Ok(dir)
    }
}

/// Runs a fetch command, failing with its command line.
fn run(command: &mut Command) -> Result<()> {
    let line = format!("{command:?}");
    let status = command
        .status()
        .with_context(|| format!("starting {line}"))?;
    if !status.success() {
        bail!("{line} failed with {status}");
    }
    Ok(())
}

/// The single file of `dir` ending with `suffix`.
fn find_file(dir: &Path, suffix: &str) -> Result<PathBuf> {
    std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(suffix))
        .with_context(|| format!("no {suffix} file in {}", dir.display()))
}

/// Every file under `dir` (recursively) ending with `suffix`.
fn collect_files(dir: &Path, suffix: &str, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(&path, suffix, out)?;
        } else if path.to_string_lossy().ends_with(suffix) {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_unpacked_sources_without_fetching() {
        let dir = tempfile::tempdir().unwrap();
        let chat = dir.path().join("chatterbot");
        let data = chat.join("chatterbot_corpus/data/english");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(chat.join(".unpacked"), b"").unwrap();
        std::fs::write(
            data.join("a.yml"),
            "conversations:\n- - Hi\n  - Hello there.\n",
        )
        .unwrap();
        let docs = source_named("chatterbot")
            .unwrap()
            .documents(dir.path())
            .unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].id, "a.yml");
        assert_eq!(
            docs[0].content,
            Content::Conversations(vec![vec!["Hi".into(), "Hello there.".into()]])
        );
        assert!(source_named("nope").is_err());
    }
}
