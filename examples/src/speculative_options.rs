//! The speculative-decoding command-line options of the `eagle` and `serve` examples and of
//! the Dynamo worker (the servers also take `--method none`), and the one function that turns
//! them into the engine's [`SpeculativeConfig`].

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use aquila_engine::{
    DraftLength, DraftModelDrafter, DraftPick, DraftTreeConfig, EagleDrafter, NgramDrafter,
    SpeculativeConfig, SpeculativeMethod, WeightFormat,
};
use clap::{Args, ValueEnum};

use crate::heads;

/// Draft tokens per step unless `--num-spec-tokens` says otherwise.
const SPEC_TOKENS: usize = 3;

/// Draft tokens per step of a draft model unless `--num-spec-tokens` says otherwise.
const DRAFT_MODEL_SPEC_TOKENS: usize = 7;

/// How requests are drafted.
#[derive(Args, Clone, Debug)]
pub struct SpeculativeOptions {
    /// Drafting method; default: `eagle3` when an EAGLE-3 head is shipped, else `eagle`.
    #[arg(long, value_enum)]
    pub method: Option<DraftMethod>,
    /// Draft head directory (EAGLE-1 or EAGLE-3 checkpoint; default: the shipped head), or with
    /// `--method draft-model` the draft model's directory (default: the target itself, in
    /// `--draft-weights`).
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Draft tokens per step (chains), or the depth of EAGLE-2 draft trees; default: 3, and 7
    /// for `--method draft-model` (whose drafts are accepted nearly always, so that a longer
    /// chain pays for its drafting steps; 8 verification rows are two passes of the CPU
    /// kernels' four rows, or one of eight).
    #[arg(long)]
    pub num_spec_tokens: Option<usize>,
    /// EAGLE-2 dynamic draft trees of this many draft tokens instead of chains; 0 drafts
    /// chains.
    #[arg(long, default_value_t = 0)]
    pub tree_nodes: usize,
    /// Children per expanded node (and nodes expanded per depth) of EAGLE-2 draft trees.
    #[arg(long, default_value_t = DraftTreeConfig::default().top_k)]
    pub tree_top_k: usize,
    /// Speculate only while at most this many requests run (larger batches decode plainly).
    #[arg(long)]
    pub disable_by_batch_size: Option<usize>,
    /// `adaptive`: each step, each request drafts the length (0 to --num-spec-tokens) that the
    /// engine's measured costs and the request's acceptance say pays most; `fixed`: always
    /// --num-spec-tokens.
    #[arg(long, value_enum, default_value_t = DraftLengthArg::Adaptive)]
    pub draft_length: DraftLengthArg,
    /// With `--draft-length adaptive`: fewest draft tokens per request and step.
    #[arg(long, default_value_t = 0)]
    pub min_draft_tokens: usize,
    /// Format of an EAGLE head's or a draft model's projections and lm_head (`f32`, `q8_0`,
    /// `bf16`, `q4_1`); default on the CPU: `q8_0` for heads, `q4_1` for draft models; else
    /// the target's (`--dtype`).
    #[arg(long)]
    pub draft_weights: Option<WeightFormat>,
    /// EAGLE drafts: `auto` (and `on`) verify a prompt lookup's chain instead of the head's
    /// wherever the lookup is expected to be accepted further, and graft it into EAGLE-2 trees
    /// as a branch; `off` drafts with the head only.
    #[arg(long, value_enum, default_value_t = LookupAssistArg::Auto)]
    pub lookup_assist: LookupAssistArg,
    /// Chain drafts of requests that sample: `sample` them from the head (or draft model) at the
    /// request's temperature (verified with `min(1, p/q)`), or take its `argmax`. Greedy
    /// requests and EAGLE-2 trees always take the likeliest tokens.
    #[arg(long, value_enum, default_value_t = DraftPickArg::Sample)]
    pub draft_pick: DraftPickArg,
}

/// How EAGLE chains are drafted for requests that sample (see [`DraftPick`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DraftPickArg {
    /// Sampled from the head's softmax at the request's temperature.
    Sample,
    /// The head's most likely token.
    Argmax,
}

/// Whether a prompt lookup assists an EAGLE head's chains and trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LookupAssistArg {
    /// On for EAGLE methods.
    Auto,
    /// On; an error for methods other than EAGLE.
    On,
    /// Off.
    Off,
}

/// How many tokens each request drafts per step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DraftLengthArg {
    /// Chosen per request and step by the engine's cost model.
    Adaptive,
    /// Always `--num-spec-tokens`.
    Fixed,
}

/// The drafting methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DraftMethod {
    /// EAGLE-1 head on the target's last hidden state.
    Eagle,
    /// EAGLE-3 head on three auxiliary layers.
    Eagle3,
    /// Prompt-lookup n-grams (no draft model).
    Ngram,
    /// A draft language model sharing the target's tokenizer (`--draft DIR`; default: the
    /// target itself in `--draft-weights`, Q4_1 on the CPU).
    DraftModel,
    /// No speculative decoding.
    None,
}

