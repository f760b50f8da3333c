//! A built-in, deterministic set of short single-turn chat prompts for self-distilling an EAGLE
//! draft head (the target model answers them; the head learns from its features).
//!
//! Each category has a few template sentences with slots and a vocabulary per slot; every
//! combination is enumerated (math prompts draw their numbers from the seeded rng instead), the
//! lists are shuffled with `ChaCha8Rng::seed_from_u64(seed)`, deduplicated, filtered against the
//! topics of the evaluation prompts, and taken round robin across the categories so that any
//! prefix of the result is diverse.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashSet;

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

/// How many distinct prompts the generator can produce (the same for every seed; at least 2000).
pub fn max_distinct_prompts() -> usize {
    distinct_total(&category_pools(0))
}

/// Lower-case fragments that mark the topics of the evaluation prompts
/// ([`crate::prompts::BUILTIN_CHAT_PROMPTS`] and the oracle prompts): a generated prompt that
/// contains one is dropped, so no training prompt is a near copy of an evaluation prompt.
const HELD_OUT_TOPICS: &[&str] = &[
    "fibonacci",
    "hash map",
    "hash table",
    "17 times 23",
    "23 times 17",
    "multiplied by",
    "2 plus 2",
    "2+2",
    "tomato soup",
    "sky",
    "planet",
    "solar system",
    "water cycle",
    "boil",
    "haiku",
    "autumn",
    "lighthouse",
    "good morning",
    "translate",
    "french",
    "spanish",
    "studying",
    "focus",
    "exercise",
    "capital of",
    "once upon a time",
];

/// Whether `text` touches a topic of the evaluation prompts (see [`HELD_OUT_TOPICS`]).
fn is_held_out(text: &str) -> bool {
    let lower = text.to_lowercase();
    HELD_OUT_TOPICS.iter().any(|topic| lower.contains(topic))
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
        .filter(|text| !is_held_out(text) && seen.insert(text.clone()))
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
    match category {
        PromptCategory::Question => question_prompts(),
        PromptCategory::Instruction => instruction_prompts(),
        PromptCategory::Story => story_prompts(),
        PromptCategory::Code => code_prompts(),
        PromptCategory::Math => math_prompts(rng),
    }
}

