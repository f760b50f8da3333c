//! [`DistillData`]: recorded shards as a training set: sequence references, a deterministic
//! validation split, shuffled token-budget batches, and batch gathering.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{FeatureShard, TrainError};

/// A sequence of the data set: `(shard, sequence within the shard)`.
pub type SequenceRef = (usize, usize);

/// The tensors of one batch, gathered from the shards (features widened to f32).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchData {
    /// Each sequence's tokens and prompt length.
    pub sequences: Vec<(Vec<u32>, usize)>,
    /// `[tokens, width]` features of all sequences, concatenated.
    pub features: Vec<f32>,
    /// The target's greedy next token at every position.
    pub argmax: Vec<u32>,
    /// Feature width.
    pub width: usize,
    /// Most likely next tokens kept per position (0 when the shards have none).
    pub top_k: usize,
    /// `[tokens, top_k]` the target's most likely next tokens.
    pub top_ids: Vec<u32>,
    /// `[tokens, top_k]` their probabilities.
    pub top_probs: Vec<f32>,
}

/// A named set of recorded sequences that only validates (answers to prompts a head never
/// trains on, such as an unseen chat set), scored beside the held-out split at every
/// validation.
#[derive(Debug, Clone)]
pub struct ValidationSet {
    /// The set's name in reports.
    pub name: String,
    /// Its sequences, every one validating.
    pub data: DistillData,
}

/// Recorded self-distillation data.
#[derive(Debug, Clone)]
pub struct DistillData {
    shards: Vec<FeatureShard>,
    /// Shards from this index on are training-only: [`DistillData::split`] holds out none of
    /// their sequences (their source's held-out documents were never recorded).
    training_only_from: usize,
    /// Whether the sequences of the shards before `training_only_from` that are not held out
    /// train (see [`DistillData::validating_only`]).
    split_shards_train: bool,
    /// Sets scored at every validation beside the held-out split; none of them trains.
    validation_sets: Vec<ValidationSet>,
}

impl DistillData {
    /// The data of `shards` (at least one sequence, one tap and width).
    pub fn new(shards: Vec<FeatureShard>) -> Result<Self, TrainError> {
        if shards.iter().all(|s| s.num_sequences() == 0) {
            return Err(TrainError::Data("no recorded sequence".into()));
        }
        let first = &shards[0];
        if shards
            .iter()
            .any(|s| s.tap != first.tap || s.feature_width != first.feature_width)
        {
            return Err(TrainError::Data("shards of different taps".into()));
        }
        let training_only_from = shards.len();
        Ok(Self {
            shards,
            training_only_from,
            split_shards_train: true,
            validation_sets: Vec::new(),
        })
    }

    /// The data of `shards` (split for validation as usual) followed by `training_only`
    /// shards, whose sequences all go to training.
    pub fn with_training_only(
        shards: Vec<FeatureShard>,
        training_only: Vec<FeatureShard>,
    ) -> Result<Self, TrainError> {
        let training_only_from = shards.len();
        let mut all = shards;
        all.extend(training_only);
        let mut data = Self::new(all)?;
        data.training_only_from = training_only_from;
        Ok(data)
    }

    /// The same data, whose split shards (those not training-only) give the validation
    /// sequences alone: [`DistillData::split`] leaves the rest of them out of training, so
    /// that a warm-started head trains on the training-only data, new to it, and is validated
    /// as before. Fails when no training-only shard holds a sequence.
    pub fn validating_only(self) -> Result<Self, TrainError> {
        if self.shards[self.training_only_from..]
            .iter()
            .all(|s| s.num_sequences() == 0)
        {
            return Err(TrainError::Data(
                "the split shards only validate, and no training-only sequence is left to \
                 train on"
                    .into(),
            ));
        }
        Ok(Self {
            split_shards_train: false,
            ..self
        })
    }

    /// The same data with `set` scored as `name` at every validation beside the held-out
    /// split (none of its sequences trains). Fails when its features are not this data's, or
    /// when a set of that name is already there.
    pub fn with_validation_set(
        mut self,
        name: impl Into<String>,
        set: DistillData,
    ) -> Result<Self, TrainError> {
        let name = name.into();
        if set.tap() != self.tap() || set.feature_width() != self.feature_width() {
            return Err(TrainError::Data(format!(
                "validation set {name} has {} features {} wide, the training data {} features \
                 {} wide",
                set.tap(),
                set.feature_width(),
                self.tap(),
                self.feature_width()
            )));
        }
        if self.validation_sets.iter().any(|s| s.name == name) {
            return Err(TrainError::Data(format!(
                "two validation sets are named {name}"
            )));
        }
        self.validation_sets.push(ValidationSet { name, data: set });
        Ok(self)
    }

    /// The sets scored beside the held-out split, in the order they were added.
    pub fn validation_sets(&self) -> &[ValidationSet] {
        &self.validation_sets
    }

