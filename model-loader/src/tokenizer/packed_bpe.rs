//! A byte-pair-encoding model kept in a few flat arrays.
//!
//! The `tokenizers` crate's BPE model keeps its vocabulary twice, as a map from text to id and
//! a map from id to text, each token's text in an allocation of its own, and its merge rules in
//! a third map: about 8.5 MB for a 49,152-token vocabulary, where the same tables packed back
//! to back take about 1.5 MB. For a small model that difference is several percent of the
//! weights, so the tokenizer runs its byte-level BPE vocabularies on [`PackedBpe`] and every
//! other step (normalization, pre-tokenization, added tokens, post-processing, decoding) on the
//! `tokenizers` crate as before.
//!
//! [`PackedBpe`] merges exactly as the crate's BPE model does without dropout: the applicable
//! merge of lowest rank first, the leftmost of equal ranks first, and characters missing from
//! the vocabulary dropped.

use serde::Deserialize;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::{Path, PathBuf};
use tokenizers::models::bpe::{BpeTrainer, Vocab, BPE};
use tokenizers::{Model, Token};

/// A BPE vocabulary and its merge rules, packed.
#[derive(Clone)]
pub struct PackedBpe {
    /// Every token's text, in id order, back to back.
    texts: String,
    /// Where the text of each token ends in `texts` (it starts where the previous one ends).
    ends: Vec<u32>,
    /// Every id, sorted by its token's text: text lookups are binary searches.
    ids_by_text: Vec<u32>,
    /// The id of each one-character token below [`DIRECT_CHARS`], by code point, or
    /// [`NO_TOKEN`]: the characters a word starts as, looked up without a search.
    char_ids: Vec<u32>,
    /// The merge rules, sorted by the pair they merge: those whose left token is `id` are
    /// `merges[merges_from[id]..merges_from[id + 1]]`.
    merges: Vec<MergeRule>,
    /// Where the rules of each left token start in `merges` (one more entry than tokens).
    merges_from: Vec<u32>,
    /// Whether a word that is a token as a whole is taken as that token without merging.
    ignore_merges: bool,
}

/// Code points below this have their one-character tokens in a table (byte-level BPE spells
/// every byte with a character below U+0144).
const DIRECT_CHARS: u32 = 512;

/// `char_ids` entry of a character that is not a token.
const NO_TOKEN: u32 = u32::MAX;

/// One merge rule: the right id of the pair it joins (the left one is where the rule is
/// filed), its rank (lower merges first) and the id of the joined token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MergeRule {
    right: u32,
    rank: u32,
    merged: u32,
}

/// The `model` section of a `tokenizer.json`, as far as the packed tables need it.
#[derive(Deserialize)]
struct ModelSection {
    vocab: HashMap<String, u32>,
    merges: MergeList,
}

/// Merge rules as `tokenizer.json` spells them: pairs, or (older files) "left right" strings.
#[derive(Deserialize)]
#[serde(untagged)]
enum MergeList {
    Pairs(Vec<(String, String)>),
    Joined(Vec<String>),
}

/// The parts of a `tokenizer.json` document read here.
#[derive(Deserialize)]
struct Document {
    model: ModelSection,
}

