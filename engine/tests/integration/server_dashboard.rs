//! The Grafana dashboard in `deploy/grafana/` queries only metrics the engine exposes.

use std::collections::BTreeSet;
use std::path::PathBuf;

use aquila_engine::SpeculativeConfig;
use serde_json::Value;

use crate::common::spec::with_speculative;
use crate::common::{config, tiny_model};
use aquila_engine::Llm;

/// The repository's `deploy/` folder.
pub fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the engine crate lives in the workspace")
        .join("deploy")
}

/// Every PromQL expression of the dashboard's panels.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let mut queries = Vec::new();
    collect_exprs(dashboard, &mut queries);
    queries
}

fn collect_exprs(value: &Value, queries: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                match (key.as_str(), child) {
                    ("expr", Value::String(expr)) => queries.push(expr.clone()),
                    _ => collect_exprs(child, queries),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_exprs(item, queries)),
        _ => {}
    }
}

/// The `aquila_` metric names a query mentions.
fn metric_names(query: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = query;
    while let Some(start) = rest.find("aquila_") {
        let name: String = rest[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[start + name.len()..];
        names.insert(name);
    }
    names
}

#[test]
fn every_metric_the_dashboard_queries_is_exposed() {
    let path = deploy_dir().join("grafana/aquila-dashboard.json");
    let text = std::fs::read_to_string(&path).expect("the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 12, "only {} queries", queries.len());

    let model = tiny_model();
    let spec = SpeculativeConfig::ngram(3);
    let llm = Llm::new(with_speculative(config(model.path()), spec)).unwrap();
    let exposition = llm.recorder().exposition_text().unwrap();
    let exposed: BTreeSet<&str> = exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split(['{', ' ']).next())
        .collect();

    let queried: BTreeSet<String> = queries.iter().flat_map(|q| metric_names(q)).collect();
    let missing: Vec<&String> = queried
        .iter()
        .filter(|name| !exposed.contains(name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries unexposed metrics: {missing:?}"
    );
    for family in [
        "aquila_spec_decode_num_accepted_tokens_per_pos_total",
        "aquila_time_to_first_token_seconds_bucket",
        "aquila_inter_token_latency_seconds_bucket",
        "aquila_kv_cache_usage_perc",
        "aquila_num_requests_waiting",
        "aquila_model_forward_time_seconds_sum",
        "aquila_spec_decode_draft_time_seconds_sum",
    ] {
        assert!(
            queried.contains(family),
            "the dashboard has no panel on {family}"
        );
    }
}
