//! A built-in, deterministic set of short single-turn chat prompts for self-distilling an EAGLE
//! draft head (the target model answers them; the head learns from its features).
//!
//! Each category has a few template sentences with slots and a vocabulary per slot, kept as data
//! in `examples/data/train-prompts.json` (built into the binary); every combination is
//! enumerated (math prompts draw their numbers from the seeded rng instead), the
//! lists are shuffled with `ChaCha8Rng::seed_from_u64(seed)`, deduplicated, filtered against the
//! topics of the evaluation prompts, and taken round robin across the categories so that any
//! prefix of the result is diverse.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// Category of a training prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PromptCategory {
    /// An everyday factual question ("Why do cats purr?").
    Question,
    /// An instruction: list, explain, summarize, compare, give tips.
    Instruction,
    /// A short story or poem.
    Story,
    /// A programming task or question.
    Code,
    /// Arithmetic or a word problem with numbers from the rng.
    Math,
    /// A request the target wrote itself ([`crate::self_instruct`]); not made by this
    /// generator, so not in [`PromptCategory::ALL`].
    SelfInstructed,
}

impl PromptCategory {
    /// Every category, in the round-robin order.
    pub const ALL: [PromptCategory; 5] = [
        PromptCategory::Question,
        PromptCategory::Instruction,
        PromptCategory::Story,
        PromptCategory::Code,
        PromptCategory::Math,
    ];
}

/// One generated prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingPrompt {
    /// The category the prompt was drawn from.
    pub category: PromptCategory,
    /// The user message.
    pub text: String,
}

/// An error generating training prompts.
#[derive(Debug, thiserror::Error)]
pub enum TrainPromptsError {
    /// More prompts were asked for than the generator can make distinct.
    #[error("asked for {requested} training prompts, but only {available} distinct ones exist")]
    TooMany {
        /// The requested count.
        requested: usize,
        /// [`max_distinct_prompts`].
        available: usize,
    },
}

/// Generates `count` distinct prompts, deterministically for a given `seed`, interleaving the
/// categories (round robin) so any prefix of the list is diverse.
///
/// Errors if `count` exceeds [`max_distinct_prompts`].
pub fn generate_training_prompts(
    count: usize,
    seed: u64,
) -> Result<Vec<TrainingPrompt>, TrainPromptsError> {
    let pools = category_pools(seed);
    let available = distinct_total(&pools);
    if count > available {
        return Err(TrainPromptsError::TooMany {
            requested: count,
            available,
        });
    }
    Ok(round_robin(pools, count))
}

/// Whether the prompt at `index` is held out when every `every`-th one is (counted from the
/// first; `every = 0` holds none out): its greedy answer validates a head and no other answer
/// to it is trained on.
pub fn is_held_out(index: usize, every: usize) -> bool {
    every > 0 && index.is_multiple_of(every)
}

/// The prompts that [`is_held_out`] holds out, in order.
pub fn held_out_prompts(prompts: &[TrainingPrompt], every: usize) -> Vec<&TrainingPrompt> {
    prompts
        .iter()
        .enumerate()
        .filter(|(index, _)| is_held_out(*index, every))
        .map(|(_, prompt)| prompt)
        .collect()
}

/// How many distinct prompts the generator can produce (the same for every seed; at least 2000).
pub fn max_distinct_prompts() -> usize {
    distinct_total(&category_pools(0))
}

/// The generator's data: templates per category, the vocabularies their slots draw from, and
/// the topics of the evaluation prompts.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptData {
    /// Lower-case fragments that mark the topics of the evaluation prompts
    /// ([`crate::prompts::BUILTIN_CHAT_PROMPTS`] and the oracle prompts): a generated prompt
    /// that contains one is dropped, so no training prompt is a near copy of an evaluation
    /// prompt.
    held_out_topics: Vec<String>,
    /// Templates of the enumerated categories.
    templates: CategoryTemplates,
    /// Named vocabularies.
    words: HashMap<String, Vec<String>>,
}

/// The templates of every enumerated category (math is drawn from the rng instead).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CategoryTemplates {
    question: Vec<Template>,
    instruction: Vec<Template>,
    story: Vec<Template>,
    code: Vec<Template>,
}

/// One template sentence with slots `{0}`, `{1}`, ...
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Template {
    /// The sentence.
    text: String,
    /// For every slot in order, the vocabulary that fills it (every combination is made).
    #[serde(default)]
    slots: Vec<String>,
    /// Vocabularies whose unordered pairs of distinct words fill `{0}` and `{1}` (the earlier
    /// word first), pairs taken within each vocabulary.
    #[serde(default)]
    pairs_within: Vec<String>,
}

