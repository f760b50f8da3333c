//! [`train`]: the optimization loop: shuffled token-budget batches, AdamW with warm-up and
//! cosine decay, per-parameter gradient clipping, periodic validation of draft accuracy and
//! simulated acceptance, checkpoints and resume.

use std::path::Path;

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::model::LlamaModel;
use burn::grad_clipping::GradientClippingConfig;
use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Tensor};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::checkpoint::TrainCheckpoint;
use super::schedule::WarmupCosine;
use super::step::{run_batch, BatchStats, StepOptions};
use super::{
    DistillData, EvalPoint, SequenceRef, SetScores, TrainConfig, TrainError, TrainHistory,
    TrainObserver, TrainPoint,
};
use crate::eagle::{Eagle1Head, Eagle3Head, EagleHead};

/// A backend draft heads train on: autodiff over a backend that, like the autodiff one, runs
/// the model's operations (`Autodiff<Flex>`, `Autodiff<Cuda>`).
pub trait TrainBackend: AutodiffBackend<InnerBackend: KernelBackend> + KernelBackend {}

impl<B: AutodiffBackend<InnerBackend: KernelBackend> + KernelBackend> TrainBackend for B {}

/// A trainable draft head: a burn module that drafts as an [`EagleHead`].
pub trait DraftHeadModule<B: Backend>: Module<B> + Clone {
    /// The head as an [`EagleHead`] (a cheap clone sharing the weights).
    fn to_eagle_head(&self) -> EagleHead<B>;
}

impl<B: KernelBackend> DraftHeadModule<B> for Eagle1Head<B> {
    fn to_eagle_head(&self) -> EagleHead<B> {
        EagleHead::Eagle1(Box::new(self.clone()))
    }
}

impl<B: KernelBackend> DraftHeadModule<B> for Eagle3Head<B> {
    fn to_eagle_head(&self) -> EagleHead<B> {
        EagleHead::Eagle3(Box::new(self.clone()))
    }
}