/// Every way of filling the slots `{0}`, `{1}`, ... of `template`, one vocabulary per slot.
fn expand(template: &str, slots: &[&[&str]]) -> Vec<String> {
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
fn expand_pairs(template: &str, groups: &[&[&str]]) -> Vec<String> {
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

/// Animals, plural.
const ANIMALS: &[&str] = &[
    "elephants",
    "penguins",
    "owls",
    "dolphins",
    "giraffes",
    "koalas",
    "kangaroos",
    "wolves",
    "foxes",
    "bees",
    "ants",
    "frogs",
    "turtles",
    "camels",
    "polar bears",
    "pandas",
    "octopuses",
    "squirrels",
    "hedgehogs",
    "parrots",
    "sharks",
    "zebras",
    "beavers",
    "bats",
    "snails",
    "flamingos",
    "otters",
    "crocodiles",
    "butterflies",
    "horses",
];

/// Animal behaviours, for "Why do ...?".
const BEHAVIOURS: &[&str] = &[
    "cats purr",
    "dogs wag their tails",
    "birds migrate",
    "bears hibernate",
    "zebras have stripes",
    "cows chew all day",
    "owls hunt at night",
    "fish swim in schools",
    "frogs croak",
    "snakes shed their skin",
    "bees make honey",
    "geese fly in a V shape",
    "chameleons change color",
    "cats like boxes",
    "dogs bark at strangers",
    "giraffes have long necks",
    "camels have humps",
    "squirrels bury nuts",
    "whales sing",
    "ducks float",
];

/// Science and everyday terms, for "What is ...?" and "Explain ...".
const TERMS: &[&str] = &[
    "photosynthesis",
    "gravity",
    "electricity",
    "magnetism",
    "friction",
    "a volcano",
    "an earthquake",
    "a glacier",
    "DNA",
    "a vaccine",
    "an atom",
    "a molecule",
    "the immune system",
    "an ecosystem",
    "erosion",
    "pollination",
    "a fossil",
    "a tsunami",
    "democracy",
    "inflation",
    "a budget",
    "an election",
    "a desert",
    "a coral reef",
    "the heart",
    "a muscle",
    "a food chain",
    "a habitat",
    "recycling",
    "compound interest",
    "a battery",
    "sound",
    "an echo",
    "a shadow",
    "a seed",
    "metamorphosis",
    "a calendar",
    "a map scale",
    "a thermometer",
    "a tide",
];

/// Devices and machines, for "How does ... work?".
const DEVICES: &[&str] = &[
    "a refrigerator",
    "a bicycle",
    "a compass",
    "a microwave oven",
    "a solar panel",
    "an elevator",
    "a camera",
    "a light bulb",
    "a telephone",
    "a clock",
    "a windmill",
    "a parachute",
    "a submarine",
    "a vacuum cleaner",
    "a washing machine",
    "a calculator",
    "a kite",
    "a printer",
    "a radio",
    "a doorbell",
    "a lock",
    "a hot air balloon",
    "a traffic light",
    "a dishwasher",
    "a toaster",
    "an escalator",
    "a zipper",
    "a piano",
    "a smoke alarm",
    "a bar code scanner",
];

/// Professions, with their article.
const PROFESSIONS: &[&str] = &[
    "a baker",
    "a nurse",
    "a firefighter",
    "a teacher",
    "a farmer",
    "a pilot",
    "a librarian",
    "a carpenter",
    "a dentist",
    "a veterinarian",
    "an architect",
    "an electrician",
    "a plumber",
    "a chef",
    "a gardener",
    "a journalist",
    "a mail carrier",
    "a park ranger",
    "a scientist",
    "a photographer",
    "a translator",
    "a tailor",
    "a zookeeper",
    "a bus driver",
    "a pharmacist",
    "a judge",
    "a potter",
    "a mechanic",
    "a beekeeper",
    "a museum guide",
];

/// Places, with their article.
const PLACES: &[&str] = &[
    "a desert",
    "a rainforest",
    "a coral reef",
    "a busy harbor",
    "a farm",
    "a zoo",
    "an art museum",
    "a national park",
    "a mountain village",
    "a train station",
    "a botanical garden",
    "a science museum",
    "an aquarium",
    "a night market",
    "a fishing town",
    "a bamboo forest",
    "a castle",
    "a bakery",
    "a library",
    "an airport",
    "a theme park",
    "a cave",
    "a wetland",
    "a savanna",
    "a city park",
];

/// Things whose importance can be asked about.
const VALUES: &[&str] = &[
    "sleep",
    "recycling",
    "honesty",
    "teamwork",
    "a balanced diet",
    "reading",
    "kindness",
    "saving money",
    "clean air",
    "biodiversity",
    "voting",
    "patience",
    "good posture",
    "hand washing",
    "sunscreen",
    "breakfast",
    "friendship",
    "curiosity",
    "a public library",
    "drinking enough water",
];

/// Question prompts.
fn question_prompts() -> Vec<String> {
    [
        expand("What is {0}?", &[TERMS]),
        expand("How does {0} work?", &[DEVICES]),
        expand("What do {0} eat?", &[ANIMALS]),
        expand("Where do {0} live?", &[ANIMALS]),
        expand("How long do {0} usually live?", &[ANIMALS]),
        expand("What are some fun facts about {0}?", &[ANIMALS]),
        expand("Why do {0}?", &[BEHAVIOURS]),
        expand("What does {0} do?", &[PROFESSIONS]),
        expand("How do you become {0}?", &[PROFESSIONS]),
        expand("What tools does {0} use?", &[PROFESSIONS]),
        expand("Why is {0} important?", &[VALUES]),
        expand("What can you see in {0}?", &[PLACES]),
    ]
    .concat()
}

/// Small counts, as words.
const COUNT_WORDS: &[&str] = &["two", "three", "four", "five"];

/// Everyday activities, for "Give ... tips for ...".
const ACTIVITIES: &[&str] = &[
    "saving money",
    "sleeping better",
    "cooking rice",
    "keeping a plant alive",
    "learning to swim",
    "packing for a trip",
    "writing a clear email",
    "making new friends",
    "keeping a tidy room",
    "taking better photos",
    "speaking in public",
    "learning to draw",
    "starting a vegetable garden",
    "reducing food waste",
    "caring for a puppy",
    "planning a birthday party",
    "riding a bike safely",
    "managing a small budget",
    "reading more books",
    "waking up early",
    "painting a room",
    "making a good first impression",
    "staying safe online",
    "traveling on a budget",
    "baking bread",
    "camping in the woods",
    "keeping a phone battery healthy",
    "running a yard sale",
    "writing a birthday card",
    "moving to a new city",
];

/// Things to list, plural.
const LIST_SUBJECTS: &[&str] = &[
    "kinds of trees",
    "musical instruments",
    "board games for families",
    "healthy snacks",
    "fruits that grow on trees",
    "animals that live in the ocean",
    "things to pack for a picnic",
    "ways to reuse a glass jar",
    "hobbies you can do at home",
    "common kitchen tools",
    "sports played with a ball",
    "birds that cannot fly",
    "uses for a paper clip",
    "reasons to read books",
    "games to play on a rainy day",
    "vegetables that grow underground",
    "inventions that changed the world",
    "desserts from around the world",
    "things made of wood",
    "insects that help gardens",
    "ways to say thank you",
    "simple science experiments for kids",
    "things you can recycle",
    "winter sports",
    "breakfast ideas",
    "easy houseplants",
    "famous painters",
    "kinds of bread",
    "farm animals",
    "things to do at the beach",
];

/// Inventions and institutions with a history to summarize.
const INVENTIONS: &[&str] = &[
    "the printing press",
    "the telephone",
    "the bicycle",
    "the light bulb",
    "the airplane",
    "the internet",
    "the camera",
    "the radio",
    "paper money",
    "the steam engine",
    "the compass",
    "chess",
    "the Olympic Games",
    "the postal service",
    "the piano",
    "the microscope",
    "the television",
    "the automobile",
    "the railway",
    "public libraries",
];

/// Everyday how-to tasks.
const HOW_TO_TASKS: &[&str] = &[
    "plant a tree",
    "make a paper airplane",
    "brew a cup of tea",
    "tie a shoelace",
    "fold a shirt",
    "set up a tent",
    "wash a car",
    "make a sandwich",
    "build a birdhouse",
    "fix a flat bike tire",
    "make pancakes",
    "clean a window",
    "wrap a present",
    "start a compost pile",
    "sew on a button",
    "make a fruit salad",
    "draw a simple cat",
    "play tic-tac-toe",
    "make lemonade",
    "care for a houseplant",
    "write a thank-you note",
    "pack a suitcase",
    "set a dinner table",
    "make a smoothie",
];

/// Groups of comparable things: every pair within a group is compared.
const COMPARABLE_GROUPS: &[&[&str]] = &[
    &["tea", "coffee", "milk", "orange juice"],
    &["cats", "dogs", "rabbits", "hamsters", "parrots"],
    &["trains", "buses", "bicycles", "cars", "boats"],
    &["soccer", "basketball", "tennis", "baseball", "volleyball"],
    &["apples", "oranges", "bananas", "grapes", "mangoes"],
];

/// Instruction prompts.
fn instruction_prompts() -> Vec<String> {
    [
        expand("Give {0} tips for {1}.", &[COUNT_WORDS, ACTIVITIES]),
        expand("List {0} {1}.", &[COUNT_WORDS, LIST_SUBJECTS]),
        expand("Explain {0} in simple words.", &[TERMS]),
        expand("Explain {0} to a ten-year-old.", &[TERMS]),
        expand("Summarize the history of {0}.", &[INVENTIONS]),
        expand("Describe a typical day for {0}.", &[PROFESSIONS]),
        expand("Describe how to {0}.", &[HOW_TO_TASKS]),
        expand_pairs("Compare {0} and {1} in a few sentences.", COMPARABLE_GROUPS),
    ]
    .concat()
}

/// Adjectives for story characters (consonant-initial, after "a").
const CHARACTER_TRAITS: &[&str] = &["brave", "curious", "lonely", "clever", "shy", "grumpy"];

/// Story characters.
const CHARACTERS: &[&str] = &[
    "fox", "robot", "dragon", "knight", "mouse", "owl", "pirate", "wizard", "turtle", "princess",
    "bear", "rabbit",
];

/// Story settings, with their article.
const SETTINGS: &[&str] = &[
    "a snowy forest",
    "a busy city",
    "an old castle",
    "a small village",
    "a desert oasis",
    "an underwater kingdom",
    "a space station",
    "a magical library",
];

/// What a bedtime-story character does.
const STORY_GOALS: &[&str] = &[
    "learns to share",
    "finds a lost treasure",
    "makes an unlikely friend",
    "is afraid of the dark",
    "wants to fly",
    "plants a magic seed",
    "goes on a long journey",
    "solves a mystery",
];

/// Moods of a poem.
const POEM_MOODS: &[&str] = &["happy", "funny", "gentle", "short"];

/// What a poem is about.
const POEM_SUBJECTS: &[&str] = &[
    "the ocean",
    "a rainy day",
    "a city at night",
    "a friendly cat",
    "the first snow",
    "a summer picnic",
    "a garden in spring",
    "a long train ride",
    "a quiet library",
    "a cup of hot cocoa",
    "a busy kitchen",
    "an old oak tree",
    "a lost balloon",
    "a mountain river",
    "a new pair of shoes",
    "a sleepy puppy",
    "a windy beach",
    "a candle in the dark",
    "a morning market",
    "a paper boat",
];

/// Story and poem prompts.
fn story_prompts() -> Vec<String> {
    [
        expand(
            "Write a short story about a {0} {1} in {2}.",
            &[CHARACTER_TRAITS, CHARACTERS, SETTINGS],
        ),
        expand(
            "Tell a bedtime story about a little {0} who {1}.",
            &[CHARACTERS, STORY_GOALS],
        ),
        expand("Write a {0} poem about {1}.", &[POEM_MOODS, POEM_SUBJECTS]),
    ]
    .concat()
}

/// Programming languages.
const LANGUAGES: &[&str] = &[
    "Python",
    "Rust",
    "JavaScript",
    "C",
    "Go",
    "Java",
    "TypeScript",
    "Ruby",
];

/// What a function should do, for "Write a ... function that ...".
const CODE_TASKS: &[&str] = &[
    "reverses a string",
    "checks whether a number is prime",
    "counts the vowels in a string",
    "returns the largest number in a list",
    "checks whether a word is a palindrome",
    "computes the factorial of a number",
    "removes duplicates from a list",
    "converts Celsius to Fahrenheit",
    "sums the digits of a number",
    "finds the average of a list of numbers",
    "counts the words in a sentence",
    "capitalizes the first letter of each word",
    "checks whether a year is a leap year",
    "merges two sorted lists",
    "returns the second smallest number in a list",
    "converts a number to binary",
    "checks whether two words are anagrams",
    "finds the greatest common divisor of two numbers",
    "sorts a list of names alphabetically",
    "counts how often each letter appears in a string",
    "returns the even numbers from a list",
    "swaps two variables",
    "rounds a number to two decimal places",
    "checks whether a string contains only digits",
    "finds the longest word in a sentence",
    "computes the area of a circle",
    "prints a multiplication table",
    "flattens a nested list",
    "reverses the order of words in a sentence",
    "checks whether a list is sorted",
];

/// Small programming chores, for "How do you ... in ...?".
const CODE_CHORES: &[&str] = &[
    "read a file line by line",
    "sort a list of numbers",
    "convert a string to an integer",
    "loop over a list",
    "write a comment",
    "define a constant",
    "join two strings",
    "split a string by spaces",
    "get the length of an array",
    "check if a list is empty",
    "print to the console",
    "handle an error",
    "write an if statement",
    "get the current date",
    "generate a random number",
    "write a while loop",
    "create an empty list",
    "compare two strings",
    "find the maximum of two numbers",
    "define a function with default arguments",
];

/// Programming concepts to explain with an example.
const PROGRAMMING_CONCEPTS: &[&str] = &[
    "recursion",
    "a for loop",
    "a while loop",
    "a variable",
    "a function",
    "a class",
    "an array",
    "a linked list",
    "a stack",
    "a queue",
    "error handling",
    "string formatting",
    "a boolean",
    "binary search",
    "a unit test",
];

/// Code prompts.
fn code_prompts() -> Vec<String> {
    [
        expand("Write a {0} function that {1}.", &[LANGUAGES, CODE_TASKS]),
        expand("How do you {0} in {1}?", &[CODE_CHORES, LANGUAGES]),
        expand(
            "Explain {0} with a short {1} example.",
            &[PROGRAMMING_CONCEPTS, LANGUAGES],
        ),
        expand_pairs("Compare {0} and {1} for a small project.", &[LANGUAGES]),
    ]
    .concat()
}

/// Names for word problems.
const NAMES: &[&str] = &[
    "Tom", "Mia", "Sam", "Lena", "Omar", "Priya", "Jack", "Yuki", "Carlos", "Nora",
];

/// Things a shop sells, plural.
const SHOP_ITEMS: &[&str] = &[
    "pens",
    "apples",
    "notebooks",
    "candles",
    "oranges",
    "stickers",
    "cupcakes",
    "pencils",
    "toy cars",
    "postcards",
];

/// Things people have and share, plural.
const COUNTABLES: &[&str] = &[
    "marbles",
    "cookies",
    "stamps",
    "seashells",
    "crayons",
    "cards",
    "balloons",
    "books",
];

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
        if !is_held_out(&text) && seen.insert(text.clone()) {
            draws.push(text);
        }
    }
    draws
}

