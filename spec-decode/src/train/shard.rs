//! [`FeatureShard`]: a block of self-distillation data (token sequences, the target's features
//! at every position and its next-token argmax) stored as one safetensors file.
//!
//! Layout of a shard file: `tokens` (`U32 [N]`, all sequences one after another), `offsets`
//! (`I64 [S + 1]`, where each sequence starts), `prompt_lens` (`I64 [S]`), `features`
//! (`F16 [N, W]`, the tapped target features of each position) and `argmax` (`U32 [N]`, the
//! target's greedy next token at each position), and optionally `top_ids` (`U32 [N, K]`) and
//! `top_probs` (`F16 [N, K]`), the target's `K` most likely next tokens and their
//! probabilities. The metadata names the format and the tap.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use half::f16;
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;

use super::TrainError;

/// Format name written to (and required in) every shard's metadata.
pub const SHARD_FORMAT: &str = "aquila-eagle-distill-v1";

/// One recorded sequence: prompt followed by the target's response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistillSequence {
    /// Prompt then response token ids.
    pub tokens: Vec<u32>,
    /// Number of prompt tokens at the start of `tokens`.
    pub prompt_len: usize,
}

/// Sequences with the target's features and greedy next tokens at every position.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureShard {
    /// Width of one feature row.
    pub feature_width: usize,
    /// Which features were tapped (`last_hidden` or `aux:2,15,27`).
    pub tap: String,
    /// All sequences' tokens, concatenated.
    pub tokens: Vec<u32>,
    /// `S + 1` offsets into `tokens`: sequence `s` is `tokens[offsets[s]..offsets[s + 1]]`.
    pub offsets: Vec<usize>,
    /// Prompt length of every sequence.
    pub prompt_lens: Vec<usize>,
    /// `[N, feature_width]` feature rows, row-major, one per token.
    pub features: Vec<f16>,
    /// The target's argmax next token after every position.
    pub argmax: Vec<u32>,
    /// How many of the target's most likely next tokens are kept per position (0: none).
    pub top_k: usize,
    /// `[N, top_k]` ids of the most likely next tokens, most likely first.
    pub top_ids: Vec<u32>,
    /// `[N, top_k]` their probabilities.
    pub top_probs: Vec<f16>,
}

impl FeatureShard {
    /// An empty shard for features `feature_width` wide from `tap`.
    pub fn new(feature_width: usize, tap: impl Into<String>) -> Self {
        Self {
            feature_width,
            tap: tap.into(),
            tokens: Vec::new(),
            offsets: vec![0],
            prompt_lens: Vec::new(),
            features: Vec::new(),
            argmax: Vec::new(),
            top_k: 0,
            top_ids: Vec::new(),
            top_probs: Vec::new(),
        }
    }

    /// An empty shard that also keeps the target's `top_k` most likely next tokens.
    pub fn with_top_k(feature_width: usize, tap: impl Into<String>, top_k: usize) -> Self {
        Self {
            top_k,
            ..Self::new(feature_width, tap)
        }
    }

    /// Number of sequences.
    pub fn num_sequences(&self) -> usize {
        self.prompt_lens.len()
    }

    /// Number of tokens of all sequences.
    pub fn num_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// The token range of sequence `index`.
    pub fn span(&self, index: usize) -> std::ops::Range<usize> {
        self.offsets[index]..self.offsets[index + 1]
    }

    /// Appends one sequence with its feature rows (`tokens.len() * feature_width` values) and
    /// argmax tokens, to a shard without top-k distributions. Fails on mismatched lengths or
    /// non-finite features (an f16 overflow).
    pub fn push(
        &mut self,
        sequence: &DistillSequence,
        features: &[f32],
        argmax: &[u32],
    ) -> Result<(), TrainError> {
        self.push_with_top(sequence, features, argmax, &[], &[])
    }