/// Trains `head` on `data` against `target` (whose weights must not require gradients: load
/// it and call `no_grad()`). With `checkpoint_dir`, state is saved there periodically and a
/// run finding a checkpoint resumes from it (same config and data assumed). Returns the
/// trained head and the full history.
pub fn train<B, H>(
    head: H,
    target: &LlamaModel<B>,
    data: &DistillData,
    config: &TrainConfig,
    checkpoint_dir: Option<&Path>,
    observer: &mut dyn TrainObserver,
) -> Result<(H, TrainHistory), TrainError>
where
    B: TrainBackend,
    H: AutodiffModule<B> + DraftHeadModule<B>,
    H::InnerModule: DraftHeadModule<B::InnerBackend>,
{
    config.validate()?;
    let (train_set, val_set) = data.split(config.val_every);
    if train_set.is_empty() {
        return Err(TrainError::Data(
            "no training sequence after the split".into(),
        ));
    }
    let mut schedule_batches: Vec<Vec<SequenceRef>> = Vec::new();
    let mut epoch_of_step: Vec<usize> = Vec::new();
    for epoch in 0..config.epochs {
        let seed = config.seed.wrapping_add(epoch as u64);
        let batches = data.batches(&train_set, config.batch_tokens, Some(seed));
        epoch_of_step.extend(std::iter::repeat_n(epoch, batches.len()));
        schedule_batches.extend(batches);
    }
    let total_steps = schedule_batches.len();
    let schedule = WarmupCosine {
        peak: config.learning_rate,
        warmup_steps: ((total_steps as f64 * config.warmup_fraction) as usize).max(1),
        total_steps,
        min_ratio: config.min_lr_ratio,
    };
    let mut optimizer = AdamWConfig::new()
        .with_epsilon(1e-8)
        .with_weight_decay(config.weight_decay)
        .with_grad_clipping(Some(GradientClippingConfig::Norm(config.grad_clip)))
        .init::<B, H>();
    let vocab_size = target.config().vocab_size;
    let target_to_draft = target_to_draft(&head.to_eagle_head(), vocab_size);
    let target_inner = target.valid();

    let run = run_fingerprint(config, &schedule_batches, &parameter_shapes(&head));
    let mut head = head;
    let mut history = TrainHistory::default();
    let mut start = 0;
    if let Some(dir) = checkpoint_dir {
        if let Some(saved) =
            TrainCheckpoint::<B, H>::load(dir, &run, head.clone(), optimizer.clone())?
        {
            (head, optimizer, history) = (saved.head, saved.optimizer, saved.history);
            start = history.train.last().map_or(0, |p| p.step);
            tracing::info!(step = start, "resuming training from {}", dir.display());
        }
    }
    observer.on_start(total_steps, start);
    let mut tokens_seen = history.train.last().map_or(0, |p| p.tokens_seen);

    let stop = config.stop_after.unwrap_or(total_steps).min(total_steps);
    for (index, batch) in schedule_batches.iter().enumerate().take(stop).skip(start) {
        let step = index + 1;
        let lr = schedule.lr(index);
        let started = std::time::Instant::now();
        let gathered = data.gather(batch);
        let mut noise_rng = ChaCha8Rng::seed_from_u64(config.seed ^ (step as u64).rotate_left(32));
        let options = StepOptions {
            unroll: config.unroll,
            unroll_decay: config.unroll_decay,
            objective: config.objective,
            noise: (config.noise > 0.0).then_some((config.noise, &mut noise_rng)),
            target_to_draft: &target_to_draft,
        };
        let gathered_at = std::time::Instant::now();
        let (loss, stats) = run_batch(&head.to_eagle_head(), target, &gathered, options)?;
        let loss_value: f32 = loss.clone().into_scalar().elem();
        if !loss_value.is_finite() {
            return Err(TrainError::Diverged { step });
        }
        let forward_at = std::time::Instant::now();
        let grads = GradientsParams::from_grads(loss.backward(), &head);
        let backward_at = std::time::Instant::now();
        head = optimizer.step(lr, head, grads);
        let ms = |a: std::time::Instant, b: std::time::Instant| (b - a).as_secs_f64() * 1e3;
        tracing::debug!(
            step,
            tokens = gathered.argmax.len(),
            gather_ms = ms(started, gathered_at),
            forward_ms = ms(gathered_at, forward_at),
            backward_ms = ms(forward_at, backward_at),
            optimizer_ms = ms(backward_at, std::time::Instant::now()),
            "training step"
        );
        tokens_seen += gathered.argmax.len() as u64;
        let point = TrainPoint {
            step,
            epoch: epoch_of_step[index],
            tokens_seen,
            loss: loss_value,
            lr,
            accuracy: stats.accuracy(),
        };
        observer.on_step(&point);
        history.train.push(point);

        let last = step == stop;
        if !val_set.is_empty() && (step % config.eval_every == 0 || last) {
            let eval = validate_on(
                &head.valid(),
                &target_inner,
                data,
                &val_set,
                config,
                &target_to_draft,
            )?;
            let point = EvalPoint {
                step,
                tokens_seen,
                ..eval
            };
            tracing::info!(
                step,
                loss = point.loss,
                accuracy = ?point.accuracy,
                acceptance_length = point.acceptance_length,
                "validation"
            );
            for set in &point.sets {
                tracing::info!(
                    step,
                    set = set.name,
                    acceptance_length = set.acceptance_length,
                    "validation set"
                );
            }
            observer.on_eval(&point);
            history.evals.push(point);
        }
        if let Some(dir) = checkpoint_dir {
            if step % config.checkpoint_every == 0 || last {
                TrainCheckpoint::<B, H>::save(dir, &run, &head, &optimizer, &history)?;
            }
        }
    }
    Ok((head, history))
}

/// Identifies a run: its settings (all but where it stops), its batches and the shapes of the
/// head's parameters (a checkpoint of a head of another shape cannot be resumed into this one).
fn run_fingerprint(
    config: &TrainConfig,
    batches: &[Vec<SequenceRef>],
    shapes: &[Vec<usize>],
) -> String {
    let settings = TrainConfig {
        stop_after: None,
        ..config.clone()
    };
    let mut hash = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(batches, &mut hash);
    format!(
        "{settings:?}\nbatches: {} (hash {:016x})\nparameters: {shapes:?}\n",
        batches.len(),
        std::hash::Hasher::finish(&hash)
    )
}