/// A symbol of a word being merged: a token and the neighbours it has in the word so far.
#[derive(Debug, Clone, Copy)]
struct Symbol {
    id: u32,
    /// Bytes of the word it covers; 0 once merged into its left neighbour.
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl PackedBpe {
    /// Packs the BPE model of a `tokenizer.json` document. `ignore_merges` is the model's flag
    /// of that name. Returns `None` where the vocabulary is not the ids `0..n` each used once,
    /// or a merge names a token the vocabulary lacks.
    pub fn from_tokenizer_json(text: &str, ignore_merges: bool) -> Option<Self> {
        let section = serde_json::from_str::<Document>(text).ok()?.model;
        let merges = match section.merges {
            MergeList::Pairs(pairs) => pairs,
            MergeList::Joined(lines) => lines
                .into_iter()
                .map(|line| {
                    let (left, right) = line.split_once(' ')?;
                    Some((left.to_string(), right.to_string()))
                })
                .collect::<Option<_>>()?,
        };
        Self::new(&section.vocab, &merges, ignore_merges)
    }

    /// Packs `vocab` (text to id) and `merges` (ranked by position). See
    /// [`Self::from_tokenizer_json`] for when it returns `None`.
    pub fn new(
        vocab: &HashMap<String, u32>,
        merges: &[(String, String)],
        ignore_merges: bool,
    ) -> Option<Self> {
        let mut by_id: Vec<(&str, u32)> = vocab.iter().map(|(t, &id)| (t.as_str(), id)).collect();
        by_id.sort_unstable_by_key(|&(_, id)| id);
        if by_id
            .iter()
            .enumerate()
            .any(|(i, &(_, id))| id as usize != i)
        {
            return None;
        }
        let mut texts = String::with_capacity(by_id.iter().map(|(t, _)| t.len()).sum());
        let mut ends = Vec::with_capacity(by_id.len());
        for (text, _) in &by_id {
            texts.push_str(text);
            ends.push(u32::try_from(texts.len()).ok()?);
        }
        let mut ids_by_text: Vec<u32> = (0..by_id.len() as u32).collect();
        ids_by_text.sort_unstable_by_key(|&id| by_id[id as usize].0);
        let mut packed = Self {
            texts,
            ends,
            ids_by_text,
            char_ids: vec![NO_TOKEN; DIRECT_CHARS as usize],
            merges: Vec::new(),
            merges_from: Vec::new(),
            ignore_merges,
        };
        for id in 0..packed.len() as u32 {
            let mut chars = packed.text_of(id)?.chars();
            if let (Some(c), None) = (chars.next(), chars.next()) {
                if let Some(entry) = packed.char_ids.get_mut(c as usize) {
                    *entry = id;
                }
            }
        }
        let mut rules = Vec::with_capacity(merges.len());
        for (rank, (left, right)) in merges.iter().enumerate() {
            let rule = MergeRule {
                right: packed.id_of(right)?,
                rank: u32::try_from(rank).ok()?,
                merged: packed.id_of(&format!("{left}{right}"))?,
            };
            rules.push((packed.id_of(left)?, rule));
        }
        // A pair listed twice keeps its last rule, as a map built in rank order would.
        rules.sort_by_key(|&(left, rule)| (left, rule.right, Reverse(rule.rank)));
        rules.dedup_by_key(|&mut (left, rule)| (left, rule.right));
        packed.merges_from = vec![0; packed.len() + 1];
        for &(left, _) in &rules {
            packed.merges_from[left as usize + 1] += 1;
        }
        for id in 0..packed.len() {
            packed.merges_from[id + 1] += packed.merges_from[id];
        }
        packed.merges = rules.into_iter().map(|(_, rule)| rule).collect();
        Some(packed)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The text of token `id`.
    pub fn text_of(&self, id: u32) -> Option<&str> {
        let id = id as usize;
        let end = *self.ends.get(id)? as usize;
        let start = if id == 0 {
            0
        } else {
            self.ends[id - 1] as usize
        };
        Some(&self.texts[start..end])
    }

    /// The id of the token spelled `text`.
    pub fn id_of(&self, text: &str) -> Option<u32> {
        self.ids_by_text
            .binary_search_by(|&id| self.text_of(id).unwrap_or_default().cmp(text))
            .ok()
            .map(|index| self.ids_by_text[index])
    }

    /// The id of the one-character token `c`.
    fn char_id(&self, c: char, text: &str) -> Option<u32> {
        match self.char_ids.get(c as usize) {
            Some(&id) => (id != NO_TOKEN).then_some(id),
            None => self.id_of(text),
        }
    }

    /// The rule merging `left` then `right`, if any.
    fn merge_of(&self, left: u32, right: u32) -> Option<MergeRule> {
        let from = *self.merges_from.get(left as usize)? as usize;
        let to = self.merges_from[left as usize + 1] as usize;
        let rules = &self.merges[from..to];
        rules
            .binary_search_by_key(&right, |rule| rule.right)
            .ok()
            .map(|index| rules[index])
    }

    /// Every merge rule as (left, rule), in rank order.
    fn rules_by_rank(&self) -> Vec<(u32, MergeRule)> {
        let mut rules: Vec<(u32, MergeRule)> = (0..self.len())
            .flat_map(|left| {
                let range = self.merges_from[left] as usize..self.merges_from[left + 1] as usize;
                self.merges[range]
                    .iter()
                    .map(move |&rule| (left as u32, rule))
            })
            .collect();
        rules.sort_by_key(|(_, rule)| rule.rank);
        rules
    }

    /// Splits `word` into tokens: one symbol per character in the vocabulary, then merges.
    fn merge_word(&self, word: &str) -> Vec<Symbol> {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(word.len());
        for (start, c) in word.char_indices() {
            let len = c.len_utf8();
            if let Some(id) = self.char_id(c, &word[start..start + len]) {
                let index = symbols.len();
                if let Some(last) = symbols.last_mut() {
                    last.next = Some(index);
                }
                symbols.push(Symbol {
                    id,
                    len,
                    prev: index.checked_sub(1),
                    next: None,
                });
            }
        }
        // Candidate merges, lowest rank first, then leftmost: (rank, position, merged id).
        let mut queue: BinaryHeap<Reverse<(u32, usize, u32)>> = symbols
            .windows(2)
            .enumerate()
            .filter_map(|(pos, pair)| {
                let rule = self.merge_of(pair[0].id, pair[1].id)?;
                Some(Reverse((rule.rank, pos, rule.merged)))
            })
            .collect();
        while let Some(Reverse((_, pos, merged))) = queue.pop() {
            let Some(next) = symbols[pos].next.filter(|_| symbols[pos].len > 0) else {
                continue;
            };
            // The candidate is stale if either symbol changed since it was queued.
            let rule = self.merge_of(symbols[pos].id, symbols[next].id);
            if rule.map(|rule| rule.merged) != Some(merged) {
                continue;
            }
            let right = symbols[next];
            symbols[pos].id = merged;
            symbols[pos].len += right.len;
            symbols[pos].next = right.next;
            symbols[next].len = 0;
            if let Some(after) = right.next {
                symbols[after].prev = Some(pos);
            }
            let current = symbols[pos];
            let neighbours = [
                current
                    .prev
                    .map(|prev| (prev, symbols[prev].id, current.id)),
                current
                    .next
                    .map(|after| (pos, current.id, symbols[after].id)),
            ];
            for (at, left, right) in neighbours.into_iter().flatten() {
                if let Some(rule) = self.merge_of(left, right) {
                    queue.push(Reverse((rule.rank, at, rule.merged)));
                }
            }
        }
        symbols.retain(|symbol| symbol.len > 0);
        symbols
    }

    /// The `tokenizers` crate's BPE model with the same vocabulary and merges (for saving).
    fn to_bpe(&self) -> tokenizers::Result<BPE> {
        let spelled = |id| self.text_of(id).unwrap_or_default().to_string();
        BPE::builder()
            .vocab_and_merges(
                self.get_vocab().into_iter().collect::<Vocab>(),
                self.rules_by_rank()
                    .iter()
                    .map(|&(left, rule)| (spelled(left), spelled(rule.right)))
                    .collect(),
            )
            .ignore_merges(self.ignore_merges)
            .build()
    }
}

impl std::fmt::Debug for PackedBpe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedBpe")
            .field("tokens", &self.len())
            .field("merges", &self.merges.len())
            .field("ignore_merges", &self.ignore_merges)
            .finish()
    }
}