    /// [`FeatureShard::push`] with the target's `top_k` most likely next tokens and their
    /// probabilities at every position (`tokens.len() * top_k` each).
    pub fn push_with_top(
        &mut self,
        sequence: &DistillSequence,
        features: &[f32],
        argmax: &[u32],
        top_ids: &[u32],
        top_probs: &[f32],
    ) -> Result<(), TrainError> {
        let n = sequence.tokens.len();
        if top_ids.len() != n * self.top_k || top_probs.len() != n * self.top_k {
            return Err(TrainError::Data(format!(
                "{} top-k ids and {} probabilities for {n} tokens of top-k {}",
                top_ids.len(),
                top_probs.len(),
                self.top_k
            )));
        }
        if n == 0 || sequence.prompt_len == 0 || sequence.prompt_len > n {
            return Err(TrainError::Data(format!(
                "a sequence of {n} tokens with a prompt of {}",
                sequence.prompt_len
            )));
        }
        if features.len() != n * self.feature_width || argmax.len() != n {
            return Err(TrainError::Data(format!(
                "{} feature values and {} argmax tokens for {n} tokens of width {}",
                features.len(),
                argmax.len(),
                self.feature_width
            )));
        }
        let converted: Vec<f16> = features.iter().map(|&v| f16::from_f32(v)).collect();
        if converted.iter().any(|v| !v.is_finite()) {
            return Err(TrainError::Data(
                "a feature is not finite in f16 (overflow or NaN)".to_string(),
            ));
        }
        self.tokens.extend_from_slice(&sequence.tokens);
        self.offsets.push(self.tokens.len());
        self.prompt_lens.push(sequence.prompt_len);
        self.features.extend(converted);
        self.argmax.extend_from_slice(argmax);
        self.top_ids.extend_from_slice(top_ids);
        self.top_probs
            .extend(top_probs.iter().map(|&p| f16::from_f32(p)));
        Ok(())
    }