/// A uniformly chosen word of `words`.
fn pick<'a>(rng: &mut ChaCha8Rng, words: &[&'a str]) -> &'a str {
    words[rng.random_range(0..words.len())]
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
    let item = pick(rng, SHOP_ITEMS);
    let (price, quantity) = (rng.random_range(2..=9), rng.random_range(2..=12));
    format!("A shop sells {item} for {price} dollars each. How much do {quantity} {item} cost?")
}

/// "Mia shares 24 cookies equally among 4 friends. How many cookies does each friend get?"
fn equal_shares(rng: &mut ChaCha8Rng) -> String {
    let (name, things) = (pick(rng, NAMES), pick(rng, COUNTABLES));
    let friends = rng.random_range(2..=8);
    let total = friends * rng.random_range(2..=9);
    format!(
        "{name} shares {total} {things} equally among {friends} friends. \
         How many {things} does each friend get?"
    )
}

/// "Tom has 45 marbles and gives away 18. How many marbles are left?"
fn gives_away(rng: &mut ChaCha8Rng) -> String {
    let (name, things) = (pick(rng, NAMES), pick(rng, COUNTABLES));
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
    let percent = pick(
        rng,
        &["5", "10", "15", "20", "25", "30", "40", "50", "60", "75"],
    );
    let whole = 20 * rng.random_range(1..=20);
    format!("What is {percent} percent of {whole}?")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompts::BUILTIN_CHAT_PROMPTS;

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
            assert!(!is_held_out(&lower), "{}", prompt.text);
            for eval in &held_out {
                assert!(!lower.contains(eval.as_str()), "{} ~ {eval}", prompt.text);
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