/// The built-in generator data, parsed once.
fn data() -> &'static PromptData {
    static DATA: OnceLock<PromptData> = OnceLock::new();
    DATA.get_or_init(|| {
        serde_json::from_str(include_str!("../data/train-prompts.json"))
            .expect("examples/data/train-prompts.json is valid (checked by a unit test)")
    })
}

/// The vocabulary `name` of the built-in data.
fn words(name: &str) -> &'static [String] {
    data()
        .words
        .get(name)
        .unwrap_or_else(|| panic!("train-prompts.json names an unknown vocabulary {name:?}"))
}

/// Whether `text` touches a topic of the evaluation prompts (such a text is never a training
/// prompt).
pub fn touches_held_out_topic(text: &str) -> bool {
    let lower = text.to_lowercase();
    data()
        .held_out_topics
        .iter()
        .any(|topic| lower.contains(topic.as_str()))
}

/// The prompts of every category, in [`PromptCategory::ALL`] order, each shuffled by the rng of
/// `seed`, deduplicated and without held-out topics.
fn category_pools(seed: u64) -> Vec<(PromptCategory, Vec<String>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    PromptCategory::ALL
        .into_iter()
        .map(|category| {
            let mut texts = enumerate_category(category, &mut rng);
            texts.shuffle(&mut rng);
            (category, distinct_allowed(texts))
        })
        .collect()
}

/// `texts` without repeats (first occurrence kept) and without held-out topics.
fn distinct_allowed(texts: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    texts
        .into_iter()
        .filter(|text| !touches_held_out_topic(text) && seen.insert(text.clone()))
        .collect()
}

/// The number of distinct prompts over all pools.
fn distinct_total(pools: &[(PromptCategory, Vec<String>)]) -> usize {
    pools
        .iter()
        .flat_map(|(_, texts)| texts.iter())
        .collect::<HashSet<_>>()
        .len()
}

/// Takes one prompt per category in turn (skipping exhausted categories and prompts already
/// taken from another category) until `count` prompts are taken or every pool is empty.
fn round_robin(pools: Vec<(PromptCategory, Vec<String>)>, count: usize) -> Vec<TrainingPrompt> {
    let mut queues: Vec<_> = pools
        .into_iter()
        .map(|(category, texts)| (category, texts.into_iter()))
        .collect();
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let mut progressed = false;
        for (category, queue) in &mut queues {
            if out.len() == count {
                break;
            }
            if let Some(text) = queue.find(|text| seen.insert(text.clone())) {
                out.push(TrainingPrompt {
                    category: *category,
                    text,
                });
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
    }
    out
}

/// Every prompt of `category` before shuffling (math prompts draw their numbers from `rng`).
fn enumerate_category(category: PromptCategory, rng: &mut ChaCha8Rng) -> Vec<String> {
    let templates = &data().templates;
    let templates = match category {
        PromptCategory::Question => &templates.question,
        PromptCategory::Instruction => &templates.instruction,
        PromptCategory::Story => &templates.story,
        PromptCategory::Code => &templates.code,
        PromptCategory::Math => return math_prompts(rng),
        PromptCategory::SelfInstructed => return Vec::new(),
    };
    templates.iter().flat_map(Template::fill).collect()
}

impl Template {
    /// Every filling of the template.
    fn fill(&self) -> Vec<String> {
        if self.pairs_within.is_empty() {
            let slots: Vec<&[String]> = self.slots.iter().map(|name| words(name)).collect();
            expand(&self.text, &slots)
        } else {
            let groups: Vec<&[String]> = self.pairs_within.iter().map(|name| words(name)).collect();
            expand_pairs(&self.text, &groups)
        }
    }
}

/// Every way of filling the slots `{0}`, `{1}`, ... of `template`, one vocabulary per slot.
fn expand(template: &str, slots: &[&[String]]) -> Vec<String> {
    let mut filled = vec![template.to_string()];
    for (index, words) in slots.iter().enumerate() {
        let marker = format!("{{{index}}}");
        let marker = marker.as_str();
        filled = filled
            .iter()
            .flat_map(|partial| words.iter().map(move |word| partial.replace(marker, word)))
            .collect();
    }
    filled
}

/// `template` filled with every unordered pair of distinct words from each group (`{0}` the
/// earlier word of the pair, `{1}` the later).
fn expand_pairs(template: &str, groups: &[&[String]]) -> Vec<String> {
    groups
        .iter()
        .flat_map(|group| {
            group.iter().enumerate().flat_map(move |(i, first)| {
                group[i + 1..]
                    .iter()
                    .map(move |second| template.replace("{0}", first).replace("{1}", second))
            })
        })
        .collect()
}

/// One math template: draws its numbers (and words) from the rng.
type MathTemplate = fn(&mut ChaCha8Rng) -> String;

/// The math templates.
const MATH_TEMPLATES: &[MathTemplate] = &[
    addition,
    subtraction,
    multiplication,
    division,
    shop_total,
    equal_shares,
    gives_away,
    travel_distance,
    percentage,
];

/// Distinct prompts drawn per math template.
const PROMPTS_PER_MATH_TEMPLATE: usize = 70;

/// Math prompts: [`PROMPTS_PER_MATH_TEMPLATE`] distinct allowed draws from every template (a
/// fixed total, whatever the seed).
fn math_prompts(rng: &mut ChaCha8Rng) -> Vec<String> {
    MATH_TEMPLATES
        .iter()
        .flat_map(|template| distinct_draws(*template, rng))
        .collect()
}

/// [`PROMPTS_PER_MATH_TEMPLATE`] distinct draws of `template` that touch no held-out topic.
/// Every template's space of prompts is several times larger, so this ends quickly.
fn distinct_draws(template: MathTemplate, rng: &mut ChaCha8Rng) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut draws = Vec::with_capacity(PROMPTS_PER_MATH_TEMPLATE);
    while draws.len() < PROMPTS_PER_MATH_TEMPLATE {
        let text = template(rng);
        if !touches_held_out_topic(&text) && seen.insert(text.clone()) {
            draws.push(text);
        }
    }
    draws
}