/// The shapes of `module`'s float parameters, in the module's visiting order.
fn parameter_shapes<B: Backend, M: Module<B>>(module: &M) -> Vec<Vec<usize>> {
    struct Shapes(Vec<Vec<usize>>);
    impl<B: Backend> ModuleVisitor<B> for Shapes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(param.lazy_shape().to_vec());
        }
    }
    let mut shapes = Shapes(Vec::new());
    module.visit(&mut shapes);
    shapes.0
}

/// Validation as a run does it (see [`train`]): `head` on the held-out split of `data`
/// (every `config.val_every`-th sequence of its split shards) and on each of its validation
/// sets ([`DistillData::with_validation_set`]). Scores a saved head without training it.
pub fn validate<B: KernelBackend, H: DraftHeadModule<B>>(
    head: &H,
    target: &LlamaModel<B>,
    data: &DistillData,
    config: &TrainConfig,
) -> Result<EvalPoint, TrainError> {
    let (_, val_set) = data.split(config.val_every);
    let target_to_draft = target_to_draft(&head.to_eagle_head(), target.config().vocab_size);
    validate_on(head, target, data, &val_set, config, &target_to_draft)
}

/// [`evaluate`] on `val_set` of `data`, with the scores of each of its validation sets.
fn validate_on<B: KernelBackend, H: DraftHeadModule<B>>(
    head: &H,
    target: &LlamaModel<B>,
    data: &DistillData,
    val_set: &[SequenceRef],
    config: &TrainConfig,
    target_to_draft: &[Option<u32>],
) -> Result<EvalPoint, TrainError> {
    let mut point = evaluate(head, target, data, val_set, config, target_to_draft)?;
    for set in data.validation_sets() {
        let sequences = set.data.sequences();
        let eval = evaluate(head, target, &set.data, &sequences, config, target_to_draft)?;
        point.sets.push(SetScores {
            name: set.name.clone(),
            loss: eval.loss,
            accuracy: eval.accuracy,
            acceptance_length: eval.acceptance_length,
        });
    }
    Ok(point)
}

/// Validation over `sequences`: mean loss, per-step accuracy and simulated acceptance length
/// of greedy chains of `config.eval_chain` drafts (no noise, no gradient).
pub fn evaluate<B: KernelBackend, H: DraftHeadModule<B>>(
    head: &H,
    target: &LlamaModel<B>,
    data: &DistillData,
    sequences: &[SequenceRef],
    config: &TrainConfig,
    target_to_draft: &[Option<u32>],
) -> Result<EvalPoint, TrainError> {
    let eagle = head.to_eagle_head();
    let mut stats = BatchStats::default();
    let mut loss_sum = 0.0f32;
    let batches = data.batches(sequences, config.batch_tokens, None);
    for batch in &batches {
        let options = StepOptions {
            unroll: config.eval_chain,
            unroll_decay: config.unroll_decay,
            objective: config.objective,
            noise: None,
            target_to_draft,
        };
        let (loss, batch_stats) = run_batch(&eagle, target, &data.gather(batch), options)?;
        loss_sum += loss.into_scalar().elem::<f32>();
        stats.merge(&batch_stats);
    }
    Ok(EvalPoint {
        step: 0,
        tokens_seen: 0,
        loss: loss_sum / batches.len().max(1) as f32,
        accuracy: stats.accuracy(),
        acceptance_length: stats.simulated_acceptance_length(),
        sets: Vec::new(),
    })
}

/// The draft-vocabulary index of every target token under `head`'s vocabulary map.
pub fn target_to_draft<B: KernelBackend>(
    head: &EagleHead<B>,
    vocab_size: usize,
) -> Vec<Option<u32>> {
    let map = head.vocab_map();
    let mut table = vec![None; vocab_size];
    for draft in 0..map.draft_vocab_size() as u32 {
        if let Some(slot) = table.get_mut(map.to_target(draft) as usize) {
            *slot = Some(draft);
        }
    }
    table
}
