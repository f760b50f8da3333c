//! One batch through an unrolled draft chain: the differentiable loss and the accuracy of
//! every draft step.

use std::collections::HashMap;

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::model::{ForwardBatch, LlamaModel};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::objective::{
    hard_cross_entropy, smooth_l1, soft_cross_entropy, sparse_soft_cross_entropy,
    target_distribution, Objective,
};
use super::unroll::{plan_batch, PlannedSequence, StepPlan};
use super::{BatchData, TrainError};
use crate::eagle::EagleHead;

/// How a batch is run.
#[derive(Debug)]
pub struct StepOptions<'a> {
    /// Draft steps to unroll (1 = step 0 only).
    pub unroll: usize,
    /// Loss weight of step `j` is `unroll_decay^j`.
    pub unroll_decay: f32,
    /// The loss.
    pub objective: Objective,
    /// Uniform noise of this total width added to step-0 input features, and its RNG.
    pub noise: Option<(f32, &'a mut ChaCha8Rng)>,
    /// Draft-vocabulary index of every target token (`None` outside the draft vocabulary).
    pub target_to_draft: &'a [Option<u32>],
}

/// What a batch measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchStats {
    /// Per draft step: rows with a loss.
    pub rows: Vec<usize>,
    /// Per draft step: rows whose draft argmax equals the target's greedy token.
    pub correct: Vec<usize>,
    /// For every chain that ran all unrolled steps: how many leading steps were correct.
    pub chain_accepted: Vec<usize>,
}

impl BatchStats {
    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &BatchStats) {
        for (mine, theirs) in [
            (&mut self.rows, &other.rows),
            (&mut self.correct, &other.correct),
        ] {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            mine.iter_mut().zip(theirs).for_each(|(a, b)| *a += b);
        }
        self.chain_accepted.extend_from_slice(&other.chain_accepted);
    }

    /// Top-1 accuracy of each draft step.
    pub fn accuracy(&self) -> Vec<f64> {
        self.rows
            .iter()
            .zip(&self.correct)
            .map(|(&rows, &correct)| correct as f64 / rows.max(1) as f64)
            .collect()
    }

    /// Mean acceptance length of greedy chains of the unrolled length at temperature 0
    /// (`1 + mean leading correct steps`, the bonus token counted).
    pub fn simulated_acceptance_length(&self) -> f64 {
        let n = self.chain_accepted.len().max(1) as f64;
        1.0 + self.chain_accepted.iter().sum::<usize>() as f64 / n
    }
}

