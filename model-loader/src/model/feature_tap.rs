//! `FeatureTap`: which hidden states a forward pass returns besides logits (the features
//! EAGLE drafters consume).

use super::ModelError;

/// Hidden states to return from a forward pass, one row per new token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FeatureTap {
    /// No features.
    #[default]
    None,
    /// The last hidden state after the final norm (the lm_head input): EAGLE-1 features,
    /// `hidden_size` wide.
    LastHidden,
    /// The residual stream entering each listed layer (un-normalized), concatenated from low
    /// to high layer: EAGLE-3 features, `ids.len() * hidden_size` wide. Ids must be strictly
    /// increasing and below the number of layers.
    AuxLayers(Vec<usize>),
}

impl FeatureTap {
    /// Checks the tap against a model with `num_layers` layers.
    pub fn validate(&self, num_layers: usize) -> Result<(), ModelError> {
        let FeatureTap::AuxLayers(ids) = self else {
            return Ok(());
        };
        if ids.is_empty() {
            return Err(ModelError::InvalidTap {
                message: "no auxiliary layer".to_string(),
            });
        }
        if let Some(&bad) = ids.iter().find(|&&id| id >= num_layers) {
            return Err(ModelError::InvalidTap {
                message: format!("layer {bad} does not exist (the model has {num_layers})"),
            });
        }
        if ids.windows(2).any(|w| w[0] >= w[1]) {
            return Err(ModelError::InvalidTap {
                message: format!("layers {ids:?} are not strictly increasing"),
            });
        }
        Ok(())
    }

    /// Width of one feature row for a model of width `hidden_size` (0 for `None`).
    pub fn feature_dim(&self, hidden_size: usize) -> usize {
        match self {
            FeatureTap::None => 0,
            FeatureTap::LastHidden => hidden_size,
            FeatureTap::AuxLayers(ids) => ids.len() * hidden_size,
        }
    }

    /// Whether the residual stream entering layer `layer` is captured.
    pub(crate) fn captures_layer(&self, layer: usize) -> bool {
        matches!(self, FeatureTap::AuxLayers(ids) if ids.contains(&layer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_aux_layers() {
        assert!(FeatureTap::AuxLayers(vec![0, 2, 3]).validate(4).is_ok());
        assert!(FeatureTap::AuxLayers(vec![0, 4]).validate(4).is_err());
        assert!(FeatureTap::AuxLayers(vec![2, 1]).validate(4).is_err());
        assert!(FeatureTap::AuxLayers(vec![1, 1]).validate(4).is_err());
        assert!(FeatureTap::AuxLayers(vec![]).validate(4).is_err());
        assert!(FeatureTap::LastHidden.validate(1).is_ok());
    }

    #[test]
    fn feature_width() {
        assert_eq!(FeatureTap::None.feature_dim(8), 0);
        assert_eq!(FeatureTap::LastHidden.feature_dim(8), 8);
        assert_eq!(FeatureTap::AuxLayers(vec![0, 1, 3]).feature_dim(8), 24);
    }
}
