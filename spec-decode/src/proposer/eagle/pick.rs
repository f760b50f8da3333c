//! Reading draft logits back from the device.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// The argmax column of every row of `logits` (`[rows, vocab]`), computed on the device.
pub(super) fn argmax_rows<B: Backend>(logits: Tensor<B, 2>) -> Vec<u32> {
    logits
        .argmax(1)
        .into_data()
        .iter::<i64>()
        .map(|id| id as u32)
        .collect()
}

/// The rows of `logits` (`[rows, vocab]`) as `f32` vectors.
pub(super) fn float_rows<B: Backend>(logits: Tensor<B, 2>) -> Vec<Vec<f32>> {
    let [_, vocab] = logits.dims();
    let values: Vec<f32> = logits.into_data().iter::<f32>().collect();
    values.chunks(vocab.max(1)).map(<[f32]>::to_vec).collect()
}