/// Runs `data` through `head` for `options.unroll` draft steps; returns the weighted loss and
/// the batch's accuracy counts.
pub fn run_batch<B: KernelBackend>(
    head: &EagleHead<B>,
    target: &LlamaModel<B>,
    data: &BatchData,
    options: StepOptions<'_>,
) -> Result<(Tensor<B, 1>, BatchStats), TrainError> {
    let device = target.device();
    let planned: Vec<PlannedSequence<'_>> = data
        .sequences
        .iter()
        .map(|(tokens, prompt_len)| PlannedSequence {
            tokens,
            prompt_len: *prompt_len,
        })
        .collect();
    let plan = plan_batch(&planned, options.unroll);
    let width = data.width;

    let mut inputs = gather_rows(&data.features, width, &plan.input_features);
    if let Some((amplitude, rng)) = options.noise {
        inputs
            .iter_mut()
            .for_each(|v| *v += (rng.random::<f32>() - 0.5) * amplitude);
    }
    let rows = plan.input_features.len();
    let features = Tensor::<B, 2>::from_data(TensorData::new(inputs, [rows, width]), &device);
    let mut hidden = head.project(features);
    let mut cache = head.new_kv_cache(data.sequences.len());
    let mut loss = Tensor::<B, 1>::zeros([1], &device);
    let mut stats = BatchStats::default();
    let mut chains: HashMap<(usize, usize), Vec<bool>> = HashMap::new();
    let mut weight = 1.0f32;
    let soft_labels = match options.objective {
        Objective::Eagle1 { .. } => SoftLabels::new(target, data, &plan.steps),
        Objective::Eagle3 | Objective::Eagle3Distill => None,
    };

    for (index, step) in plan.steps.iter().enumerate() {
        if index > 0 {
            hidden = hidden.select(0, int_tensor(&step.carry_rows, &device));
            weight *= options.unroll_decay;
        }
        let batch = ForwardBatch::new(step.sequences.clone());
        hidden = head.forward(target, &batch, hidden, &mut cache)?;
        if step.loss_rows.is_empty() {
            stats.rows.push(0);
            stats.correct.push(0);
            continue;
        }
        let picked = hidden
            .clone()
            .select(0, int_tensor(&step.loss_rows, &device));
        let logits = head.logits(target, picked.clone());
        let labels: Vec<u32> = step.targets.iter().map(|&t| data.argmax[t]).collect();
        let correct = draft_matches(head, logits.clone(), &labels)?;
        stats.rows.push(labels.len());
        stats.correct.push(correct.iter().filter(|&&c| c).count());
        for (&chain, &ok) in step.chains.iter().zip(&correct) {
            chains.entry(chain).or_default().push(ok);
        }
        let step_loss = match options.objective {
            Objective::Eagle1 {
                feature_weight,
                token_weight,
            } => {
                let wanted = gather_rows(&data.features, width, &step.targets);
                let wanted = Tensor::<B, 2>::from_data(
                    TensorData::new(wanted, [step.targets.len(), width]),
                    &device,
                );
                let Some(soft_labels) = &soft_labels else {
                    continue;
                };
                let probs = soft_labels.rows(&step.targets, &device);
                smooth_l1(picked, wanted).mul_scalar(feature_weight)
                    + soft_cross_entropy(logits, probs).mul_scalar(token_weight)
            }
            Objective::Eagle3 => {
                let (keep, classes): (Vec<usize>, Vec<i64>) = labels
                    .iter()
                    .enumerate()
                    .filter_map(|(row, &label)| {
                        options.target_to_draft[label as usize].map(|d| (row, i64::from(d)))
                    })
                    .unzip();
                if keep.is_empty() {
                    continue;
                }
                let classes =
                    Tensor::<B, 1, Int>::from_data(TensorData::new(classes, [keep.len()]), &device);
                hard_cross_entropy(logits.select(0, int_tensor(&keep, &device)), classes)
            }
            Objective::Eagle3Distill => {
                let Some((keep, ids, probs)) =
                    draft_distributions(data, &step.targets, options.target_to_draft)?
                else {
                    continue;
                };
                let k = data.top_k;
                let ids =
                    Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [keep.len(), k]), &device);
                let probs =
                    Tensor::<B, 2>::from_data(TensorData::new(probs, [keep.len(), k]), &device);
                sparse_soft_cross_entropy(logits.select(0, int_tensor(&keep, &device)), ids, probs)
            }
        };
        loss = loss + step_loss.mul_scalar(weight);
    }
    let steps = plan.steps.len();
    stats.chain_accepted = chains
        .into_values()
        .filter(|c| c.len() == steps && steps == options.unroll)
        .map(|c| c.iter().take_while(|&&ok| ok).count())
        .collect();
    Ok((loss, stats))
}