/// A uniformly chosen word of the vocabulary `name`.
fn pick(rng: &mut ChaCha8Rng, name: &str) -> &'static str {
    let words = words(name);
    &words[rng.random_range(0..words.len())]
}

/// "What is 37 plus 58?"
fn addition(rng: &mut ChaCha8Rng) -> String {
    let (a, b) = (rng.random_range(11..=99), rng.random_range(11..=99));
    format!("What is {a} plus {b}?")
}

/// "What is 81 minus 26?"
fn subtraction(rng: &mut ChaCha8Rng) -> String {
    let a = rng.random_range(30..=99);
    let b = rng.random_range(10..a);
    format!("What is {a} minus {b}?")
}

/// "What is 7 times 12?"
fn multiplication(rng: &mut ChaCha8Rng) -> String {
    let (a, b) = (rng.random_range(3..=19), rng.random_range(3..=19));
    format!("What is {a} times {b}?")
}

/// "What is 84 divided by 7?" (always a whole answer).
fn division(rng: &mut ChaCha8Rng) -> String {
    let divisor = rng.random_range(2..=12);
    let quotient = rng.random_range(2..=15);
    format!("What is {} divided by {divisor}?", divisor * quotient)
}

/// "A shop sells pens for 3 dollars each. How much do 7 pens cost?"
fn shop_total(rng: &mut ChaCha8Rng) -> String {
    let item = pick(rng, "shop_items");
    let (price, quantity) = (rng.random_range(2..=9), rng.random_range(2..=12));
    format!("A shop sells {item} for {price} dollars each. How much do {quantity} {item} cost?")
}

/// "Mia shares 24 cookies equally among 4 friends. How many cookies does each friend get?"
fn equal_shares(rng: &mut ChaCha8Rng) -> String {
    let (name, things) = (pick(rng, "names"), pick(rng, "countables"));
    let friends = rng.random_range(2..=8);
    let total = friends * rng.random_range(2..=9);
    format!(
        "{name} shares {total} {things} equally among {friends} friends. \
         How many {things} does each friend get?"
    )
}

/// "Tom has 45 marbles and gives away 18. How many marbles are left?"
fn gives_away(rng: &mut ChaCha8Rng) -> String {
    let (name, things) = (pick(rng, "names"), pick(rng, "countables"));
    let have = rng.random_range(20..=90);
    let give = rng.random_range(5..have);
    format!("{name} has {have} {things} and gives away {give}. How many {things} are left?")
}

/// "A train travels 80 kilometers per hour for 3 hours. How far does it go?"
fn travel_distance(rng: &mut ChaCha8Rng) -> String {
    let (speed, hours) = (rng.random_range(30..=120), rng.random_range(2..=6));
    format!("A train travels {speed} kilometers per hour for {hours} hours. How far does it go?")
}

