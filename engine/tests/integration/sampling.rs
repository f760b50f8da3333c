//! Seeded sampling is reproducible whatever the batch, and temperature, top-k, top-p and min-p
//! sample the distribution they define over the model's logits.

use crate::common;

use aquila_engine::{
    DraftLength, DraftPick, EagleDrafter, Llm, Prompt, SamplingParams, SpeculativeConfig,
    SpeculativeMethod,
};
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use burn::backend::flex::FlexDevice;
use burn::backend::Flex;
use common::spec::eagle3_head;
use common::{llm, llm_with, tiny_model, token_ids, PROMPTS};

fn seeded(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        seed: Some(seed),
        ignore_eos: true,
        max_tokens: 16,
        ..SamplingParams::default()
    }
}

#[test]
fn seeded_sampling_is_reproducible_across_runs_and_batch_compositions() {
    let model = tiny_model();
    let alone = llm(model.path()).generate(PROMPTS[0], &seeded(7)).unwrap();
    let again = llm(model.path()).generate(PROMPTS[0], &seeded(7)).unwrap();
    assert_eq!(token_ids(&alone), token_ids(&again));

    // The same request in the middle of a batch of other seeded and unseeded requests, with
    // chunked prefill and fewer slots: same tokens.
    let mut params: Vec<SamplingParams> =
        (0..PROMPTS.len() as u64).map(|s| seeded(100 + s)).collect();
    params[2] = SamplingParams {
        seed: None,
        ..seeded(0)
    };
    params.insert(3, seeded(7));
    let mut prompts: Vec<&str> = PROMPTS.to_vec();
    prompts.insert(3, PROMPTS[0]);
    let mut busy = llm_with(model.path(), |c| {
        c.max_num_batched_tokens = 5;
        c.max_num_seqs = 3;
    });
    let batch = busy.generate_with_params(prompts, &params).unwrap();
    assert_eq!(batch[3].token_ids, alone[0].token_ids);

    let other_seed = llm(model.path()).generate(PROMPTS[0], &seeded(8)).unwrap();
    assert_ne!(
        token_ids(&other_seed),
        token_ids(&alone),
        "seeds give different streams"
    );
}

/// An engine on the tiny model whose EAGLE-3 head (random weights, in `head`) drafts two
/// tokens sampled at each request's temperature, with `max_num_seqs` requests at a time.
fn sampled_eagle_llm(model: &std::path::Path, head: &std::path::Path, max_num_seqs: usize) -> Llm {
    let drafter = EagleDrafter {
        lookup: None,
        draft_pick: DraftPick::Sample,
        ..EagleDrafter::new(head)
    };
    let speculative = SpeculativeConfig {
        draft_length: DraftLength::Fixed,
        ..SpeculativeConfig::new(SpeculativeMethod::Eagle3(drafter), 2)
    };
    llm_with(model, |c| {
        c.speculative = Some(speculative);
        c.max_num_seqs = max_num_seqs;
    })
}

/// Seeded sampling hot enough that the random head's drafts are accepted now and then, so
/// that which draft is drawn shows in the tokens.
fn hot(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 4.0,
        ..seeded(seed)
    }
}

#[test]
fn seeded_sampling_with_sampled_eagle_drafts_is_reproducible_across_runs() {
    let model = tiny_model();
    let head = eagle3_head(model.path());
    let run = |seed| {
        sampled_eagle_llm(model.path(), head.path(), 8)
            .generate(PROMPTS[0], &hot(seed))
            .unwrap()
            .remove(0)
    };
    let first = run(7);
    let metrics = &first.metrics;
    assert!(
        metrics.num_accepted_tokens > 0 && metrics.num_accepted_tokens < metrics.num_draft_tokens,
        "accepted {} of {} drafts",
        metrics.num_accepted_tokens,
        metrics.num_draft_tokens
    );
    assert_eq!(run(7).token_ids, first.token_ids);
    assert_ne!(
        run(8).token_ids,
        first.token_ids,
        "seeds give different streams"
    );
}

