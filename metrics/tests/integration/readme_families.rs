//! The README's family table lists every family under both namespaces.

use aquila_metrics::{Family, Namespace};

#[test]
fn readme_lists_every_family_in_both_namespaces() {
    let readme = include_str!("../../README.md");
    for family in Family::ALL {
        let row = readme
            .lines()
            .find(|line| line.starts_with(&format!("| `{family:?}` |")))
            .unwrap_or_else(|| panic!("README has no row for {family:?}"));
        for namespace in [Namespace::Aquila, Namespace::Vllm] {
            let name = family.exposition_name(namespace);
            assert!(
                row.contains(&format!("`{name}`")),
                "README row of {family:?} lacks `{name}`: {row}"
            );
        }
    }
}
