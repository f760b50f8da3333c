//! Seeded stochastic speculative decoding keeps the target distribution: over many seeds, the
//! first emitted token and the token emitted by verifying a draft after it follow the tiny
//! model's softmax (Pearson chi-square against probabilities computed from its logits), with
//! one-hot drafts replayed, drafts handed over with the distribution they were drawn from, and
//! drafts sampled from an EAGLE head.

use crate::common;

use aquila_engine::{
    DraftLength, DraftPick, EagleDrafter, EngineConfig, Llm, Prompt, RequestOutput, SamplingParams,
    SpeculativeConfig, SpeculativeMethod,
};
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use aquila_spec_decode::proposer::{
    ChainDraft, Draft, ProposeBatch, ProposeError, Proposer, ReplayProposer,
};
use aquila_spec_decode::sampling::{sample, RequestRng};
use burn::backend::flex::FlexDevice;
use burn::backend::Flex;
use common::spec::{eagle3_head, prompt_ids};
use common::{config, tiny_model, PROMPTS};

const SAMPLES: u64 = 20_000;

/// Softmax of each `vocab`-wide row of `logits`, in f64.
fn softmax_rows(logits: &[f32], vocab: usize) -> Vec<Vec<f64>> {
    logits
        .chunks(vocab)
        .map(|row| {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let exp: Vec<f64> = row.iter().map(|&x| (x as f64 - max).exp()).collect();
            let sum: f64 = exp.iter().sum();
            exp.into_iter().map(|e| e / sum).collect()
        })
        .collect()
}

/// The last row's logits of each sequence, each run from an empty cache.
fn last_logits(model: &LlamaModel<Flex>, sequences: &[Vec<u32>]) -> Vec<f32> {
    let mut cache = model.new_kv_cache(sequences.len());
    let batch = ForwardBatch::new(
        sequences
            .iter()
            .enumerate()
            .map(|(slot, tokens)| SequenceInput::new(slot, tokens.clone(), 0))
            .collect(),
    );
    let out = model
        .forward(&batch, &mut cache, &FeatureTap::None)
        .expect("forward");
    out.logits
        .into_data()
        .into_vec::<f32>()
        .expect("f32 logits")
}

/// Upper `1e-4` quantile of the chi-square distribution with `df` degrees of freedom
/// (Wilson–Hilferty approximation).
fn chi_square_critical(df: usize) -> f64 {
    let df = df as f64;
    let z = 3.719;
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

/// The target's distributions of the first two tokens after the first of [`PROMPTS`]: that
/// prompt's ids, `p(first)`, and for every first token `v`, `p(second | v)`.
struct TwoTokens {
    prompt: Vec<u32>,
    first: Vec<f64>,
    second: Vec<Vec<f64>>,
}

impl TwoTokens {
    fn of(model_dir: &std::path::Path) -> Self {
        let model = LlamaModel::<Flex>::load(model_dir, &FlexDevice).expect("tiny model");
        let vocab = model.config().vocab_size;
        let probe = Llm::new(config(model_dir)).unwrap();
        let prompt = match prompt_ids(&probe, &PROMPTS[..1]).remove(0) {
            Prompt::TokenIds(ids) => ids,
            _ => unreachable!("token id prompt"),
        };
        let first =
            softmax_rows(&last_logits(&model, std::slice::from_ref(&prompt)), vocab).remove(0);
        let continued: Vec<Vec<u32>> = (0..vocab as u32)
            .map(|v| [prompt.clone(), vec![v]].concat())
            .collect();
        let second = softmax_rows(&last_logits(&model, &continued), vocab);
        Self {
            prompt,
            first,
            second,
        }
    }

    /// [`SAMPLES`] seeded two-token answers to the prompt at temperature 1 from `llm`, each of
    /// whose second tokens verifies one draft, some accepted and some not.
    fn sample(&self, llm: &mut Llm) -> Vec<RequestOutput> {
        let params: Vec<SamplingParams> = (0..SAMPLES)
            .map(|seed| SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                ignore_eos: true,
                ..SamplingParams::greedy(2)
            })
            .collect();
        let prompts = vec![Prompt::TokenIds(self.prompt.clone()); SAMPLES as usize];
        let outputs = llm.generate_with_params(prompts, &params).unwrap();
        let drafted: usize = outputs.iter().map(|o| o.metrics.num_draft_tokens).sum();
        let accepted: usize = outputs.iter().map(|o| o.metrics.num_accepted_tokens).sum();
        assert_eq!(
            drafted, SAMPLES as usize,
            "every second token verifies one draft"
        );
        assert!(
            accepted > 0 && accepted < drafted,
            "accepted {accepted} of {drafted}"
        );
        outputs
    }

    /// Pearson chi-square of the (first, second) pairs of `outputs` against the target's
    /// distribution; bins expecting fewer than 5 samples are pooled into one.
    fn assert_followed_by(&self, outputs: &[RequestOutput]) {
        let mut counts = std::collections::HashMap::<(u32, u32), u64>::new();
        for out in outputs {
            assert_eq!(out.token_ids.len(), 2);
            *counts
                .entry((out.token_ids[0], out.token_ids[1]))
                .or_default() += 1;
        }
        let n = outputs.len() as f64;
        let (mut statistic, mut bins) = (0.0, 0usize);
        let (mut pooled_expected, mut pooled_observed) = (0.0, 0u64);
        for (v, (p_first, p_second)) in self.first.iter().zip(&self.second).enumerate() {
            for (t, p) in p_second.iter().enumerate() {
                let expected = n * p_first * p;
                let observed = counts.get(&(v as u32, t as u32)).copied().unwrap_or(0);
                if expected >= 5.0 {
                    statistic += (observed as f64 - expected).powi(2) / expected;
                    bins += 1;
                } else {
                    pooled_expected += expected;
                    pooled_observed += observed;
                }
            }
        }
        if pooled_expected > 0.0 {
            statistic += (pooled_observed as f64 - pooled_expected).powi(2) / pooled_expected;
            bins += 1;
        }
        assert!(bins >= 10, "too few bins ({bins}) for a meaningful test");
        let critical = chi_square_critical(bins - 1);
        assert!(
            statistic < critical,
            "chi-square {statistic:.1} over {bins} bins exceeds {critical:.1}"
        );
    }
}