/// The head's Q8_0 projections (its default format on the CPU) give each row the same bits
/// whatever the rows beside it on CPUs with an integer Q8_0 kernel (AVX2 or AVX-512 VNNI), so the drafts a seeded request samples, and with them its
/// tokens, do not depend on the requests decoded with it (here prefilled together: more rows
/// than a decode step's kernel takes).
#[test]
fn seeded_sampling_with_sampled_eagle_drafts_is_reproducible_whatever_the_batch() {
    let model = tiny_model();
    let head = eagle3_head(model.path());
    let alone = sampled_eagle_llm(model.path(), head.path(), 1)
        .generate(PROMPTS[0], &hot(7))
        .unwrap()
        .remove(0);
    let prompts = vec![PROMPTS[1], PROMPTS[2], PROMPTS[0], PROMPTS[3]];
    let params = vec![hot(100), hot(101), hot(7), hot(102)];
    let batch = sampled_eagle_llm(model.path(), head.path(), 4)
        .generate_with_params(prompts, &params)
        .unwrap();
    let metrics = &batch[2].metrics;
    assert!(
        metrics.num_accepted_tokens > 0 && metrics.num_accepted_tokens < metrics.num_draft_tokens,
        "accepted {} of {} drafts",
        metrics.num_accepted_tokens,
        metrics.num_draft_tokens
    );
    assert_eq!(batch[2].token_ids, alone.token_ids);
}

#[test]
fn unseeded_requests_follow_the_engine_seed() {
    let model = tiny_model();
    let params = SamplingParams {
        seed: None,
        ..seeded(0)
    };
    let first = llm(model.path()).generate(PROMPTS, &params).unwrap();
    let second = llm(model.path()).generate(PROMPTS, &params).unwrap();
    assert_eq!(token_ids(&first), token_ids(&second));
    let reseeded = llm_with(model.path(), |c| c.seed = 1)
        .generate(PROMPTS, &params)
        .unwrap();
    assert_ne!(token_ids(&first), token_ids(&reseeded));
}

/// The logits of the token after `prompt`, straight from the model.
fn next_token_logits(model_dir: &std::path::Path, prompt: &[u32]) -> Vec<f32> {
    let model = LlamaModel::<Flex>::load(model_dir, &FlexDevice).unwrap();
    let mut kv = model.new_kv_cache(1);
    let batch = ForwardBatch {
        sequences: vec![SequenceInput {
            slot: 0,
            tokens: prompt.to_vec(),
            positions: (0..prompt.len()).collect(),
            logits_rows: vec![prompt.len() - 1],
            mask: None,
            history_mask: None,
        }],
    };
    let output = model.forward(&batch, &mut kv, &FeatureTap::None).unwrap();
    output
        .logits
        .into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .unwrap()
}

/// The distribution `params` defines over `logits`, computed directly in f64: temperature,
/// then min-p, top-k and top-p (each keeps ties at its boundary), then normalization.
fn expected_distribution(logits: &[f32], params: &SamplingParams) -> Vec<f64> {
    let scaled: Vec<f64> = logits
        .iter()
        .map(|&x| f64::from(x) / f64::from(params.temperature))
        .collect();
    let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut probs: Vec<f64> = scaled.iter().map(|&s| (s - max).exp()).collect();
    let total: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= total);
    let mut sorted = probs.clone();
    sorted.sort_by(|a, b| b.partial_cmp(a).unwrap());
    let p_max = sorted[0];
    let mut cut = f64::from(params.min_p) * p_max;
    if let Some(k) = params.top_k {
        cut = cut.max(sorted[k.min(sorted.len()) - 1]);
    }
    let kept: Vec<f64> = sorted.iter().copied().filter(|&p| p >= cut).collect();
    let kept_total: f64 = kept.iter().sum();
    if params.top_p < 1.0 {
        let mut cumulative = 0.0;
        for &p in &kept {
            cumulative += p / kept_total;
            if cumulative >= f64::from(params.top_p) {
                cut = cut.max(p);
                break;
            }
        }
    }
    probs.iter_mut().for_each(|p| {
        if *p < cut {
            *p = 0.0;
        }
    });
    let total: f64 = probs.iter().sum();
    probs.iter().map(|p| p / total).collect()
}

