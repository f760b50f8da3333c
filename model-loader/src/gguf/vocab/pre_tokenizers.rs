//! The pre-tokenizers of byte-level BPE vocabularies, by the name llama.cpp stores in
//! `tokenizer.ggml.pre`: the regular expressions llama.cpp splits text with before BPE, in
//! Oniguruma syntax for the `tokenizers` crate's `Split` pre-tokenizer, and the two settings
//! llama.cpp ties to the name (whole-word lookup before merging, and a BOS by default).

use crate::tokenizer::spec::PreTokenizer;

/// How one family of `tokenizer.ggml.pre` names tokenizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreTokenizerFamily {
    /// The split before BPE.
    pub pre_tokenizer: PreTokenizer,
    /// A word that is a token by itself becomes that token without merging.
    pub ignore_merges: bool,
    /// A BOS token is added when `tokenizer.ggml.add_bos_token` is absent.
    pub add_bos_by_default: bool,
}

/// The GPT-2 word split (contractions, letters, digits, other symbols, spaces).
const GPT2: &str = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
/// The Llama 3 split: case-insensitive contractions, up to three digits per word, newlines
/// kept apart from other whitespace.
const LLAMA3: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/// The Qwen2 split: the Llama 3 split with one digit per word.
const QWEN2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/// The Qwen3.5 split: the Qwen2 split with combining marks kept in words.
const QWEN35: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/// The family of `pre`, or `None` for a name this crate does not know.
pub fn family(pre: &str) -> Option<PreTokenizerFamily> {
    let regexes =
        |patterns: &[&str]| PreTokenizer::Regexes(patterns.iter().map(|p| p.to_string()).collect());
    let (pre_tokenizer, ignore_merges, add_bos_by_default) = match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" => (regexes(&[LLAMA3]), true, true),
        "dbrx" | "smaug-bpe" => (regexes(&[LLAMA3]), false, false),
        "qwen2" | "deepseek-r1-qwen" | "stablelm2" => (regexes(&[QWEN2]), false, false),
        "qwen35" => (regexes(&[QWEN35]), false, false),
        "gpt2" | "gpt-2" | "phi-2" | "mpt" | "olmo" | "jina-es" | "jina-de" | "jina-v2-es"
        | "jina-v2-de" => (PreTokenizer::ByteLevel, false, false),
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva" => {
            (PreTokenizer::IndividualDigitsThenByteLevel, false, false)
        }
        "falcon" => (
            regexes(&["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"]),
            false,
            false,
        ),
        "deepseek-coder" => (
            regexes(&[
                "[\r\n]",
                "\\s?\\p{L}+",
                "\\s?\\p{P}+",
                "[一-龥ࠀ-一가-퟿]+",
                "\\p{N}",
            ]),
            false,
            false,
        ),
        "default" => (
            regexes(&[
                "[\\p{P}\\$\\+<=>\\^~\\|]+",
                GPT2,
                "\\p{N}+",
                "[0-9][0-9][0-9]",
            ]),
            false,
            false,
        ),
        _ => return None,
    };
    Some(PreTokenizerFamily {
        pre_tokenizer,
        ignore_merges,
        add_bos_by_default,
    })
}

/// A few of the names [`family`] knows, for error messages.
pub const KNOWN_EXAMPLES: &str =
    "llama-bpe, qwen2, qwen35, gpt-2, smollm, starcoder, command-r, falcon, deepseek-coder, \
     default";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_names_merge_whole_words_and_add_bos() {
        let llama3 = family("llama-bpe").unwrap();
        assert!(llama3.ignore_merges && llama3.add_bos_by_default);
        assert_eq!(family("llama3"), Some(llama3));
        assert!(!family("qwen2").unwrap().ignore_merges);
        assert_eq!(family("chameleon"), None);
    }

    #[test]
    fn every_regex_compiles_in_the_tokenizers_crate() {
        for name in [
            "llama-bpe",
            "qwen2",
            "qwen35",
            "falcon",
            "deepseek-coder",
            "default",
        ] {
            let PreTokenizer::Regexes(patterns) = family(name).unwrap().pre_tokenizer else {
                panic!("{name} is not a regex split");
            };
            for pattern in patterns {
                tokenizers::pre_tokenizers::split::Split::new(
                    tokenizers::pre_tokenizers::split::SplitPattern::Regex(pattern.clone()),
                    tokenizers::SplitDelimiterBehavior::Isolated,
                    false,
                )
                .unwrap_or_else(|e| panic!("{name}: {pattern:?}: {e}"));
            }
        }
    }
}