/// Rows kept, their `[rows, top_k]` draft ids and probabilities: the recorded top-k
/// distribution after each of `targets`, restricted to the draft vocabulary and renormalized
/// (rows with no mass in it are dropped; padding has id 0 and probability 0). `None` when no
/// row is kept; an error when the data has no top-k distributions.
#[allow(clippy::type_complexity)]
fn draft_distributions(
    data: &BatchData,
    targets: &[usize],
    target_to_draft: &[Option<u32>],
) -> Result<Option<(Vec<usize>, Vec<i64>, Vec<f32>)>, TrainError> {
    let k = data.top_k;
    if k == 0 {
        return Err(TrainError::Config(
            "the distillation objective needs shards recorded with top-k distributions".into(),
        ));
    }
    let (mut keep, mut ids, mut probs) = (Vec::new(), Vec::new(), Vec::new());
    for (row, &t) in targets.iter().enumerate() {
        let entries: Vec<(i64, f32)> = (t * k..(t + 1) * k)
            .filter_map(|j| {
                let draft = target_to_draft
                    .get(data.top_ids[j] as usize)
                    .copied()
                    .flatten();
                draft.map(|d| (i64::from(d), data.top_probs[j]))
            })
            .collect();
        let mass: f32 = entries.iter().map(|e| e.1).sum();
        if mass <= 0.0 {
            continue;
        }
        keep.push(row);
        for j in 0..k {
            let (id, p) = entries.get(j).copied().unwrap_or((0, 0.0));
            ids.push(id);
            probs.push(p / mass);
        }
    }
    Ok((!keep.is_empty()).then_some((keep, ids, probs)))
}

/// Whether each row's draft argmax, mapped to a target id, equals its label.
fn draft_matches<B: KernelBackend>(
    head: &EagleHead<B>,
    logits: Tensor<B, 2>,
    labels: &[u32],
) -> Result<Vec<bool>, TrainError> {
    let picks: Vec<i64> = logits
        .detach()
        .argmax(1)
        .into_data()
        .convert::<i64>()
        .to_vec()
        .map_err(|e| TrainError::Data(format!("{e:?}")))?;
    let map = head.vocab_map();
    Ok(picks
        .iter()
        .zip(labels)
        .map(|(&pick, &label)| map.to_target(pick as u32) == label)
        .collect())
}

/// EAGLE-1's soft labels: the target's distribution after every position a step of the batch
/// predicts, computed once per batch (an unrolled step predicts a subset of the positions
/// step 0 predicts, so the union costs one lm_head pass however many steps run).
struct SoftLabels<B: Backend> {
    /// `[positions, vocab]`, one row per predicted position.
    probs: Tensor<B, 2>,
    /// Batch-local token index of each predicted position → its row in `probs`.
    row_of: HashMap<usize, usize>,
}

impl<B: KernelBackend> SoftLabels<B> {
    /// The distributions after every target of `steps`; `None` when no step has a loss row.
    fn new(target: &LlamaModel<B>, data: &BatchData, steps: &[StepPlan]) -> Option<Self> {
        let mut positions: Vec<usize> = steps.iter().flat_map(|s| s.targets.clone()).collect();
        positions.sort_unstable();
        positions.dedup();
        if positions.is_empty() {
            return None;
        }
        let features = gather_rows(&data.features, data.width, &positions);
        let features = Tensor::<B, 2>::from_data(
            TensorData::new(features, [positions.len(), data.width]),
            &target.device(),
        );
        let probs = target_distribution(target.lm_head(features));
        let row_of = positions
            .iter()
            .enumerate()
            .map(|(row, &p)| (p, row))
            .collect();
        Some(Self { probs, row_of })
    }

    /// `[targets, vocab]`: the distribution after each of `targets` (all among the
    /// positions the labels were made for). Step 0's targets are every position in order, so
    /// it shares the labels' tensor instead of copying it.
    fn rows(&self, targets: &[usize], device: &B::Device) -> Tensor<B, 2> {
        let rows: Vec<usize> = targets.iter().map(|t| self.row_of[t]).collect();
        let all_in_order =
            rows.len() == self.row_of.len() && rows.iter().enumerate().all(|(i, &r)| i == r);
        if all_in_order {
            self.probs.clone()
        } else {
            self.probs.clone().select(0, int_tensor(&rows, device))
        }
    }
}

/// Rows `indices` of a row-major `[_, width]` buffer.
fn gather_rows(values: &[f32], width: usize, indices: &[usize]) -> Vec<f32> {
    indices
        .iter()
        .flat_map(|&i| values[i * width..(i + 1) * width].iter().copied())
        .collect()
}

