//! The pieces of `train-eagle`: which head to train, building it for the target, following the
//! run with progress bars, exporting the result and recording how it was made.

use std::path::Path;

use anyhow::{Context, Result};
use aquila_model_loader::checkpoint::FloatType;
use aquila_model_loader::config::{Eagle1Config, Eagle3Config, LlamaConfig};
use aquila_model_loader::model::FeatureTap;
use aquila_model_loader::model::LlamaModel;
use aquila_spec_decode::eagle::{write_head_dir, DraftVocabMap, Eagle1Head, Eagle3Head, EagleHead};
use aquila_spec_decode::train::{
    train, validate, DistillData, EvalPoint, SequenceRef, TrainBackend, TrainConfig, TrainError,
    TrainHistory, TrainObserver, TrainPoint,
};
use burn::module::AutodiffModule;
use clap::ValueEnum;
use indicatif::ProgressBar;
use serde::Serialize;

/// The kind of head to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
pub enum HeadMethod {
    /// EAGLE-1: the target's last normed hidden state in, feature regression plus token loss.
    Eagle,
    /// EAGLE-3: three auxiliary target layers in, draft vocabulary, training-time test.
    Eagle3,
}

impl HeadMethod {
    /// Short name (`eagle`, `eagle3`).
    pub fn name(self) -> &'static str {
        match self {
            HeadMethod::Eagle => "eagle",
            HeadMethod::Eagle3 => "eagle3",
        }
    }

    /// The target features the head consumes: the last hidden state, or the residual stream
    /// entering layers `2`, `L / 2` and `L - 3` (the reference EAGLE-3 choice).
    pub fn feature_tap(self, target: &LlamaConfig) -> FeatureTap {
        match self {
            HeadMethod::Eagle => FeatureTap::LastHidden,
            HeadMethod::Eagle3 => {
                let layers = target.num_hidden_layers;
                let mut ids = vec![2.min(layers - 1), layers / 2, layers.saturating_sub(3)];
                ids.sort_unstable();
                ids.dedup();
                FeatureTap::AuxLayers(ids)
            }
        }
    }

    /// The trainer defaults of the method.
    pub fn default_config(self) -> TrainConfig {
        match self {
            HeadMethod::Eagle => TrainConfig::eagle1(),
            HeadMethod::Eagle3 => TrainConfig::eagle3(),
        }
    }
}

/// A head being trained (or trained), of either method.
#[derive(Debug)]
pub enum DraftHead<B: TrainBackend> {
    /// An EAGLE-1 head.
    Eagle1(Box<Eagle1Head<B>>),
    /// An EAGLE-3 head.
    Eagle3(Box<Eagle3Head<B>>),
}

/// Where an EAGLE-3 head's output layer (final norm and lm_head) starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
pub enum OutputInit {
    /// Random lm_head, unit norm.
    Random,
    /// The target's final norm and its lm_head rows of the draft vocabulary, trained further.
    Target,
    /// The target's final norm and lm_head rows, the lm_head kept fixed.
    FrozenTarget,
}

/// The shape of a new head and where its output layer starts.
#[derive(Debug, Clone, Copy)]
pub struct NewHeadSettings {
    /// EAGLE-3: the draft vocabulary, the `draft_vocab` tokens the target emits most often in
    /// the training set.
    pub draft_vocab: usize,
    /// Decoder layers (EAGLE-3: the midlayer and standard layers after it); at least one.
    pub layers: usize,
    /// Width of the decoder layers' MLPs; `None` takes the target's.
    pub intermediate_size: Option<usize>,
    /// EAGLE-3: where the final norm and lm_head start (EAGLE-1 heads always use the target's
    /// lm_head).
    pub output: OutputInit,
}