    /// Writes the shard to `path` (through a temporary file, renamed at the end, so a shard on
    /// disk is always complete).
    pub fn write(&self, path: &Path) -> Result<(), TrainError> {
        let io = |source| TrainError::Io {
            path: path.to_path_buf(),
            source,
        };
        let as_i64 = |values: &[usize]| -> Vec<u8> {
            values
                .iter()
                .flat_map(|&v| (v as i64).to_le_bytes())
                .collect()
        };
        let tokens: Vec<u8> = self.tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        let argmax: Vec<u8> = self.argmax.iter().flat_map(|t| t.to_le_bytes()).collect();
        let offsets = as_i64(&self.offsets);
        let prompt_lens = as_i64(&self.prompt_lens);
        let features: &[u8] = bytemuck::cast_slice(&self.features);
        let top_ids: Vec<u8> = self.top_ids.iter().flat_map(|t| t.to_le_bytes()).collect();
        let top_probs: &[u8] = bytemuck::cast_slice(&self.top_probs);
        let (n, s) = (self.tokens.len(), self.prompt_lens.len());
        fn view(
            dtype: Dtype,
            shape: Vec<usize>,
            data: &[u8],
        ) -> Result<TensorView<'_>, TrainError> {
            TensorView::new(dtype, shape, data).map_err(|e| TrainError::Data(e.to_string()))
        }
        let mut tensors = vec![
            ("tokens", view(Dtype::U32, vec![n], &tokens)?),
            ("offsets", view(Dtype::I64, vec![s + 1], &offsets)?),
            ("prompt_lens", view(Dtype::I64, vec![s], &prompt_lens)?),
            (
                "features",
                view(Dtype::F16, vec![n, self.feature_width], features)?,
            ),
            ("argmax", view(Dtype::U32, vec![n], &argmax)?),
        ];
        if self.top_k > 0 {
            let shape = vec![n, self.top_k];
            tensors.push(("top_ids", view(Dtype::U32, shape.clone(), &top_ids)?));
            tensors.push(("top_probs", view(Dtype::F16, shape, top_probs)?));
        }
        let metadata = HashMap::from([
            ("format".to_string(), SHARD_FORMAT.to_string()),
            ("tap".to_string(), self.tap.clone()),
        ]);
        let bytes = safetensors::serialize(tensors, Some(metadata))
            .map_err(|e| TrainError::Data(e.to_string()))?;
        let partial = path.with_extension("partial");
        std::fs::write(&partial, bytes).map_err(io)?;
        std::fs::rename(&partial, path).map_err(io)
    }

    /// Reads a shard written by [`FeatureShard::write`], checking its format and consistency.
    pub fn read(path: &Path) -> Result<Self, TrainError> {
        let bytes = std::fs::read(path).map_err(|source| TrainError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |message: String| TrainError::Shard {
            path: path.to_path_buf(),
            message,
        };
        let (_, header) =
            SafeTensors::read_metadata(&bytes).map_err(|e| bad(format!("not safetensors: {e}")))?;
        let metadata = header.metadata().clone().unwrap_or_default();
        if metadata.get("format").map(String::as_str) != Some(SHARD_FORMAT) {
            return Err(bad(format!("not an {SHARD_FORMAT} shard")));
        }
        let tap = metadata.get("tap").cloned().unwrap_or_default();
        let tensors =
            SafeTensors::deserialize(&bytes).map_err(|e| bad(format!("not safetensors: {e}")))?;
        let get = |name: &str, dtype: Dtype| {
            let view = tensors
                .tensor(name)
                .map_err(|_| bad(format!("missing tensor `{name}`")))?;
            if view.dtype() != dtype {
                return Err(bad(format!(
                    "`{name}` is {:?}, expected {dtype:?}",
                    view.dtype()
                )));
            }
            Ok((view.shape().to_vec(), view.data()))
        };
        let u32s = |data: &[u8]| -> Vec<u32> {
            data.chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect()
        };
        let usizes = |data: &[u8]| -> Result<Vec<usize>, TrainError> {
            data.chunks_exact(8)
                .map(|c| {
                    let v = i64::from_le_bytes(c.try_into().expect("8 bytes"));
                    usize::try_from(v).map_err(|_| bad(format!("negative length {v}")))
                })
                .collect()
        };
        let (_, tokens) = get("tokens", Dtype::U32)?;
        let (_, offsets) = get("offsets", Dtype::I64)?;
        let (_, prompt_lens) = get("prompt_lens", Dtype::I64)?;
        let (feature_shape, features) = get("features", Dtype::F16)?;
        let (_, argmax) = get("argmax", Dtype::U32)?;
        let (top_k, top_ids, top_probs) = if tensors.names().contains(&"top_ids") {
            let (shape, ids) = get("top_ids", Dtype::U32)?;
            let (_, probs) = get("top_probs", Dtype::F16)?;
            let probs: Vec<f16> = probs
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]))
                .collect();
            (shape.get(1).copied().unwrap_or(0), u32s(ids), probs)
        } else {
            (0, Vec::new(), Vec::new())
        };
        let shard = Self {
            feature_width: feature_shape.get(1).copied().unwrap_or(0),
            tap,
            tokens: u32s(tokens),
            offsets: usizes(offsets)?,
            prompt_lens: usizes(prompt_lens)?,
            features: features
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]))
                .collect(),
            argmax: u32s(argmax),
            top_k,
            top_ids,
            top_probs,
        };
        shard.check().map_err(bad)?;
        Ok(shard)
    }

    /// Checks that offsets, prompt lengths, features and argmax agree with the tokens.
    fn check(&self) -> Result<(), String> {
        let n = self.tokens.len();
        let s = self.prompt_lens.len();
        if self.offsets.len() != s + 1 || self.offsets.first() != Some(&0) {
            return Err(format!("{} offsets for {s} sequences", self.offsets.len()));
        }
        if self.offsets.windows(2).any(|w| w[0] >= w[1]) || self.offsets[s] != n {
            return Err("offsets are not increasing up to the token count".to_string());
        }
        if (0..s).any(|i| self.prompt_lens[i] == 0 || self.prompt_lens[i] > self.span(i).len()) {
            return Err("a prompt length is outside its sequence".to_string());
        }
        if self.features.len() != n * self.feature_width || self.argmax.len() != n {
            return Err("features or argmax do not have one row per token".to_string());
        }
        if self.top_ids.len() != n * self.top_k || self.top_probs.len() != n * self.top_k {
            return Err("the top-k distributions do not have one row per token".to_string());
        }
        Ok(())
    }
}

