//! [`materialize`]: draws the values of a freshly initialized module now, in one fixed order.
//!
//! burn initializes parameters lazily, on first use; a module cloned before that gets its own
//! independent draw, and parameters first used on worker threads draw from the random stream in
//! whatever order the threads run. Materializing right after `init` makes a seeded
//! initialization reproducible and its clones identical.

use burn::module::Module;
use burn::tensor::backend::Backend;

/// `module` with every parameter initialized, visited in declaration order.
pub fn materialize<B: Backend, M: Module<B>>(module: M) -> M {
    let record = module.clone().into_record();
    module.load_record(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::nn::LinearConfig;

    #[test]
    fn clones_of_a_materialized_module_are_identical() {
        let device = Default::default();
        let lazy = LinearConfig::new(4, 3).init::<Flex>(&device);
        let a = lazy.clone().weight.val().into_data();
        let b = lazy.weight.val().into_data();
        assert_ne!(a, b, "lazy clones draw independently");

        let eager = materialize(LinearConfig::new(4, 3).init::<Flex>(&device));
        let a = eager.clone().weight.val().into_data();
        let b = eager.weight.val().into_data();
        assert_eq!(a, b);
    }
}
