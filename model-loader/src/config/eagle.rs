//! `EagleConfig`: the `config.json` of an EAGLE-1 or EAGLE-3 draft head.
//!
//! Both are one-layer Llama configs with extra keys. EAGLE-1 adds `bias` (the `fc` bias;
//! absent means true) and optionally `qkv_bias`. EAGLE-3 adds `draft_vocab_size`,
//! `target_hidden_size`, the auxiliary layer ids (top-level
//! `eagle_aux_hidden_state_layer_ids` or `eagle_config.eagle_aux_hidden_state_layer_ids`),
//! `eagle_config.use_aux_hidden_state` and `norm_before_residual`.

use super::fields::{parse_json_object, read_json_object, Fields};
use super::llama::{LlamaConfig, ModelType};
use super::ConfigError;
use std::path::{Path, PathBuf};

/// The config of an EAGLE draft head.
#[derive(Debug, Clone, PartialEq)]
pub enum EagleConfig {
    /// An EAGLE-1 head (`fc` over `[embedding, feature]`, one decoder layer without input norm).
    Eagle1(Eagle1Config),
    /// An EAGLE-3 head (`fc` over auxiliary target features, `midlayer`, own norm and lm_head).
    Eagle3(Eagle3Config),
}

/// The config of an EAGLE-1 head.
#[derive(Debug, Clone, PartialEq)]
pub struct Eagle1Config {
    /// The draft decoder's architecture (`num_hidden_layers` is 1 for every published head).
    pub layer: LlamaConfig,
    /// The `bias` key: `Some(explicit)` or `None` when absent (the reference then defaults to
    /// true). Use [`Eagle1Config::resolve_fc_bias`] with the checkpoint's contents.
    pub fc_bias: Option<bool>,
    /// The file the config was read from (for error messages).
    pub origin: PathBuf,
}

/// The config of an EAGLE-3 head.
#[derive(Debug, Clone, PartialEq)]
pub struct Eagle3Config {
    /// The draft decoder's architecture: `num_hidden_layers` counts the midlayer and the
    /// standard decoder layers after it (one for the usual head).
    pub layer: LlamaConfig,
    /// Size of the draft lm_head's vocabulary (`draft_vocab_size`, default `vocab_size`).
    pub draft_vocab_size: usize,
    /// `target_hidden_size`, when the target is wider or narrower than the draft.
    pub target_hidden_size: Option<usize>,
    /// Explicit auxiliary target layers (residual stream entering each layer), if the config
    /// names them; otherwise the target's defaults apply.
    pub aux_layer_ids: Option<Vec<usize>>,
    /// `eagle_config.use_aux_hidden_state` (default true); false means the head consumes the
    /// target's last hidden state like EAGLE-1 and has no `fc`.
    pub use_aux_hidden_state: bool,
    /// `norm_before_residual`: the residual is the normed hidden input (default false).
    pub norm_before_residual: bool,
}

impl EagleConfig {
    /// Reads a draft-head `config.json` and detects its kind: EAGLE-3 when the architecture
    /// name contains `Eagle3` or any EAGLE-3 key is present, EAGLE-1 otherwise.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let value = read_json_object(path)?;
        Self::from_fields(&Fields::new(&value, path)?)
    }

    /// Parses draft-head config JSON text; `origin` names it in errors.
    pub fn from_json_str(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        let value = parse_json_object(text, origin)?;
        Self::from_fields(&Fields::new(&value, origin)?)
    }

    fn from_fields(fields: &Fields<'_>) -> Result<Self, ConfigError> {
        if is_eagle3(fields)? {
            Eagle3Config::from_fields(fields).map(Self::Eagle3)
        } else {
            Eagle1Config::from_fields(fields).map(Self::Eagle1)
        }
    }

    /// The draft decoder's architecture.
    pub fn layer(&self) -> &LlamaConfig {
        match self {
            Self::Eagle1(c) => &c.layer,
            Self::Eagle3(c) => &c.layer,
        }
    }
}

