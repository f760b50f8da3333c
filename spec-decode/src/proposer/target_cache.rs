//! [`TargetKeyValues`]: the target's KV cache as a drafting call may read it.

use std::fmt;
use std::ops::Range;

use super::ProposeError;

/// Read access to the keys and values the target computed for the requests of a
/// [`ProposeBatch`](super::ProposeBatch), valid for the committed rows of each request (the
/// rows before its next root).
///
/// A draft model that is the target itself in other weights (its Q4_1 copy) has the target's
/// layers, so the target's keys and values are what its own forward over the same tokens
/// would compute, at the target's precision: such a proposer copies them instead of running
/// the prompt and every committed row through the draft model. Other proposers ignore it.
///
/// `F` is the feature type of the batch (burn: `Tensor<B, 2>`).
pub trait TargetKeyValues<F>: fmt::Debug + Sync {
    /// `[layers, kv_heads, head_dim]` of the target's cache.
    fn shape(&self) -> [usize; 3];

    /// The keys and values of positions `rows` of request `request_id` in `layer`, each
    /// `[kv_heads * rows.len(), head_dim]`: head 0's rows in order, then head 1's, and so on
    /// (a `[kv_heads, rows, head_dim]` tensor with its first two dimensions merged).
    fn layer_rows(
        &self,
        request_id: u64,
        layer: usize,
        rows: Range<usize>,
    ) -> Result<(F, F), ProposeError>;
}

#[cfg(feature = "burn")]
pub use kv_cache_view::TargetKvCache;

#[cfg(feature = "burn")]
mod kv_cache_view {
    use std::ops::Range;

    use aquila_model_loader::config::LlamaConfig;
    use aquila_model_loader::model::KvCache;
    use burn::tensor::backend::Backend;
    use burn::tensor::Tensor;

    use super::{ProposeError, TargetKeyValues};

    /// The target's [`KvCache`] for the requests of one drafting call, each in its slot.
    #[derive(Debug)]
    pub struct TargetKvCache<'a, B: Backend> {
        cache: &'a KvCache<B>,
        /// `[layers, kv_heads, head_dim]`.
        shape: [usize; 3],
        /// The slot of each request of the call.
        slots: Vec<(u64, usize)>,
    }

    impl<'a, B: Backend> TargetKvCache<'a, B> {
        /// The cache of a target configured as `target`, for requests in the slots `slots`
        /// names (`(request_id, slot)`).
        pub fn new(cache: &'a KvCache<B>, target: &LlamaConfig, slots: Vec<(u64, usize)>) -> Self {
            Self {
                cache,
                shape: [
                    target.num_hidden_layers,
                    target.num_key_value_heads,
                    target.head_dim,
                ],
                slots,
            }
        }
    }

    impl<B: Backend> TargetKeyValues<Tensor<B, 2>> for TargetKvCache<'_, B> {
        fn shape(&self) -> [usize; 3] {
            self.shape
        }

        fn layer_rows(
            &self,
            request_id: u64,
            layer: usize,
            rows: Range<usize>,
        ) -> Result<(Tensor<B, 2>, Tensor<B, 2>), ProposeError> {
            let error = |reason: String| ProposeError::TargetCache { request_id, reason };
            let &(_, slot) = self
                .slots
                .iter()
                .find(|(id, _)| *id == request_id)
                .ok_or_else(|| error("the request is not in this drafting call".into()))?;
            let [layers, kv_heads, head_dim] = self.shape;
            if layer >= layers || layer >= self.cache.num_layers() {
                return Err(error(format!("layer {layer} of {layers}")));
            }
            let (keys, values) = self.cache.rows(layer, slot, rows.clone()).ok_or_else(|| {
                error(format!(
                    "rows {rows:?} are not all cached (the slot holds {})",
                    self.cache.len(slot)
                ))
            })?;
            let merged = [kv_heads * rows.len(), head_dim];
            Ok((keys.reshape(merged), values.reshape(merged)))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use aquila_model_loader::fixtures::llama::TinyLlamaOptions;
        use burn::backend::Flex;
        use burn::tensor::TensorData;

        type B = Flex;

        /// The tiny model's config, and a cache of its shape whose slot 1 holds 3 rows in
        /// every layer: element `[h, r, d]` of keys is `100 h + r`, of values its negation.
        fn cache() -> (LlamaConfig, KvCache<B>) {
            let config = TinyLlamaOptions::default().config();
            let (heads, dim) = (config.num_key_value_heads, config.head_dim);
            let mut cache = KvCache::new(config.num_hidden_layers, 2);
            let keys: Vec<f32> = (0..heads)
                .flat_map(|h| (0..3).flat_map(move |r| vec![(100 * h + r) as f32; dim]))
                .collect();
            let values: Vec<f32> = keys.iter().map(|v| -v).collect();
            let device = Default::default();
            let tensor =
                |data: Vec<f32>| Tensor::from_data(TensorData::new(data, [heads, 3, dim]), &device);
            for layer in 0..config.num_hidden_layers {
                cache.append(layer, 1, tensor(keys.clone()), tensor(values.clone()));
            }
            cache.advance(1, 3);
            (config, cache)
        }

        #[test]
        fn rows_come_head_by_head_from_the_requests_slot() {
            let (config, cache) = cache();
            let view = TargetKvCache::new(&cache, &config, vec![(7, 1)]);
            let heads = config.num_key_value_heads;
            let (keys, values) = view.layer_rows(7, 1, 1..3).unwrap();
            assert_eq!(keys.dims(), [heads * 2, config.head_dim]);
            let first_column =
                |t: Tensor<B, 2>| -> Vec<f32> { t.narrow(1, 0, 1).into_data().to_vec().unwrap() };
            let expected: Vec<f32> = (0..heads)
                .flat_map(|h| [(100 * h + 1) as f32, (100 * h + 2) as f32])
                .collect();
            assert_eq!(first_column(keys), expected);
            let negated: Vec<f32> = expected.iter().map(|v| -v).collect();
            assert_eq!(first_column(values), negated);
        }

        #[test]
        fn rows_it_cannot_give_are_errors_naming_the_request() {
            let (config, cache) = cache();
            let view = TargetKvCache::new(&cache, &config, vec![(7, 1)]);
            let err = view.layer_rows(8, 0, 0..1).unwrap_err();
            assert!(err.to_string().contains("request 8"), "{err}");
            let err = view.layer_rows(7, 0, 2..4).unwrap_err();
            assert!(err.to_string().contains("not all cached"), "{err}");
            let layers = config.num_hidden_layers;
            let err = view.layer_rows(7, layers, 0..1).unwrap_err();
            assert!(
                err.to_string().contains(&format!("layer {layers}")),
                "{err}"
            );
        }
    }
}