impl SpeculativeOptions {
    /// The engine's speculative settings for the target in `target` (`None` for `--method
    /// none`), with a line on stdout saying which drafter is used. The one place that knows the
    /// shape of [`SpeculativeConfig`].
    pub fn speculative_config(&self, target: &Path) -> Result<Option<SpeculativeConfig>> {
        let chosen = self.resolve_method();
        if chosen == DraftMethod::None {
            println!("speculative decoding: off");
            return Ok(None);
        }
        let tree = (self.tree_nodes > 0).then_some(DraftTreeConfig {
            top_k: self.tree_top_k,
            num_nodes: self.tree_nodes,
        });
        let method = match (chosen, self.resolve_draft(chosen, target)?) {
            (DraftMethod::Eagle, Some(draft_model)) => {
                SpeculativeMethod::Eagle(self.eagle_drafter(draft_model, tree))
            }
            (DraftMethod::Eagle3, Some(draft_model)) => {
                SpeculativeMethod::Eagle3(self.eagle_drafter(draft_model, tree))
            }
            (DraftMethod::Ngram, _) if tree.is_some() => {
                bail!("--tree-nodes needs an EAGLE method; n-gram drafting proposes chains")
            }
            (DraftMethod::Ngram, _) if self.draft_weights.is_some() => {
                bail!("--draft-weights needs an EAGLE method; n-gram drafting has no weights")
            }
            (DraftMethod::Ngram, _) if self.lookup_assist == LookupAssistArg::On => {
                bail!("--lookup-assist on needs an EAGLE method; n-gram drafting is a lookup")
            }
            (DraftMethod::Ngram, _) => SpeculativeMethod::Ngram(NgramDrafter::default()),
            (DraftMethod::DraftModel, _) if tree.is_some() => {
                bail!("--tree-nodes needs an EAGLE method; a draft model proposes chains")
            }
            (DraftMethod::DraftModel, _) if self.lookup_assist == LookupAssistArg::On => {
                bail!("--lookup-assist on needs an EAGLE method")
            }
            (DraftMethod::DraftModel, Some(model)) => {
                SpeculativeMethod::DraftModel(DraftModelDrafter {
                    weights: self.draft_weights,
                    draft_pick: self.draft_pick(),
                    ..DraftModelDrafter::new(model)
                })
            }
            _ => bail!("an EAGLE method needs a draft head (--draft DIR)"),
        };
        if let SpeculativeMethod::Eagle(drafter) | SpeculativeMethod::Eagle3(drafter) = &method {
            match drafter.lookup {
                Some(lookup) => println!(
                    "lookup assist: n-grams of {} to {} tokens, {} (--lookup-assist off to \
                     disable)",
                    lookup.min_n,
                    lookup.max_n,
                    if drafter.tree.is_some() {
                        "grafted into the trees"
                    } else {
                        "replacing chains it beats"
                    }
                ),
                None => println!("lookup assist: off"),
            }
        }
        let default_k = match chosen {
            DraftMethod::DraftModel => DRAFT_MODEL_SPEC_TOKENS,
            _ => SPEC_TOKENS,
        };
        let k = self.num_spec_tokens.unwrap_or(default_k);
        let mut config = SpeculativeConfig::new(method, k);
        config.disable_by_batch_size = self.disable_by_batch_size;
        config.draft_length = match self.draft_length {
            DraftLengthArg::Adaptive => DraftLength::Adaptive {
                min_draft_tokens: self.min_draft_tokens,
            },
            DraftLengthArg::Fixed if self.min_draft_tokens > 0 => {
                bail!("--min-draft-tokens bounds --draft-length adaptive only")
            }
            DraftLengthArg::Fixed => DraftLength::Fixed,
        };
        Ok(Some(config))
    }

    /// An EAGLE head's drafter: chains or trees assisted by a prompt lookup unless
    /// `--lookup-assist off`.
    fn eagle_drafter(&self, draft_model: PathBuf, tree: Option<DraftTreeConfig>) -> EagleDrafter {
        EagleDrafter {
            tree,
            weights: self.draft_weights,
            lookup: match self.lookup_assist {
                LookupAssistArg::Off => None,
                LookupAssistArg::Auto | LookupAssistArg::On => Some(NgramDrafter::assisting()),
            },
            draft_pick: self.draft_pick(),
            ..EagleDrafter::new(draft_model)
        }
    }

    /// How chain drafts of requests that sample are picked.
    fn draft_pick(&self) -> DraftPick {
        match self.draft_pick {
            DraftPickArg::Sample => DraftPick::Sample,
            DraftPickArg::Argmax => DraftPick::Argmax,
        }
    }

