//! `train-eagle --init-head`: a saved head loads as the head to train further, and a head of
//! the other method is a clear error.

use aquila_examples::heads::write_untrained_eagle1;
use aquila_examples::training::{load_head, DraftHead, HeadMethod};
use aquila_model_loader::config::LlamaConfig;
use burn::backend::{Autodiff, Flex};

use crate::tiny::tiny_model;

type Train = Autodiff<Flex>;

#[test]
fn a_saved_head_starts_training_and_the_wrong_method_is_refused() {
    let model = tiny_model();
    let target = LlamaConfig::from_file(&model.path().join("config.json")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_untrained_eagle1(model.path(), dir.path()).unwrap();
    let device = Default::default();
    let head = load_head::<Train>(HeadMethod::Eagle, dir.path(), &target, &device).unwrap();
    assert!(matches!(head, DraftHead::Eagle1(_)));
    let error = load_head::<Train>(HeadMethod::Eagle3, dir.path(), &target, &device)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("an eagle head, but --method is eagle3"),
        "{error}"
    );
    let missing = load_head::<Train>(
        HeadMethod::Eagle,
        &dir.path().join("none"),
        &target,
        &device,
    )
    .unwrap_err();
    assert!(format!("{missing:#}").contains("loading the head to start from"));
}