/// A new head of `method` for `target_model`: `settings.layers` decoder layers shaped like the
/// target's but for the MLP width `settings` may give, randomly initialized; for EAGLE-3 a draft
/// vocabulary of the `settings.draft_vocab` tokens the target emits most often in `train_set`
/// (sorted by id) and an output layer started as `settings.output` says.
pub fn build_head<B: TrainBackend>(
    method: HeadMethod,
    target_model: &LlamaModel<B>,
    data: &DistillData,
    train_set: &[SequenceRef],
    settings: &NewHeadSettings,
    device: &B::Device,
) -> Result<DraftHead<B>> {
    let target = target_model.config();
    let layer = LlamaConfig {
        num_hidden_layers: settings.layers,
        intermediate_size: settings
            .intermediate_size
            .unwrap_or(target.intermediate_size),
        ..target.clone()
    };
    Ok(match method {
        HeadMethod::Eagle => {
            let config = Eagle1Config {
                layer,
                fc_bias: Some(true),
                origin: Path::new("<train-eagle>").to_path_buf(),
            };
            DraftHead::Eagle1(Box::new(Eagle1Head::init(&config, target, true, device)?))
        }
        HeadMethod::Eagle3 => {
            let FeatureTap::AuxLayers(ids) = method.feature_tap(target) else {
                unreachable!("EAGLE-3 taps auxiliary layers")
            };
            let counts = data.response_token_counts(train_set, target.vocab_size);
            let kept = most_frequent(&counts, settings.draft_vocab.min(target.vocab_size));
            let config = Eagle3Config {
                layer,
                draft_vocab_size: kept.len(),
                target_hidden_size: Some(target.hidden_size),
                aux_layer_ids: Some(ids),
                use_aux_hidden_state: true,
                norm_before_residual: false,
            };
            let map = DraftVocabMap::from_target_ids(&kept, target.vocab_size)?;
            let head = Eagle3Head::init(&config, target, map, device)?;
            let head = match settings.output {
                OutputInit::Random => head,
                OutputInit::Target => head.with_output_from(target_model, true),
                OutputInit::FrozenTarget => head.with_output_from(target_model, false),
            };
            DraftHead::Eagle3(Box::new(head))
        }
    })
}

/// The head of `method` saved in `dir` (a head directory, as `train-eagle` or the engine's
/// loader knows it), loaded with `f32` weights to be trained further: a warm start keeps its
/// weights and its draft vocabulary. A head of the other method is an error.
pub fn load_head<B: TrainBackend>(
    method: HeadMethod,
    dir: &Path,
    target: &LlamaConfig,
    device: &B::Device,
) -> Result<DraftHead<B>> {
    let head = EagleHead::<B>::load(dir, target, device)
        .with_context(|| format!("loading the head to start from in {}", dir.display()))?;
    match (method, head) {
        (HeadMethod::Eagle, EagleHead::Eagle1(head)) => Ok(DraftHead::Eagle1(head)),
        (HeadMethod::Eagle3, EagleHead::Eagle3(head)) => Ok(DraftHead::Eagle3(head)),
        (method, head) => {
            let found = match head {
                EagleHead::Eagle1(_) => HeadMethod::Eagle,
                EagleHead::Eagle3(_) => HeadMethod::Eagle3,
            };
            anyhow::bail!(
                "the head in {} is an {} head, but --method is {}",
                dir.display(),
                found.name(),
                method.name()
            )
        }
    }
}

/// For each size: the share of the greedy next tokens counted in `wanted` that a draft
/// vocabulary of that many of the most frequent tokens of `counts` covers (a draft head can
/// never propose a token outside its vocabulary). Both count every token of the target's
/// vocabulary ([`DistillData::response_token_counts`]: `counts` over the training sequences,
/// `wanted` over held-out ones).
pub fn draft_vocab_coverage(counts: &[u64], wanted: &[u64], sizes: &[usize]) -> Vec<(usize, f64)> {
    let total: u64 = wanted.iter().sum();
    sizes
        .iter()
        .map(|&size| {
            let covered: u64 = most_frequent(counts, size.min(counts.len()))
                .iter()
                .map(|&id| wanted[id as usize])
                .sum();
            (size, covered as f64 / total.max(1) as f64)
        })
        .collect()
}

/// The `count` ids with the highest counts (ties by id), sorted by id.
fn most_frequent(counts: &[u64], count: usize) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..counts.len() as u32).collect();
    ids.sort_by_key(|&id| (std::cmp::Reverse(counts[id as usize]), id));
    ids.truncate(count);
    ids.sort_unstable();
    ids
}