/// Whether a draft config is an EAGLE-3 one.
fn is_eagle3(fields: &Fields<'_>) -> Result<bool, ConfigError> {
    let named = fields
        .strings("architectures")?
        .unwrap_or_default()
        .iter()
        .any(|a| a.to_ascii_lowercase().contains("eagle3"));
    let keyed = [
        "draft_vocab_size",
        "target_hidden_size",
        "eagle_config",
        "eagle_aux_hidden_state_layer_ids",
        "norm_before_residual",
    ]
    .iter()
    .any(|key| fields.has(key));
    Ok(named || keyed)
}

impl Eagle1Config {
    fn from_fields(fields: &Fields<'_>) -> Result<Self, ConfigError> {
        let mut layer = LlamaConfig::from_fields(fields, Some(ModelType::Llama))?;
        if fields.bool("qkv_bias")?.unwrap_or(false) {
            layer.qkv_bias = true;
        }
        Ok(Self {
            layer,
            fc_bias: fields.bool("bias")?,
            origin: fields.origin().to_path_buf(),
        })
    }

    /// Whether `fc` has a bias, given whether the checkpoint holds `fc.bias`.
    ///
    /// An explicit `bias` must agree with the checkpoint; an absent one follows it (the
    /// reference defaults to a bias, but heads saved without one exist).
    pub fn resolve_fc_bias(&self, checkpoint_has_bias: bool) -> Result<bool, ConfigError> {
        match self.fc_bias {
            Some(explicit) if explicit != checkpoint_has_bias => Err(ConfigError::invalid(
                &self.origin,
                "bias",
                if explicit {
                    "is true but the checkpoint has no fc.bias"
                } else {
                    "is false but the checkpoint has fc.bias"
                },
            )),
            _ => Ok(checkpoint_has_bias),
        }
    }
}

impl Eagle3Config {
    fn from_fields(fields: &Fields<'_>) -> Result<Self, ConfigError> {
        let layer = LlamaConfig::from_fields(fields, Some(ModelType::Llama))?;
        let draft_vocab_size = fields
            .positive("draft_vocab_size")?
            .unwrap_or(layer.vocab_size);
        if draft_vocab_size > layer.vocab_size {
            return Err(fields.invalid(
                "draft_vocab_size",
                format!(
                    "{draft_vocab_size} exceeds vocab_size ({})",
                    layer.vocab_size
                ),
            ));
        }
        let eagle = fields.object("eagle_config")?;
        let aux_layer_ids = match fields.usize_list("eagle_aux_hidden_state_layer_ids")? {
            Some(ids) => Some(ids),
            None => match &eagle {
                Some(e) => e.usize_list("eagle_aux_hidden_state_layer_ids")?,
                None => None,
            },
        };
        if aux_layer_ids.as_ref().is_some_and(Vec::is_empty) {
            return Err(fields.invalid("eagle_aux_hidden_state_layer_ids", "is empty"));
        }
        let use_aux_hidden_state = match &eagle {
            Some(e) => e.bool("use_aux_hidden_state")?.unwrap_or(true),
            None => true,
        };
        Ok(Self {
            layer,
            draft_vocab_size,
            target_hidden_size: fields.positive("target_hidden_size")?,
            aux_layer_ids,
            use_aux_hidden_state,
            norm_before_residual: fields.bool("norm_before_residual")?.unwrap_or(false),
        })
    }

    /// Width of one target feature row (`target_hidden_size`, default the draft's hidden size).
    pub fn target_hidden_size(&self) -> usize {
        self.target_hidden_size.unwrap_or(self.layer.hidden_size)
    }

    /// The target layers whose incoming residual stream feeds the head: the config's ids, or
    /// the target's defaults.
    pub fn aux_layers_for(&self, target: &LlamaConfig) -> Vec<usize> {
        self.aux_layer_ids
            .clone()
            .unwrap_or_else(|| target.default_eagle3_aux_layers())
    }

    /// Input width of `fc`: one target hidden state per auxiliary layer (three by default).
    pub fn fc_input_size(&self) -> usize {
        self.aux_layer_ids.as_ref().map_or(3, Vec::len) * self.target_hidden_size()
    }

    /// Whether the head has its own vocabulary mapping (`d2t`/`t2d`).
    pub fn has_vocab_mapping(&self) -> bool {
        self.draft_vocab_size != self.layer.vocab_size
    }
}