/// A 1-D integer tensor of row indices.
fn int_tensor<B: Backend>(indices: &[usize], device: &B::Device) -> Tensor<B, 1, Int> {
    let values: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
    Tensor::from_data(TensorData::new(values, [indices.len()]), device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
    use burn::backend::Flex;

    #[test]
    fn soft_labels_of_every_unrolled_step_are_the_targets_distributions() {
        let dir = tempfile::tempdir().unwrap();
        write_tiny_llama(dir.path(), &TinyLlamaOptions::default()).unwrap();
        let target = LlamaModel::<Flex>::load(dir.path(), &Default::default()).unwrap();
        let width = target.config().hidden_size;
        let (first, second): (Vec<u32>, Vec<u32>) = ((0..7).collect(), (10..15).collect());
        let tokens = first.len() + second.len();
        let features: Vec<f32> = (0..tokens * width)
            .map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * 4.0)
            .collect();
        let data = BatchData {
            sequences: vec![(first.clone(), 2), (second.clone(), 3)],
            features: features.clone(),
            argmax: vec![0; tokens],
            width,
            top_k: 0,
            top_ids: Vec::new(),
            top_probs: Vec::new(),
        };
        let planned = [
            PlannedSequence {
                tokens: &first,
                prompt_len: 2,
            },
            PlannedSequence {
                tokens: &second,
                prompt_len: 3,
            },
        ];
        let plan = plan_batch(&planned, 3);
        assert_eq!(plan.steps.len(), 3);
        let labels = SoftLabels::new(&target, &data, &plan.steps).expect("loss rows");
        for step in &plan.steps {
            let wanted = gather_rows(&features, width, &step.targets);
            let wanted = Tensor::<Flex, 2>::from_data(
                TensorData::new(wanted, [step.targets.len(), width]),
                &target.device(),
            );
            let expected: Vec<f32> = target_distribution(target.lm_head(wanted))
                .into_data()
                .to_vec()
                .unwrap();
            let got: Vec<f32> = labels
                .rows(&step.targets, &target.device())
                .into_data()
                .to_vec()
                .unwrap();
            assert_eq!(got.len(), expected.len());
            for (g, e) in got.iter().zip(&expected) {
                assert!((g - e).abs() <= 1e-6, "{g} vs {e}");
            }
        }
        // No step with a loss row: no labels.
        let prompt_only = PlannedSequence {
            tokens: &first,
            prompt_len: first.len(),
        };
        let plan = plan_batch(&[prompt_only], 2);
        assert!(SoftLabels::new(&target, &data, &plan.steps).is_none());
    }

    fn batch(top_ids: Vec<u32>, top_probs: Vec<f32>) -> BatchData {
        BatchData {
            sequences: Vec::new(),
            features: Vec::new(),
            argmax: Vec::new(),
            width: 0,
            top_k: 2,
            top_ids,
            top_probs,
        }
    }

    #[test]
    fn maps_top_k_into_the_draft_vocabulary_and_renormalizes() {
        // Target tokens 5 and 7 are draft ids 0 and 1; token 9 is outside the draft vocabulary.
        let mut table = vec![None; 10];
        table[5] = Some(0);
        table[7] = Some(1);
        let data = batch(vec![5, 9, 9, 9, 7, 5], vec![0.6, 0.2, 0.5, 0.5, 0.3, 0.1]);
        let (keep, ids, probs) = draft_distributions(&data, &[0, 1, 2], &table)
            .unwrap()
            .unwrap();
        // Position 1 has no mass in the draft vocabulary: its row is dropped.
        assert_eq!(keep, vec![0, 2]);
        assert_eq!(ids, vec![0, 0, 1, 0]);
        assert_eq!(probs[..2], [1.0, 0.0]);
        assert!((probs[2] - 0.75).abs() < 1e-6 && (probs[3] - 0.25).abs() < 1e-6);
        let none = batch(Vec::new(), Vec::new());
        assert!(draft_distributions(&BatchData { top_k: 0, ..none }, &[0], &table).is_err());
    }
}