impl<B: TrainBackend> DraftHead<B> {
    /// Decoder layers of the head (EAGLE-3: the midlayer included).
    pub fn num_layers(&self) -> usize {
        match self {
            DraftHead::Eagle1(head) => head.num_layers(),
            DraftHead::Eagle3(head) => head.num_layers(),
        }
    }

    /// The head deepened to `layers` decoder layers by appending layers that pass their input
    /// through until trained (so it drafts as before, with room to learn more); the head as it
    /// is when it has `layers` already. Fewer layers than the head has is an error: layers
    /// are added, never removed.
    pub fn deepened_to(self, layers: usize, device: &B::Device) -> Result<Self> {
        let have = self.num_layers();
        if layers < have {
            anyhow::bail!(
                "the head to start from has {have} decoder layers; --head-layers {layers} would \
                 remove some (a saved head can only be deepened)"
            );
        }
        let count = layers - have;
        Ok(match self {
            DraftHead::Eagle1(head) => {
                DraftHead::Eagle1(Box::new(head.with_added_layers(count, device)))
            }
            DraftHead::Eagle3(head) => {
                DraftHead::Eagle3(Box::new(head.with_added_layers(count, device)))
            }
        })
    }

    /// Trains the head (see [`aquila_spec_decode::train::train`]).
    pub fn train(
        self,
        target: &LlamaModel<B>,
        data: &DistillData,
        config: &TrainConfig,
        checkpoint_dir: Option<&Path>,
        observer: &mut dyn TrainObserver,
    ) -> Result<(Self, TrainHistory), TrainError> {
        Ok(match self {
            DraftHead::Eagle1(head) => {
                let (head, history) = train(*head, target, data, config, checkpoint_dir, observer)?;
                (DraftHead::Eagle1(Box::new(head)), history)
            }
            DraftHead::Eagle3(head) => {
                let (head, history) = train(*head, target, data, config, checkpoint_dir, observer)?;
                (DraftHead::Eagle3(Box::new(head)), history)
            }
        })
    }

    /// Scores the head as a validation of a run does, without training it (see
    /// [`aquila_spec_decode::train::validate`]).
    pub fn validate(
        &self,
        target: &LlamaModel<B>,
        data: &DistillData,
        config: &TrainConfig,
    ) -> Result<EvalPoint, TrainError> {
        let target = target.valid();
        match self {
            DraftHead::Eagle1(head) => validate(&head.valid(), &target, data, config),
            DraftHead::Eagle3(head) => validate(&head.valid(), &target, data, config),
        }
    }

    /// Writes the head to `dir` (`config.json`, `model.safetensors` in `dtype`).
    pub fn export(&self, dir: &Path, dtype: FloatType) -> Result<()> {
        let (config, tensors) = match self {
            DraftHead::Eagle1(head) => (head.config_json(), head.export()),
            DraftHead::Eagle3(head) => (head.config_json(), head.export()),
        };
        write_head_dir(dir, &config, &tensors, dtype)
            .with_context(|| format!("writing the head to {}", dir.display()))
    }
}

/// Progress bars over the optimizer steps, with the latest loss and validation.
pub struct ProgressObserver {
    bar: ProgressBar,
    last_eval: Option<EvalPoint>,
}

impl ProgressObserver {
    /// A hidden bar until the run starts.
    pub fn new() -> Self {
        Self {
            bar: ProgressBar::hidden(),
            last_eval: None,
        }
    }

    /// Finishes the bar.
    pub fn finish(&self) {
        self.bar.finish();
    }
}

impl Default for ProgressObserver {
    fn default() -> Self {
        Self::new()
    }
}

impl TrainObserver for ProgressObserver {
    fn on_start(&mut self, total_steps: usize, start_step: usize) {
        self.bar = crate::progress::bar(
            total_steps as u64,
            "train [{bar:30}] {pos}/{len} steps {elapsed_precise} (eta {eta}) {msg}",
        );
        self.bar.set_position(start_step as u64);
    }

    fn on_step(&mut self, point: &TrainPoint) {
        self.bar.set_position(point.step as u64);
        let eval = self.last_eval.as_ref().map_or(String::new(), |e| {
            format!(
                " | val acc {:.3} AL {:.2}",
                e.accuracy.first().copied().unwrap_or(0.0),
                e.acceptance_length
            )
        });
        self.bar.set_message(format!(
            "epoch {} loss {:.4} acc {:.3}{eval}",
            point.epoch,
            point.loss,
            point.accuracy.first().copied().unwrap_or(0.0)
        ));
    }