    /// The tap the features come from (`last_hidden`, `aux:...`).
    pub fn tap(&self) -> &str {
        &self.shards[0].tap
    }

    /// Width of a feature row.
    pub fn feature_width(&self) -> usize {
        self.shards[0].feature_width
    }

    /// Every sequence, in recording order.
    pub fn sequences(&self) -> Vec<SequenceRef> {
        self.shards
            .iter()
            .enumerate()
            .flat_map(|(i, s)| (0..s.num_sequences()).map(move |j| (i, j)))
            .collect()
    }

    /// Tokens of all sequences.
    pub fn num_tokens(&self) -> usize {
        self.shards.iter().map(FeatureShard::num_tokens).sum()
    }

    /// Length of sequence `r`.
    pub fn len_of(&self, r: SequenceRef) -> usize {
        self.shards[r.0].span(r.1).len()
    }

    /// Splits the sequences into training and validation: every `val_every`-th sequence
    /// (starting with the first) of the splittable shards is held out; `val_every = 0` holds
    /// out none. The other splittable sequences train unless the data are
    /// [`DistillData::validating_only`]; training-only shards all go to training, after them.
    pub fn split(&self, val_every: usize) -> (Vec<SequenceRef>, Vec<SequenceRef>) {
        let (splittable, training_only): (Vec<_>, Vec<_>) = self
            .sequences()
            .into_iter()
            .partition(|r| r.0 < self.training_only_from);
        let (val, split_train): (Vec<_>, Vec<_>) = splittable
            .into_iter()
            .enumerate()
            .partition(|(i, _)| val_every > 0 && i % val_every == 0);
        let mut train: Vec<SequenceRef> = if self.split_shards_train {
            split_train.into_iter().map(|(_, r)| r).collect()
        } else {
            Vec::new()
        };
        train.extend(training_only);
        (train, val.into_iter().map(|(_, r)| r).collect())
    }

    /// Batches of at most `max_tokens` tokens (a longer sequence forms a batch alone), the
    /// sequences shuffled with `seed` first (`None` keeps their order).
    pub fn batches(
        &self,
        sequences: &[SequenceRef],
        max_tokens: usize,
        seed: Option<u64>,
    ) -> Vec<Vec<SequenceRef>> {
        let mut order = sequences.to_vec();
        if let Some(seed) = seed {
            order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        }
        let mut batches = Vec::new();
        let mut current: Vec<SequenceRef> = Vec::new();
        let mut tokens = 0;
        for r in order {
            let n = self.len_of(r);
            if !current.is_empty() && tokens + n > max_tokens {
                batches.push(std::mem::take(&mut current));
                tokens = 0;
            }
            current.push(r);
            tokens += n;
        }
        if !current.is_empty() {
            batches.push(current);
        }
        batches
    }

    /// Top-k distributions kept per position by every shard (0 if a shard has none).
    pub fn top_k(&self) -> usize {
        self.shards.iter().map(|s| s.top_k).min().unwrap_or(0)
    }

    /// Gathers the tokens, features, argmax and top-k distributions of `batch`.
    pub fn gather(&self, batch: &[SequenceRef]) -> BatchData {
        let width = self.feature_width();
        let top_k = self.top_k();
        let mut data = BatchData {
            sequences: Vec::with_capacity(batch.len()),
            features: Vec::new(),
            argmax: Vec::new(),
            width,
            top_k,
            top_ids: Vec::new(),
            top_probs: Vec::new(),
        };
        for &(shard, index) in batch {
            let shard = &self.shards[shard];
            let span = shard.span(index);
            data.sequences.push((
                shard.tokens[span.clone()].to_vec(),
                shard.prompt_lens[index],
            ));
            data.features.extend(
                shard.features[span.start * width..span.end * width]
                    .iter()
                    .map(|v| v.to_f32()),
            );
            data.argmax.extend_from_slice(&shard.argmax[span.clone()]);
            for position in span {
                let row = position * shard.top_k..position * shard.top_k + top_k;
                data.top_ids.extend_from_slice(&shard.top_ids[row.clone()]);
                data.top_probs
                    .extend(shard.top_probs[row].iter().map(|p| p.to_f32()));
            }
        }
        data
    }

