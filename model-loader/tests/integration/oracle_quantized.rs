//! Quality of the packed weight formats on SmolLM2-135M-Instruct: Q8_0, bfloat16 and Q4_1 weights on
//! the CPU kernels, teacher-forced over each oracle prompt and its greedy continuation in one
//! batched forward (the many-row product), and as a prefill followed by single-token decode
//! steps (the few-row kernels), must pick the f32 oracle's greedy token at no fewer than 99% of
//! the positions both ways. The share and the largest error among the oracle's top-5 logits are
//! printed. The imported model's layers came from Q4_1 blocks: quantized to Q4_1 again, they
//! must give back exactly the values they were read from.
//!
//! Needs `models/smollm2-135m-instruct` (made by `cargo xtask import-model`); without it the
//! test fails, unless `AQUILA_SKIP_REAL_MODEL=1`.

use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use aquila_model_loader::quant::WeightFormat;
use aquila_testdata::{GreedyOracle, OraclePrompt};
use burn::backend::Flex;

/// Least share of teacher-forced positions whose argmax is the oracle's greedy token.
const MIN_AGREEMENT: f64 = 0.99;

/// Agreement counts and the largest top-5 logit error.
#[derive(Default)]
struct Agreement {
    agreed: usize,
    positions: usize,
    worst_logit_error: f32,
}

impl Agreement {
    fn add(&mut self, case: &OraclePrompt, step: usize, row: &[f32]) {
        let argmax = row
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32)
            .unwrap();
        self.positions += 1;
        self.agreed += usize::from(argmax == case.greedy_ids[step]);
        let expected = &case.steps[step];
        for (&id, &want) in expected.top5_ids.iter().zip(&expected.top5_logits) {
            self.worst_logit_error = self.worst_logit_error.max((row[id as usize] - want).abs());
        }
    }

    fn check(&self, label: &str, min_share: f64) {
        let share = self.agreed as f64 / self.positions as f64;
        eprintln!(
            "{label}: top-1 agreement {}/{} ({:.1}%), largest top-5 logit error {:.3}",
            self.agreed,
            self.positions,
            100.0 * share,
            self.worst_logit_error
        );
        assert!(share >= min_share, "{label}: top-1 agreement {share:.3}");
    }
}

fn logits(
    model: &LlamaModel<Flex>,
    batch: Vec<SequenceInput>,
    cache: &mut aquila_model_loader::model::KvCache<Flex>,
) -> Vec<f32> {
    model
        .forward(&ForwardBatch::new(batch), cache, &FeatureTap::None)
        .unwrap()
        .logits
        .into_data()
        .to_vec()
        .unwrap()
}

fn check_format(format: WeightFormat) {
    let Some(dir) = aquila_testdata::real_model_dir() else {
        return;
    };
    let cases = GreedyOracle::load().prompts;
    let model = LlamaModel::<Flex>::load_in_format(&dir, format, &Default::default()).unwrap();
    let vocab = model.config().vocab_size;
    let steps = cases[0].greedy_ids.len();

    // Every prompt and its continuation in one forward.
    let mut cache = model.new_kv_cache(cases.len());
    let sequences = cases
        .iter()
        .enumerate()
        .map(|(slot, case)| {
            let mut tokens = case.prompt_ids.clone();
            tokens.extend(&case.greedy_ids[..steps - 1]);
            let first = case.prompt_ids.len() - 1;
            SequenceInput::new(slot, tokens, 0).with_logits_rows((first..first + steps).collect())
        })
        .collect();
    let all = logits(&model, sequences, &mut cache);
    let mut batched = Agreement::default();
    for (index, case) in cases.iter().enumerate() {
        for step in 0..steps {
            let row = (index * steps + step) * vocab;
            batched.add(case, step, &all[row..row + vocab]);
        }
    }
    batched.check(&format!("{format}, batched forward"), MIN_AGREEMENT);

    // Prefill, then the continuation one token per step.
    let mut cache = model.new_kv_cache(cases.len());
    let prefill = cases
        .iter()
        .enumerate()
        .map(|(slot, case)| SequenceInput::new(slot, case.prompt_ids.clone(), 0))
        .collect();
    let mut rows = logits(&model, prefill, &mut cache);
    let mut decoded = Agreement::default();
    for step in 0..steps {
        for (index, case) in cases.iter().enumerate() {
            decoded.add(case, step, &rows[index * vocab..(index + 1) * vocab]);
        }
        if step + 1 < steps {
            let decode = cases
                .iter()
                .enumerate()
                .map(|(slot, case)| {
                    SequenceInput::new(slot, vec![case.greedy_ids[step]], cache.len(slot))
                })
                .collect();
            rows = logits(&model, decode, &mut cache);
        }
    }
    decoded.check(&format!("{format}, prefill + decode"), MIN_AGREEMENT);
}

#[test]
fn q8_0_weights_agree_with_the_oracle() {
    check_format(WeightFormat::Q8_0);
}

#[test]
fn bf16_weights_agree_with_the_oracle() {
    check_format(WeightFormat::Bf16);
}

#[test]
fn q4_1_weights_agree_with_the_oracle() {
    check_format(WeightFormat::Q4_1);
}

#[test]
fn the_imported_layers_quantize_back_to_their_q4_1_blocks() {
    use aquila_model_loader::checkpoint::Checkpoint;
    use aquila_model_loader::quant::Q4_1Matrix;
    let Some(dir) = aquila_testdata::real_model_dir() else {
        return;
    };
    let checkpoint = Checkpoint::open(&dir).unwrap();
    let names: Vec<String> = checkpoint
        .names()
        .filter(|name| name.starts_with("model.layers.") && name.ends_with("proj.weight"))
        .map(str::to_string)
        .collect();
    // Seven projections in each of the 30 layers.
    assert_eq!(names.len(), 7 * 30, "{names:?}");
    let mut widened = Vec::new();
    for name in &names {
        let info = checkpoint.info(name).unwrap();
        let (rows, cols) = (info.shape[0], info.shape[1]);
        let values = checkpoint.read_f32(name).unwrap();
        let packed = Q4_1Matrix::quantize(&values, rows, cols).unwrap();
        widened.resize(cols, 0.0);
        for r in 0..rows {
            packed.dequantize_row(r, &mut widened);
            let row = &values[r * cols..][..cols];
            let differing = row
                .iter()
                .zip(&widened)
                .filter(|(a, b)| a.to_bits() != b.to_bits());
            assert_eq!(differing.count(), 0, "{name}, row {r}");
        }
    }
}

#[test]
fn a_drafters_lm_head_in_q4_1_is_kept_in_q8_0() {
    let Some(dir) = aquila_testdata::real_model_dir() else {
        return;
    };
    let model =
        LlamaModel::<Flex>::load_in_format(&dir, WeightFormat::F32, &Default::default()).unwrap();
    let bytes = |format| model.with_lm_head_packed(format).weight_bytes();
    let q8_0 = bytes(WeightFormat::Q8_0);
    // The copy's packed lm_head is counted beside the f32 table, at its format's size.
    assert!(bytes(WeightFormat::Bf16) > q8_0);
    assert_eq!(bytes(WeightFormat::Q4_1), q8_0);
}