    fn on_eval(&mut self, point: &EvalPoint) {
        // The bar stood still while the validation ran; its rate estimate would count that
        // pause as slow training steps and show an ETA hours long until it recovered.
        self.bar.reset_eta();
        for line in eval_lines(point) {
            // A bar drawing nowhere (no terminal) drops its lines: print them plainly then.
            if self.bar.is_hidden() {
                eprintln!("{line}");
            } else {
                self.bar.println(line);
            }
        }
        self.last_eval = Some(point.clone());
    }
}

/// A validation as report lines: the held-out split's, then one per validation set.
pub fn eval_lines(point: &EvalPoint) -> Vec<String> {
    let scores = |loss: f32, accuracy: &[f64], acceptance_length: f64| {
        let accuracy: Vec<String> = accuracy.iter().map(|a| format!("{a:.3}")).collect();
        format!(
            "val loss {loss:.4}, top-1 accuracy per draft step [{}], simulated acceptance \
             length {acceptance_length:.3}",
            accuracy.join(", ")
        )
    };
    let mut lines = vec![format!(
        "step {:>5} tokens {:>8}: {}",
        point.step,
        point.tokens_seen,
        scores(point.loss, &point.accuracy, point.acceptance_length)
    )];
    for set in &point.sets {
        lines.push(format!(
            "    {}: {}",
            set.name,
            scores(set.loss, &set.accuracy, set.acceptance_length)
        ));
    }
    lines
}

/// How a head was made: written beside it as `training.json` and summarized in `TRAINING.md`.
#[derive(Debug, Serialize)]
pub struct TrainingRecord {
    /// The command line.
    pub command: String,
    /// The method.
    pub method: HeadMethod,
    /// Recorded sequences (training and validation).
    pub sequences: usize,
    /// Recorded tokens.
    pub tokens: usize,
    /// Trainer settings.
    #[serde(skip)]
    pub config: TrainConfig,
    /// Losses and validations.
    pub history: TrainHistory,
    /// Wall time of the whole run (data, training, export).
    pub wall_seconds: f64,
}