/// "What is 25 percent of 80?"
fn percentage(rng: &mut ChaCha8Rng) -> String {
    let percent = pick(rng, "percentages");
    let whole = 20 * rng.random_range(1..=20);
    format!("What is {percent} percent of {whole}?")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompts::BUILTIN_CHAT_PROMPTS;

    #[test]
    fn every_nth_prompt_from_the_first_is_held_out() {
        let prompts = generate_training_prompts(45, 0).unwrap();
        let held_out = held_out_prompts(&prompts, 20);
        assert_eq!(held_out, vec![&prompts[0], &prompts[20], &prompts[40]]);
        assert!(held_out_prompts(&prompts, 0).is_empty());
        assert!(!is_held_out(19, 20) && is_held_out(0, 1));
    }

    /// The oracle prompts of the evaluation, besides [`BUILTIN_CHAT_PROMPTS`].
    const ORACLE_PROMPTS: &[&str] = &[
        "The capital of France is",
        "Once upon a time, there was a little",
        "What is 2+2?",
        "def fibonacci(n):",
        "Give me three tips for staying focused while studying.",
        "Water boils at 100 degrees Celsius because",
    ];

    fn texts(prompts: &[TrainingPrompt]) -> Vec<&str> {
        prompts.iter().map(|p| p.text.as_str()).collect()
    }

    #[test]
    fn the_data_file_parses_and_names_only_known_vocabularies() {
        let data = data();
        let templates = &data.templates;
        for template in [
            &templates.question,
            &templates.instruction,
            &templates.story,
            &templates.code,
        ]
        .into_iter()
        .flatten()
        {
            for name in template.slots.iter().chain(&template.pairs_within) {
                assert!(data.words.contains_key(name), "{name} in {}", template.text);
            }
            assert!(!template.fill().is_empty(), "{}", template.text);
        }
        for name in ["names", "shop_items", "countables", "percentages"] {
            assert!(!words(name).is_empty(), "{name}");
        }
    }

    #[test]
    fn six_hundred_prompts_are_distinct() {
        let prompts = generate_training_prompts(600, 1).unwrap();
        assert_eq!(prompts.len(), 600);
        let unique: HashSet<_> = texts(&prompts).into_iter().collect();
        assert_eq!(unique.len(), 600);
    }

    #[test]
    fn the_seed_fixes_the_order() {
        let a = generate_training_prompts(300, 7).unwrap();
        assert_eq!(a, generate_training_prompts(300, 7).unwrap());
        assert_ne!(
            texts(&a),
            texts(&generate_training_prompts(300, 8).unwrap())
        );
    }

    #[test]
    fn every_category_is_in_the_first_ten() {
        let prompts = generate_training_prompts(10, 3).unwrap();
        for category in PromptCategory::ALL {
            assert!(
                prompts.iter().any(|p| p.category == category),
                "{category:?} missing"
            );
        }
    }

    #[test]
    fn no_prompt_contains_an_evaluation_prompt() {
        let prompts = generate_training_prompts(max_distinct_prompts(), 11).unwrap();
        let held_out: Vec<String> = BUILTIN_CHAT_PROMPTS
            .iter()
            .chain(ORACLE_PROMPTS)
            .map(|p| p.to_lowercase())
            .collect();
        for prompt in &prompts {
            let lower = prompt.text.to_lowercase();
            assert!(!touches_held_out_topic(&lower), "{}", prompt.text);
            for eval in &held_out {
                assert!(!lower.contains(eval.as_str()), "{} ~ {eval}", prompt.text);
            }
        }
    }

    #[test]
    fn no_prompt_touches_the_second_chat_evaluation_set() {
        let topics = crate::prompts::evaluation_set_topics("eval-chat-2.jsonl").unwrap();
        for prompt in generate_training_prompts(max_distinct_prompts(), 11).unwrap() {
            let lower = prompt.text.to_lowercase();
            for topic in topics {
                assert!(!lower.contains(topic.as_str()), "{} ~ {topic}", prompt.text);
            }
        }
    }

    #[test]
    fn asking_for_too_many_is_an_error() {
        let available = max_distinct_prompts();
        assert!(matches!(
            generate_training_prompts(available + 1, 0),
            Err(TrainPromptsError::TooMany { requested, available: a })
                if requested == available + 1 && a == available
        ));
    }

    #[test]
    fn the_maximum_is_reachable_and_at_least_two_thousand() {
        let available = max_distinct_prompts();
        assert!(available >= 2000, "{available}");
        for seed in [0, 5] {
            let prompts = generate_training_prompts(available, seed).unwrap();
            let unique: HashSet<_> = texts(&prompts).into_iter().collect();
            assert_eq!(unique.len(), available);
        }
    }

    #[test]
    fn prompts_are_short_sentences() {
        for prompt in generate_training_prompts(max_distinct_prompts(), 2).unwrap() {
            let text = &prompt.text;
            assert!(text.ends_with('?') || text.ends_with('.'), "{text}");
            assert!(text.len() < 200, "{text}");
        }
    }

    #[test]
    fn math_prompts_use_the_rng() {
        let math = |seed| {
            generate_training_prompts(50, seed)
                .unwrap()
                .into_iter()
                .filter(|p| p.category == PromptCategory::Math)
                .map(|p| p.text)
                .collect::<HashSet<_>>()
        };
        assert_ne!(math(1), math(2));
    }
}
