//! Recording self-distillation data: one target forward over prompt + response per sequence,
//! keeping the tapped features and the greedy next token at every position.

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};

use super::{DistillSequence, FeatureShard, TrainError};

/// The name a shard records for `tap` (`last_hidden`, `aux:2,15,27`).
pub fn tap_name(tap: &FeatureTap) -> String {
    match tap {
        FeatureTap::None => "none".to_string(),
        FeatureTap::LastHidden => "last_hidden".to_string(),
        FeatureTap::AuxLayers(ids) => {
            let ids: Vec<String> = ids.iter().map(usize::to_string).collect();
            format!("aux:{}", ids.join(","))
        }
    }
}

/// Runs `target` over every sequence (batched up to `max_batch_tokens` rows per forward; a
/// longer sequence runs alone) and returns a shard with the `tap` features and the argmax of
/// the logits at every position.
pub fn record_shard<B: KernelBackend>(
    target: &LlamaModel<B>,
    tap: &FeatureTap,
    sequences: &[DistillSequence],
    max_batch_tokens: usize,
) -> Result<FeatureShard, TrainError> {
    if matches!(tap, FeatureTap::None) {
        return Err(TrainError::Config("recording needs a feature tap".into()));
    }
    let config = target.config();
    let mut shard = FeatureShard::new(tap.feature_dim(config.hidden_size), tap_name(tap));
    for group in pack_by_tokens(sequences, max_batch_tokens) {
        let batch = ForwardBatch::new(
            group
                .iter()
                .enumerate()
                .map(|(slot, s)| SequenceInput::new(slot, s.tokens.clone(), 0).with_all_logits())
                .collect(),
        );
        let mut cache = target.new_kv_cache(group.len());
        let output = target.forward(&batch, &mut cache, tap)?;
        let argmax: Vec<u32> = output
            .logits
            .argmax(1)
            .into_data()
            .convert::<i64>()
            .to_vec::<i64>()
            .map_err(|e| TrainError::Data(format!("{e:?}")))?
            .into_iter()
            .map(|t| t as u32)
            .collect();
        let features: Vec<f32> = output
            .features
            .expect("a tap returns features")
            .into_data()
            .convert::<f32>()
            .to_vec()
            .map_err(|e| TrainError::Data(format!("{e:?}")))?;
        let width = shard.feature_width;
        let mut row = 0;
        for sequence in group {
            let n = sequence.tokens.len();
            shard.push(
                sequence,
                &features[row * width..(row + n) * width],
                &argmax[row..row + n],
            )?;
            row += n;
        }
    }
    Ok(shard)
}

/// Consecutive groups of sequences with at most `max_tokens` tokens each (a longer sequence
/// forms a group alone).
fn pack_by_tokens(sequences: &[DistillSequence], max_tokens: usize) -> Vec<&[DistillSequence]> {
    let mut groups = Vec::new();
    let (mut start, mut tokens) = (0, 0);
    for (i, sequence) in sequences.iter().enumerate() {
        let n = sequence.tokens.len();
        if i > start && tokens + n > max_tokens {
            groups.push(&sequences[start..i]);
            (start, tokens) = (i, 0);
        }
        tokens += n;
    }
    if start < sequences.len() {
        groups.push(&sequences[start..]);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_sequences_by_token_budget() {
        let seq = |n: usize| DistillSequence {
            tokens: vec![1; n],
            prompt_len: 1,
        };
        let sequences = vec![seq(3), seq(3), seq(5), seq(1)];
        let groups: Vec<usize> = pack_by_tokens(&sequences, 6)
            .iter()
            .map(|g| g.len())
            .collect();
        assert_eq!(groups, vec![2, 2]);
        let groups: Vec<usize> = pack_by_tokens(&sequences, 2)
            .iter()
            .map(|g| g.len())
            .collect();
        assert_eq!(groups, vec![1, 1, 1, 1]);
    }

    #[test]
    fn names_taps() {
        assert_eq!(tap_name(&FeatureTap::LastHidden), "last_hidden");
        assert_eq!(tap_name(&FeatureTap::AuxLayers(vec![1, 5])), "aux:1,5");
    }
}