#[test]
fn stochastic_speculative_output_has_the_target_distribution() {
    let model_dir = tiny_model();
    let target = TwoTokens::of(model_dir.path());
    // After every first token v, the draft replayed is the target's most likely token, so
    // drafts are accepted sometimes and rejected sometimes.
    let scripts: Vec<Vec<u32>> = target
        .second
        .iter()
        .enumerate()
        .map(|(v, p)| {
            let draft = (0..p.len()).max_by(|&a, &b| p[a].total_cmp(&p[b])).unwrap() as u32;
            [target.prompt.clone(), vec![v as u32, draft]].concat()
        })
        .collect();
    let engine_config = sampling_engine(model_dir.path(), SpeculativeConfig::custom(1));
    let mut llm =
        Llm::with_proposer(engine_config, Box::new(ReplayProposer::new(1, scripts))).unwrap();
    target.assert_followed_by(&target.sample(&mut llm));
}

/// An engine for the tiny model in `model_dir` running every sample at once, drafting one
/// token per step as `speculative` says.
fn sampling_engine(model_dir: &std::path::Path, speculative: SpeculativeConfig) -> EngineConfig {
    let mut engine_config = config(model_dir);
    engine_config.max_num_seqs = 64;
    engine_config.speculative = Some(SpeculativeConfig {
        draft_length: DraftLength::Fixed,
        ..speculative
    });
    engine_config
}

/// Drafts one token after each first token `v`, drawn from `q[v]`, and hands the engine
/// `q[v]` as the draft's distribution.
struct DrawnDrafts {
    q: Vec<Vec<f32>>,
    prompt_len: usize,
    rng: RequestRng,
}

impl Proposer<()> for DrawnDrafts {
    fn num_speculative_tokens(&self) -> usize {
        1
    }

    fn needs_target_features(&self) -> bool {
        false
    }

    fn draft(&mut self, batch: &ProposeBatch<'_, ()>) -> Result<Vec<Draft>, ProposeError> {
        Ok(batch
            .requests
            .iter()
            .map(|request| match request.tokens.get(self.prompt_len) {
                Some(&first) if request.max_draft_tokens > 0 => {
                    let q = &self.q[first as usize];
                    Draft::Chain(ChainDraft {
                        tokens: vec![sample(q, &mut self.rng)],
                        probs: Some(q.clone()),
                        ..ChainDraft::default()
                    })
                }
                _ => Draft::empty(),
            })
            .collect())
    }

    fn release(&mut self, _request_id: u64) {}
}

#[test]
fn drafts_with_their_distributions_keep_the_target_distribution() {
    let model_dir = tiny_model();
    let target = TwoTokens::of(model_dir.path());
    // q: the target's distribution flattened (square roots, renormalized), so that drafts
    // are accepted often but not always, and verified with min(1, p/q).
    let q: Vec<Vec<f32>> = target
        .second
        .iter()
        .map(|p| {
            let root: Vec<f64> = p.iter().map(|x| x.sqrt()).collect();
            let sum: f64 = root.iter().sum();
            root.iter().map(|x| (x / sum) as f32).collect()
        })
        .collect();
    let drafter = DrawnDrafts {
        q,
        prompt_len: target.prompt.len(),
        rng: RequestRng::new(5),
    };
    let engine_config = sampling_engine(model_dir.path(), SpeculativeConfig::custom(1));
    let mut llm = Llm::with_proposer(engine_config, Box::new(drafter)).unwrap();
    target.assert_followed_by(&target.sample(&mut llm));
}

#[test]
fn drafts_sampled_from_an_eagle_head_keep_the_target_distribution() {
    let model_dir = tiny_model();
    let target = TwoTokens::of(model_dir.path());
    let head = eagle3_head(model_dir.path());
    // The head's own drafts only (no prompt lookup), sampled at each request's temperature.
    let drafter = EagleDrafter {
        lookup: None,
        draft_pick: DraftPick::Sample,
        ..EagleDrafter::new(head.path())
    };
    let engine_config = sampling_engine(
        model_dir.path(),
        SpeculativeConfig::new(SpeculativeMethod::Eagle3(drafter), 1),
    );
    let mut llm = Llm::new(engine_config).unwrap();
    target.assert_followed_by(&target.sample(&mut llm));
}