    /// The method asked for, or the default: the shipped EAGLE-3 head when there is one.
    fn resolve_method(&self) -> DraftMethod {
        self.method.unwrap_or_else(|| {
            if has_config(&heads::shipped_eagle3_head_dir()) {
                DraftMethod::Eagle3
            } else {
                DraftMethod::Eagle
            }
        })
    }

    /// The draft head of an EAGLE method (`--draft`, else the method's shipped head) or the
    /// draft model (`--draft`, else the target in `target`); `None` for n-grams.
    fn resolve_draft(&self, method: DraftMethod, target: &Path) -> Result<Option<PathBuf>> {
        if matches!(method, DraftMethod::Ngram | DraftMethod::None) {
            println!("draft: n-gram prompt lookup (no draft model)");
            return Ok(None);
        }
        if let Some(dir) = &self.draft {
            println!("draft: {}", dir.display());
            return Ok(Some(dir.clone()));
        }
        if method == DraftMethod::DraftModel {
            let weights = self.draft_weights.map_or_else(
                || "q4_1 on the CPU, else the target's".into(),
                |format| format.to_string(),
            );
            println!("draft: the target model itself, weights {weights}");
            return Ok(Some(target.to_path_buf()));
        }
        let shipped = if method == DraftMethod::Eagle3 {
            heads::shipped_eagle3_head_dir()
        } else {
            heads::shipped_head_dir()
        };
        if !has_config(&shipped) {
            bail!("--method {method:?} needs --draft DIR (no such head is shipped)");
        }
        println!("draft: the shipped head {}", shipped.display());
        Ok(Some(shipped))
    }
}

fn has_config(dir: &Path) -> bool {
    dir.join("config.json").exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        speculative: SpeculativeOptions,
    }

    fn config(args: &[&str]) -> Result<Option<SpeculativeConfig>> {
        let argv = std::iter::once("test").chain(args.iter().copied());
        Cli::try_parse_from(argv)?
            .speculative
            .speculative_config(Path::new("/target"))
    }

    fn lookup_of(args: &[&str]) -> Option<NgramDrafter> {
        match config(args).unwrap().unwrap().method {
            SpeculativeMethod::Eagle(drafter) | SpeculativeMethod::Eagle3(drafter) => {
                drafter.lookup
            }
            method => panic!("not an EAGLE method: {method}"),
        }
    }

    #[test]
    fn eagle_chains_are_assisted_by_a_lookup_unless_turned_off() {
        let head = ["--draft", "/head"];
        let assisted = Some(NgramDrafter::assisting());
        assert_eq!(
            lookup_of(&[&["--method", "eagle3"], &head[..]].concat()),
            assisted
        );
        assert_eq!(
            lookup_of(&[&["--method", "eagle", "--lookup-assist", "on"], &head[..]].concat()),
            assisted
        );
        assert_eq!(
            lookup_of(&[&["--method", "eagle3", "--lookup-assist", "off"], &head[..]].concat()),
            None
        );
    }

    #[test]
    fn the_assist_is_refused_for_ngram_and_grafted_into_trees() {
        let error = |args: &[&str]| config(args).unwrap_err().to_string();
        assert!(error(&["--method", "ngram", "--lookup-assist", "on"]).contains("EAGLE method"));
        let trees = [
            "--method",
            "eagle3",
            "--draft",
            "/head",
            "--tree-nodes",
            "6",
        ];
        // Trees take the assist as a grafted branch, asked for or left on auto.
        let on = [&trees[..], &["--lookup-assist", "on"]].concat();
        assert_eq!(lookup_of(&on), Some(NgramDrafter::assisting()));
        assert_eq!(lookup_of(&trees), Some(NgramDrafter::assisting()));
    }

    #[test]
    fn a_draft_model_defaults_to_the_target_and_drafts_chains() {
        let method = config(&["--method", "draft-model"])
            .unwrap()
            .unwrap()
            .method;
        let SpeculativeMethod::DraftModel(drafter) = method else {
            panic!("not a draft model: {method}");
        };
        assert_eq!(drafter.model, Path::new("/target"));
        assert_eq!(drafter.weights, None);
        let k = |args: &[&str]| config(args).unwrap().unwrap().num_speculative_tokens;
        assert_eq!(k(&["--method", "draft-model"]), DRAFT_MODEL_SPEC_TOKENS);
        assert_eq!(k(&["--method", "draft-model", "--num-spec-tokens", "4"]), 4);
        assert_eq!(k(&["--method", "eagle3", "--draft", "/head"]), SPEC_TOKENS);
        let method = config(&["--method", "draft-model", "--draft", "/small"])
            .unwrap()
            .unwrap()
            .method;
        assert!(
            matches!(method, SpeculativeMethod::DraftModel(d) if d.model == Path::new("/small"))
        );
        let error = |args: &[&str]| config(args).unwrap_err().to_string();
        let trees = error(&["--method", "draft-model", "--tree-nodes", "4"]);
        assert!(trees.contains("proposes chains"), "{trees}");
    }
}