/// Path of shard `index` in `dir`.
pub fn shard_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("shard-{index:05}.safetensors"))
}

/// Reads every shard of `dir` (files `shard-NNNNN.safetensors`, in order). All must share one
/// tap and feature width.
pub fn read_shards(dir: &Path) -> Result<Vec<FeatureShard>, TrainError> {
    let entries = std::fs::read_dir(dir).map_err(|source| TrainError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("shard-") && n.ends_with(".safetensors"))
        })
        .collect();
    paths.sort();
    let shards = paths
        .iter()
        .map(|path| FeatureShard::read(path))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(first) = shards.first() {
        if let Some((path, other)) = paths
            .iter()
            .zip(&shards)
            .find(|(_, s)| s.tap != first.tap || s.feature_width != first.feature_width)
        {
            return Err(TrainError::Shard {
                path: path.clone(),
                message: format!(
                    "tap {} (width {}) differs from the first shard's {} (width {})",
                    other.tap, other.feature_width, first.tap, first.feature_width
                ),
            });
        }
    }
    Ok(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FeatureShard {
        let mut shard = FeatureShard::new(2, "last_hidden");
        let a = DistillSequence {
            tokens: vec![1, 2, 3],
            prompt_len: 2,
        };
        let b = DistillSequence {
            tokens: vec![4, 5],
            prompt_len: 1,
        };
        shard
            .push(&a, &[0.5, -1.0, 2.0, 0.25, 3.0, -0.125], &[2, 3, 9])
            .unwrap();
        shard.push(&b, &[1.0, 1.0, -2.0, 0.0], &[5, 7]).unwrap();
        shard
    }

    #[test]
    fn round_trips_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let shard = sample();
        shard.write(&shard_path(dir.path(), 0)).unwrap();
        let read = read_shards(dir.path()).unwrap();
        assert_eq!(read, vec![shard]);
        assert_eq!(read[0].span(1), 3..5);
        assert_eq!(read[0].features[2].to_f32(), 2.0);
    }

    #[test]
    fn rejects_bad_sequences_and_files() {
        let mut shard = FeatureShard::new(2, "last_hidden");
        let seq = DistillSequence {
            tokens: vec![1, 2],
            prompt_len: 1,
        };
        assert!(shard.push(&seq, &[0.0; 3], &[1, 2]).is_err());
        assert!(shard.push(&seq, &[1e6, 0.0, 0.0, 0.0], &[1, 2]).is_err());
        let empty_prompt = DistillSequence {
            tokens: vec![1],
            prompt_len: 0,
        };
        assert!(shard.push(&empty_prompt, &[0.0; 2], &[1]).is_err());
        assert_eq!(shard.num_sequences(), 0);

        let dir = tempfile::tempdir().unwrap();
        let path = shard_path(dir.path(), 0);
        std::fs::write(&path, b"not a shard").unwrap();
        let err = FeatureShard::read(&path).unwrap_err().to_string();
        assert!(err.contains("shard-00000"), "{err}");
    }

    #[test]
    fn keeps_top_k_distributions() {
        let mut shard = FeatureShard::with_top_k(1, "last_hidden", 2);
        let seq = DistillSequence {
            tokens: vec![1, 2],
            prompt_len: 1,
        };
        assert!(shard.push(&seq, &[0.0, 1.0], &[3, 4]).is_err());
        shard
            .push_with_top(
                &seq,
                &[0.0, 1.0],
                &[3, 4],
                &[3, 5, 4, 6],
                &[0.75, 0.25, 0.5, 0.5],
            )
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        shard.write(&shard_path(dir.path(), 0)).unwrap();
        let read = FeatureShard::read(&shard_path(dir.path(), 0)).unwrap();
        assert_eq!(read, shard);
        assert_eq!(read.top_k, 2);
        assert_eq!(read.top_probs[1].to_f32(), 0.25);
    }
}