impl Model for PackedBpe {
    type Trainer = BpeTrainer;

    fn tokenize(&self, sequence: &str) -> tokenizers::Result<Vec<Token>> {
        if sequence.is_empty() {
            return Ok(Vec::new());
        }
        if self.ignore_merges {
            if let Some(id) = self.id_of(sequence) {
                return Ok(vec![Token::new(id, sequence.into(), (0, sequence.len()))]);
            }
        }
        let mut start = 0;
        Ok(self
            .merge_word(sequence)
            .into_iter()
            .map(|symbol| {
                let offsets = (start, start + symbol.len);
                start = offsets.1;
                let text = self.text_of(symbol.id).unwrap_or_default();
                Token::new(symbol.id, text.to_string(), offsets)
            })
            .collect())
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.id_of(token)
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        self.text_of(id).map(str::to_string)
    }

    fn get_vocab(&self) -> HashMap<String, u32> {
        (0..self.len() as u32)
            .filter_map(|id| Some((self.text_of(id)?.to_string(), id)))
            .collect()
    }

    fn get_vocab_size(&self) -> usize {
        self.len()
    }

    fn save(&self, folder: &Path, prefix: Option<&str>) -> tokenizers::Result<Vec<PathBuf>> {
        self.to_bpe()?.save(folder, prefix)
    }

