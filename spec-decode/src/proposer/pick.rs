//! Reading draft logits back from the device, and picking each drafting request's token.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::slots::SlotTable;
use super::{DraftSampling, ProposeRequest};
use crate::sampling::top_logprobs;

/// One draft token picked from a row of drafter logits, in the logits' columns.
pub(super) struct Pick {
    /// The column picked.
    pub token: u32,
    /// The drafter's probability of it.
    pub confidence: f32,
    /// The distribution it was sampled from (sampled drafting), over the logits' columns.
    pub probs: Option<Vec<f32>>,
}

/// The draft token of every active request (`active[a]` indexes `requests` and owns row `a` of
/// `logits`): the argmax, or, where `sampling` samples the request's drafts, a draw from the
/// request's stream in `slots`. Greedy batches stay on the device but for one id and one
/// probability per row.
///
/// # Panics
/// When a sampled request holds no stream in `slots` (every proposer gives one to each request
/// it samples for, from [`DraftSampling::stream_for`]).
pub(super) fn pick_rows<B: Backend>(
    logits: Tensor<B, 2>,
    active: &[usize],
    requests: &[ProposeRequest<'_>],
    sampling: DraftSampling,
    slots: &mut SlotTable,
) -> Vec<Pick> {
    let temperatures: Vec<Option<f32>> = active
        .iter()
        .map(|&i| sampling.temperature_for(requests[i].temperature))
        .collect();
    if temperatures.iter().all(Option::is_none) {
        let confidences = top_probabilities(logits.clone());
        return argmax_rows(logits)
            .into_iter()
            .zip(confidences)
            .map(|(token, confidence)| Pick {
                token,
                confidence,
                probs: None,
            })
            .collect();
    }
    active
        .iter()
        .zip(float_rows(logits))
        .zip(temperatures)
        .map(|((&i, row), temperature)| {
            let Some(temperature) = temperature else {
                let (token, confidence) = argmax_row(&row);
                return Pick {
                    token,
                    confidence,
                    probs: None,
                };
            };
            let rng = slots
                .get_mut(requests[i].request_id)
                .and_then(|state| state.rng.as_mut())
                .expect("sampled drafting gives every request a stream");
            let (token, probs) = DraftSampling::sample_row(temperature, &row, rng);
            Pick {
                token,
                confidence: probs[token as usize],
                probs: Some(probs),
            }
        })
        .collect()
}

/// The argmax column of every row of `logits` (`[rows, vocab]`), computed on the device.
pub(super) fn argmax_rows<B: Backend>(logits: Tensor<B, 2>) -> Vec<u32> {
    logits
        .argmax(1)
        .into_data()
        .iter::<i64>()
        .map(|id| id as u32)
        .collect()
}

/// The softmax probability of the largest column of every row of `logits` (`[rows, vocab]`):
/// the head's confidence in its argmax, computed on the device.
pub(super) fn top_probabilities<B: Backend>(logits: Tensor<B, 2>) -> Vec<f32> {
    let shifted = logits.clone() - logits.max_dim(1);
    shifted
        .exp()
        .sum_dim(1)
        .recip()
        .into_data()
        .iter::<f32>()
        .collect()
}

/// The argmax column of one row read back to the host (ties: the lower column, as on the
/// device) and its softmax probability.
pub(super) fn argmax_row(row: &[f32]) -> (u32, f32) {
    match top_logprobs(row, 1).first() {
        Some(&(id, logprob)) => (id, logprob.exp()),
        None => (0, 0.0),
    }
}

/// The rows of `logits` (`[rows, vocab]`) as `f32` vectors.
pub(super) fn float_rows<B: Backend>(logits: Tensor<B, 2>) -> Vec<Vec<f32>> {
    let [_, vocab] = logits.dims();
    let values: Vec<f32> = logits.into_data().iter::<f32>().collect();
    values.chunks(vocab.max(1)).map(<[f32]>::to_vec).collect()
}

/// The `k` largest columns of every row of `logits` (`[rows, vocab]`) with their
/// log-probabilities under the row's softmax, best first (ties: lower column first); at most
/// `vocab` per row. The rows are read back once and ranked on the host by the sampling
/// pipeline's [`top_logprobs`]: `k` is a handful, and a device-side sort of every
/// draft-vocabulary row cost more than the head's own forward.
pub(super) fn top_k_rows<B: Backend>(logits: Tensor<B, 2>, k: usize) -> Vec<Vec<(u32, f32)>> {
    let rows = logits.dims()[0];
    if rows == 0 || k == 0 {
        return vec![Vec::new(); rows];
    }
    float_rows(logits)
        .iter()
        .map(|row| top_logprobs(row, k))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    type B = burn::backend::Flex;

    #[test]
    fn top_k_rows_rank_columns_and_normalize_each_row() {
        let logits = Tensor::<B, 2>::from_floats(
            [[0.0, 3.0, 1.0, 2.0], [5.0, 5.5, -1.0, 0.0]],
            &Default::default(),
        );
        let top = top_k_rows(logits.clone(), 2);
        let ids: Vec<Vec<u32>> = top
            .iter()
            .map(|row| row.iter().map(|t| t.0).collect())
            .collect();
        assert_eq!(ids, vec![vec![1, 3], vec![1, 0]]);
        let lse = (0f32.exp() + 3f32.exp() + 1f32.exp() + 2f32.exp()).ln();
        assert!((top[0][0].1 - (3.0 - lse)).abs() < 1e-5);
        assert!((top[0][1].1 - (2.0 - lse)).abs() < 1e-5);
        assert_eq!(argmax_rows(logits.clone()), vec![1, 1]);
        let (id, probability) = argmax_row(&float_rows(logits.clone())[0]);
        assert_eq!(id, 1);
        assert!((probability - (3.0 - lse).exp()).abs() < 1e-6);
        let top = top_probabilities(logits.clone());
        assert!((top[0] - (3.0 - lse).exp()).abs() < 1e-6);
        let second = 1.0 / (1.0 + (-0.5f32).exp() + (-6.5f32).exp() + (-5.5f32).exp());
        assert!((top[1] - second).abs() < 1e-6);
        assert_eq!(top_k_rows(logits.clone(), 9)[0].len(), 4, "at most vocab");
        assert_eq!(top_k_rows(logits, 0), vec![Vec::new(), Vec::new()]);
        let tied = Tensor::<B, 2>::from_floats([[1.0, 2.0, 2.0, 0.5]], &Default::default());
        let ids: Vec<u32> = top_k_rows(tied, 3)[0].iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![1, 2, 0], "ties rank the lower column first");
    }
}