/// Pearson's χ² statistic of `counts` against `expected` probabilities (bins with an expected
/// count below 5 pooled) and its degrees of freedom.
fn chi_square(counts: &[usize], expected: &[f64], n: usize) -> (f64, usize) {
    let mut bins = Vec::new();
    let (mut pooled_count, mut pooled_expected) = (0.0, 0.0);
    for (&count, &p) in counts.iter().zip(expected) {
        let e = p * n as f64;
        if e >= 5.0 {
            bins.push((count as f64, e));
        } else {
            pooled_count += count as f64;
            pooled_expected += e;
        }
    }
    if pooled_expected > 0.0 {
        bins.push((pooled_count, pooled_expected));
    }
    let statistic = bins.iter().map(|(o, e)| (o - e) * (o - e) / e).sum();
    (statistic, bins.len().saturating_sub(1))
}

#[test]
fn sampling_filters_draw_from_the_distribution_they_define() {
    const DRAWS: usize = 1500;
    let model = tiny_model();
    let mut llm = llm_with(model.path(), |c| {
        c.max_num_seqs = 256;
        c.max_num_batched_tokens = 4096;
    });
    let prompt = llm.tokenizer().encode(PROMPTS[1], true).unwrap();
    let logits = next_token_logits(model.path(), &prompt);
    // The tiny model is confident; a temperature that flattens its distribution until the top
    // token has at most 40% leaves every filter something to cut.
    let temperature = [1.0f32, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0]
        .into_iter()
        .find(|&t| {
            let probe = SamplingParams {
                temperature: t,
                ..SamplingParams::default()
            };
            let top = expected_distribution(&logits, &probe)
                .into_iter()
                .fold(0.0, f64::max);
            top <= 0.4
        })
        .expect("some temperature flattens the distribution");
    let base = SamplingParams {
        temperature,
        max_tokens: 1,
        ..SamplingParams::default()
    };
    // A min-p that keeps about the four most likely tokens.
    let mut ranked = expected_distribution(&logits, &base);
    ranked.sort_by(|a, b| b.partial_cmp(a).unwrap());
    let min_p = (0.9 * ranked[3] / ranked[0]) as f32;
    let cases = [
        ("temperature", base.clone()),
        (
            "top_k",
            SamplingParams {
                top_k: Some(5),
                ..base.clone()
            },
        ),
        (
            "top_p",
            SamplingParams {
                top_p: 0.6,
                ..base.clone()
            },
        ),
        (
            "min_p",
            SamplingParams {
                min_p,
                ..base.clone()
            },
        ),
    ];
    for (name, params) in cases {
        let expected = expected_distribution(&logits, &params);
        let support = expected.iter().filter(|&&p| p > 0.0).count();
        let all_params: Vec<SamplingParams> = (0..DRAWS as u64)
            .map(|seed| SamplingParams {
                seed: Some(seed),
                ..params.clone()
            })
            .collect();
        let prompts = vec![Prompt::TokenIds(prompt.clone()); DRAWS];
        let outputs = llm.generate_with_params(prompts, &all_params).unwrap();
        let mut counts = vec![0usize; logits.len()];
        for output in &outputs {
            counts[output.token_ids[0] as usize] += 1;
        }
        for (token, &count) in counts.iter().enumerate() {
            assert!(
                count == 0 || expected[token] > 0.0,
                "{name}: token {token} sampled {count} times but the filter removes it"
            );
        }
        let (statistic, dof) = chi_square(&counts, &expected, DRAWS);
        // Mean dof, standard deviation sqrt(2 dof): 6 standard deviations is a bound the
        // correct sampler exceeds with negligible probability (the seeds are fixed anyway).
        let bound = dof as f64 + 6.0 * (2.0 * dof as f64).sqrt() + 10.0;
        assert!(
            statistic < bound,
            "{name} (support {support}): chi-square {statistic:.1} with {dof} dof exceeds {bound:.1}"
        );
        assert!(support > 1, "{name}: the case must leave a choice");
    }
}