impl TrainingRecord {
    /// A few lines: data size, epochs, final validation accuracy and acceptance.
    pub fn summary(&self) -> String {
        let last = self.history.evals.last();
        let accuracy = last.map_or(String::from("n/a"), |e| {
            e.accuracy
                .iter()
                .map(|a| format!("{a:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        });
        let sets: String = last
            .map(|e| e.sets.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|set| {
                format!(
                    "\nfinal simulated acceptance length on {}: {:.3}",
                    set.name, set.acceptance_length
                )
            })
            .collect();
        format!(
            "method: {}\ndata: {} sequences, {} tokens (prompt + response)\nepochs: {}, \
             optimizer steps: {}\nfinal validation top-1 accuracy per draft step: [{accuracy}]\n\
             final simulated acceptance length (k = {}, T = 0): {}{sets}\nwall time: {:.0} s",
            self.method.name(),
            self.sequences,
            self.tokens,
            self.config.epochs,
            self.history.train.len(),
            self.config.eval_chain,
            last.map_or("n/a".to_string(), |e| format!("{:.3}", e.acceptance_length)),
            self.wall_seconds
        )
    }
}

/// The validation curve as a Markdown table: the held-out split's scores and the acceptance
/// length on each validation set, in the order the sets first appear (a run resumed with
/// another set leaves the validations before it blank in that set's column).
fn validation_curve(evals: &[EvalPoint]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for set in evals.iter().flat_map(|e| &e.sets) {
        if !names.contains(&set.name.as_str()) {
            names.push(&set.name);
        }
    }
    let mut curve = String::from("| step | training tokens | val loss | top-1 per step | AL |");
    for name in &names {
        curve.push_str(&format!(" AL {name} |"));
    }
    curve.push_str("\n|---:|---:|---:|---|---:|");
    curve.push_str(&"---:|".repeat(names.len()));
    curve.push('\n');
    for e in evals {
        let acc: Vec<String> = e.accuracy.iter().map(|a| format!("{a:.3}")).collect();
        curve.push_str(&format!(
            "| {} | {} | {:.4} | {} | {:.3} |",
            e.step,
            e.tokens_seen,
            e.loss,
            acc.join(" / "),
            e.acceptance_length
        ));
        for name in &names {
            let score = e.sets.iter().find(|s| s.name == *name);
            match score {
                Some(s) => curve.push_str(&format!(" {:.3} |", s.acceptance_length)),
                None => curve.push_str(" |"),
            }
        }
        curve.push('\n');
    }
    curve
}

/// Writes `training.json` and `TRAINING.md` into the head's directory.
pub fn write_training_record(dir: &Path, record: &TrainingRecord) -> Result<()> {
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "command": record.command,
        "method": record.method,
        "sequences": record.sequences,
        "tokens": record.tokens,
        "config": format!("{:?}", record.config),
        "wall_seconds": record.wall_seconds,
        "evals": record.history.evals,
    }))?;
    std::fs::write(dir.join("training.json"), json)?;
    let curve = validation_curve(&record.history.evals);
    let text = format!(
        "# How this head was made\n\nCommand: `{}`\n\n```text\n{}\n```\n\nTrainer settings: \
         `{:?}`\n\n## Validation curve (held-out sequences)\n\n{curve}",
        record.command,
        record.summary(),
        record.config
    );
    std::fs::write(dir.join("TRAINING.md"), text)
        .with_context(|| format!("writing {}", dir.join("TRAINING.md").display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aquila_spec_decode::train::{DistillSequence, FeatureShard, SetScores};

    #[test]
    fn the_curve_has_a_column_for_each_validation_set() {
        let set = |name: &str, acceptance_length| SetScores {
            name: name.into(),
            loss: 1.0,
            accuracy: vec![0.5],
            acceptance_length,
        };
        let point = |step, sets| EvalPoint {
            step,
            tokens_seen: 100 * step as u64,
            loss: 2.0,
            accuracy: vec![0.5, 0.25],
            acceptance_length: 1.75,
            sets,
        };
        let evals = [
            point(1, vec![set("eval-chat", 1.5)]),
            point(2, vec![set("eval-chat", 1.625), set("eval-chat-2", 1.25)]),
        ];
        let curve = validation_curve(&evals);
        let lines: Vec<&str> = curve.lines().collect();
        assert_eq!(
            lines[0],
            "| step | training tokens | val loss | top-1 per step | AL | AL eval-chat | AL \
             eval-chat-2 |"
        );
        assert_eq!(lines[1], "|---:|---:|---:|---|---:|---:|---:|");
        assert_eq!(
            lines[2],
            "| 1 | 100 | 2.0000 | 0.500 / 0.250 | 1.750 | 1.500 | |"
        );
        assert_eq!(
            lines[3],
            "| 2 | 200 | 2.0000 | 0.500 / 0.250 | 1.750 | 1.625 | 1.250 |"
        );
        let lines = eval_lines(&evals[1]);
        assert_eq!(lines.len(), 3);
        assert!(
            lines[1].starts_with("    eval-chat: val loss 1.0000"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].ends_with("simulated acceptance length 1.250"),
            "{}",
            lines[2]
        );
        assert_eq!(validation_curve(&[]).lines().count(), 2);
    }

    #[test]
    fn coverage_counts_held_out_response_labels_in_the_train_vocabulary() {
        let mut shard = FeatureShard::new(1, "last_hidden");
        // Response labels (from the last prompt position on): train [5, 5, 6], held out [5, 7].
        for labels in [vec![9, 5, 5, 6], vec![9, 5, 7]] {
            let n = labels.len();
            let sequence = DistillSequence {
                tokens: vec![1; n],
                prompt_len: 2,
            };
            shard.push(&sequence, &vec![0.0; n], &labels).unwrap();
        }
        let data = DistillData::new(vec![shard]).unwrap();
        let counts = data.response_token_counts(&[(0, 0)], 10);
        let wanted = data.response_token_counts(&[(0, 1)], 10);
        let coverage = draft_vocab_coverage(&counts, &wanted, &[1, 2]);
        assert_eq!(coverage, vec![(1, 0.5), (2, 0.5)]);
    }
}