    fn get_trainer(&self) -> BpeTrainer {
        BpeTrainer::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary of `tokens` with ids in order, and `merges` over it.
    fn packed(tokens: &[&str], merges: &[(&str, &str)], ignore_merges: bool) -> PackedBpe {
        let vocab = tokens
            .iter()
            .enumerate()
            .map(|(id, t)| (t.to_string(), id as u32))
            .collect();
        let merges: Vec<(String, String)> = merges
            .iter()
            .map(|(l, r)| (l.to_string(), r.to_string()))
            .collect();
        PackedBpe::new(&vocab, &merges, ignore_merges).unwrap()
    }

    fn ids(model: &PackedBpe, text: &str) -> Vec<u32> {
        model.tokenize(text).unwrap().iter().map(|t| t.id).collect()
    }

    #[test]
    fn merges_lowest_rank_first_and_leftmost_among_equals() {
        let model = packed(
            &["a", "b", "aa", "ab", "aab"],
            &[("a", "b"), ("a", "a"), ("aa", "b")],
            false,
        );
        // "ab" outranks "aa": a|ab, then nothing joins a and ab.
        assert_eq!(ids(&model, "aab"), vec![0, 3]);
        // Equal ranks merge leftmost first: aa|aa, not a|aa|a.
        assert_eq!(ids(&model, "aaaa"), vec![2, 2]);
        assert_eq!(ids(&model, "aaa"), vec![2, 0]);
    }

    #[test]
    fn characters_outside_the_vocabulary_are_dropped_and_their_neighbours_may_merge() {
        let model = packed(&["a", "b", "ab"], &[("a", "b")], false);
        let tokens = model.tokenize("aéb").unwrap();
        assert_eq!(tokens, vec![Token::new(2, "ab".into(), (0, 2))]);
        assert_eq!(tokens, model.to_bpe().unwrap().tokenize("aéb").unwrap());
    }

    #[test]
    fn ignore_merges_takes_a_whole_word_token_as_is() {
        let tokens = ["a", "b", "c", "bc", "abc"];
        let merges = [("b", "c")];
        assert_eq!(ids(&packed(&tokens, &merges, false), "abc"), vec![0, 3]);
        assert_eq!(ids(&packed(&tokens, &merges, true), "abc"), vec![4]);
    }

    #[test]
    fn lookups_go_both_ways_and_reject_unknowns() {
        let model = packed(&["b", "a", "ba"], &[("b", "a")], false);
        assert_eq!(model.id_of("ba"), Some(2));
        assert_eq!(model.text_of(1), Some("a"));
        assert_eq!(model.id_of("ab"), None);
        assert_eq!(model.text_of(3), None);
    }

    #[test]
    fn vocabularies_with_gaps_or_unknown_merge_tokens_are_not_packed() {
        let gap: HashMap<String, u32> = [("a".to_string(), 0), ("b".to_string(), 2)].into();
        assert!(PackedBpe::new(&gap, &[], false).is_none());
        let dense: HashMap<String, u32> = [("a".to_string(), 0), ("b".to_string(), 1)].into();
        let merges = [("a".to_string(), "b".to_string())];
        assert!(PackedBpe::new(&dense, &merges, false).is_none());
    }

    #[test]
    fn matches_the_tokenizers_crate_bpe_on_the_same_tables() {
        let tokens = ["h", "e", "l", "o", "he", "ll", "hell", "hello", "lo", "el"];
        let merges = [
            ("h", "e"),
            ("l", "l"),
            ("he", "ll"),
            ("hell", "o"),
            ("l", "o"),
            ("e", "l"),
        ];
        let model = packed(&tokens, &merges, false);
        let reference = model.to_bpe().unwrap();
        for word in [
            "hello",
            "hellohello",
            "lol",
            "ehllo",
            "olleh",
            "hhhee",
            "llllo",
        ] {
            assert_eq!(
                model.tokenize(word).unwrap(),
                reference.tokenize(word).unwrap(),
                "{word}"
            );
        }
    }
}
