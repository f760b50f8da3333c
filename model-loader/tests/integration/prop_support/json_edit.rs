//! Structural edits of JSON documents: a node replaced by a hostile value (a huge or negative
//! number, the wrong type, an empty container) or removed, so parsers see well-formed JSON
//! with nonsense in it, not only syntax errors.

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::{json, Value};

/// One edit; `at` picks a node in pre-order, modulo the number of nodes.
#[derive(Debug, Clone)]
pub enum JsonEdit {
    /// Replace the node with a value.
    Replace { at: usize, with: Value },
    /// Remove the node from its parent object or array (the root is left alone).
    Remove { at: usize },
}

/// Values that are wrong in most places of a config or tokenizer file.
fn hostile_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(1)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(1u64 << 40)),
        Just(json!(1e308)),
        Just(json!(-0.0)),
        Just(json!(0.5)),
        Just(json!(true)),
        Just(json!("")),
        Just(json!("\u{0}\u{FFFF}")),
        Just(json!([])),
        Just(json!({})),
        Just(json!([[[[[]]]]])),
        any::<i64>().prop_map(|v| json!(v)),
        "[a-z_]{0,12}".prop_map(Value::String),
    ]
}

/// One to four edits.
pub fn json_edits() -> impl Strategy<Value = Vec<JsonEdit>> {
    let edit = prop_oneof![
        3 => (any::<usize>(), hostile_value()).prop_map(|(at, with)| JsonEdit::Replace { at, with }),
        1 => any::<usize>().prop_map(|at| JsonEdit::Remove { at }),
    ];
    vec(edit, 1..=4)
}

/// Number of nodes of `value` (itself included).
fn count(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(map) => map.values().map(count).sum(),
        _ => 0,
    }
}

/// `value` with `edits` applied in order.
pub fn apply_json(value: &Value, edits: &[JsonEdit]) -> Value {
    let mut out = value.clone();
    for edit in edits {
        let nodes = count(&out);
        match edit {
            JsonEdit::Replace { at, with } => {
                let mut target = at % nodes;
                replace(&mut out, &mut target, with);
            }
            JsonEdit::Remove { at } => {
                // Node 0 is the root: remove one of its descendants instead.
                let mut target = 1 + at % (nodes.max(2) - 1);
                remove(&mut out, &mut target);
            }
        }
    }
    out
}

/// Replaces the `target`th node (pre-order) under `node`; `target` counts down as nodes pass.
fn replace(node: &mut Value, target: &mut usize, with: &Value) -> bool {
    if *target == 0 {
        *node = with.clone();
        return true;
    }
    *target -= 1;
    match node {
        Value::Array(items) => items.iter_mut().any(|item| replace(item, target, with)),
        Value::Object(map) => map.values_mut().any(|item| replace(item, target, with)),
        _ => false,
    }
}

/// Removes the `target`th node (pre-order, `target >= 1`) under `node`.
fn remove(node: &mut Value, target: &mut usize) -> bool {
    *target -= 1;
    match node {
        Value::Array(items) => {
            for i in 0..items.len() {
                if *target == 0 {
                    items.remove(i);
                    return true;
                }
                if remove(&mut items[i], target) {
                    return true;
                }
            }
            false
        }
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                if *target == 0 {
                    map.remove(&key);
                    return true;
                }
                if remove(map.get_mut(&key).expect("key listed"), target) {
                    return true;
                }
            }
            false
        }
        _ => false,
    }
}

#[test]
fn edits_reach_every_node() {
    let doc = json!({"a": [1, {"b": 2}], "c": 3});
    // Pre-order over values (keys are not nodes): root, [1, {b}], 1, {b}, 2, 3.
    assert_eq!(count(&doc), 6);
    let replaced = apply_json(
        &doc,
        &[JsonEdit::Replace {
            at: 4,
            with: json!("x"),
        }],
    );
    assert_eq!(replaced, json!({"a": [1, {"b": "x"}], "c": 3}));
    let removed = apply_json(&doc, &[JsonEdit::Remove { at: 1 }]);
    assert_eq!(removed, json!({"a": [{"b": 2}], "c": 3}));
}