    /// How often each target token is the greedy next token at a response position (the
    /// positions a draft predicts), over `sequences`.
    pub fn response_token_counts(&self, sequences: &[SequenceRef], vocab_size: usize) -> Vec<u64> {
        let mut counts = vec![0u64; vocab_size];
        for &(shard, index) in sequences {
            let shard = &self.shards[shard];
            let span = shard.span(index);
            let first = span.start + shard.prompt_lens[index].saturating_sub(1);
            for &token in &shard.argmax[first..span.end] {
                if let Some(count) = counts.get_mut(token as usize) {
                    *count += 1;
                }
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::DistillSequence;

    fn data() -> DistillData {
        let mut shard = FeatureShard::new(1, "last_hidden");
        for n in [3usize, 4, 2, 5] {
            let tokens: Vec<u32> = (0..n as u32).collect();
            let features: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let argmax: Vec<u32> = (1..=n as u32).collect();
            shard
                .push(
                    &DistillSequence {
                        tokens,
                        prompt_len: 1,
                    },
                    &features,
                    &argmax,
                )
                .unwrap();
        }
        DistillData::new(vec![shard]).unwrap()
    }

    #[test]
    fn splits_batches_and_gathers() {
        let data = data();
        let (train, val) = data.split(2);
        assert_eq!(val, vec![(0, 0), (0, 2)]);
        assert_eq!(train, vec![(0, 1), (0, 3)]);
        let batches = data.batches(&data.sequences(), 7, None);
        assert_eq!(batches, vec![vec![(0, 0), (0, 1)], vec![(0, 2), (0, 3)]]);
        let shuffled = data.batches(&data.sequences(), 7, Some(3));
        assert_eq!(shuffled, data.batches(&data.sequences(), 7, Some(3)));
        let gathered = data.gather(&[(0, 2), (0, 0)]);
        assert_eq!(gathered.sequences[0], (vec![0, 1], 1));
        assert_eq!(gathered.features, vec![0.0, 1.0, 0.0, 1.0, 2.0]);
        assert_eq!(gathered.argmax, vec![1, 2, 1, 2, 3]);
        let counts = data.response_token_counts(&[(0, 0)], 8);
        assert_eq!(counts[1..4], [1, 1, 1]);
    }

    #[test]
    fn gathers_top_k_distributions_of_each_position() {
        let mut shard = FeatureShard::with_top_k(1, "last_hidden", 2);
        let sequence = DistillSequence {
            tokens: vec![4, 5],
            prompt_len: 1,
        };
        shard
            .push_with_top(
                &sequence,
                &[0.0, 1.0],
                &[5, 6],
                &[5, 7, 6, 8],
                &[0.5, 0.25, 1.0, 0.0],
            )
            .unwrap();
        let data = DistillData::new(vec![shard.clone(), shard]).unwrap();
        assert_eq!(data.top_k(), 2);
        let gathered = data.gather(&[(1, 0)]);
        assert_eq!(gathered.top_k, 2);
        assert_eq!(gathered.top_ids, vec![5, 7, 6, 8]);
        assert_eq!(gathered.top_probs, vec![0.5, 0.25, 1.0, 0.0]);
    }

    #[test]
    fn training_only_shards_are_never_held_out() {
        let first = data().shards.remove(0);
        let extra = first.clone();
        let data = DistillData::with_training_only(vec![first], vec![extra]).unwrap();
        let (train, val) = data.split(2);
        assert_eq!(val, vec![(0, 0), (0, 2)]);
        assert_eq!(train, vec![(0, 1), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]);
        assert_eq!(data.split(0).0.len(), 8);
    }

    #[test]
    fn validation_sets_stay_out_of_the_split_and_must_match_the_features() {
        let set = data();
        let data = data().with_validation_set("unseen", set).unwrap();
        assert_eq!(data.split(2), self::data().split(2));
        assert_eq!(data.sequences().len(), 4);
        let sets = data.validation_sets();
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].name, "unseen");
        assert_eq!(sets[0].data.sequences().len(), 4);
        let again = data.clone().with_validation_set("unseen", self::data());
        assert!(again
            .unwrap_err()
            .to_string()
            .contains("two validation sets"));
        let wider = DistillData::new(vec![FeatureShard::new(2, "last_hidden")]);
        assert!(wider.is_err(), "a set without sequences is refused");
        let mut shard = FeatureShard::new(2, "last_hidden");
        let sequence = DistillSequence {
            tokens: vec![1, 2],
            prompt_len: 1,
        };
        shard.push(&sequence, &[0.0; 4], &[2, 3]).unwrap();
        let wider = DistillData::new(vec![shard]).unwrap();
        let err = data.with_validation_set("wide", wider).unwrap_err();
        assert!(err.to_string().contains("2 wide"), "{err}");
    }

    #[test]
    fn validating_only_data_train_on_the_training_only_shards_alone() {
        let first = data().shards.remove(0);
        let extra = first.clone();
        let both = DistillData::with_training_only(vec![first.clone()], vec![extra]).unwrap();
        let data = both.validating_only().unwrap();
        let (train, val) = data.split(2);
        assert_eq!(val, vec![(0, 0), (0, 2)]);
        assert_eq!(train, vec![(1, 0), (1, 1), (1, 2), (1, 3)]);
        let alone = DistillData::new(vec![first]).unwrap().validating_only();
        assert!(alone.unwrap_err().to_string().contains("no training-only"));
    }
}
