//! Transparent huge pages for the `f32` weights of a CPU model (see `crate::huge_pages`); the
//! packed Q8_0 and bfloat16 weights are advised when they are made.

use burn::backend::Flex;
use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;

use super::storage::{f32_storage, values};

/// Advises every `f32` parameter buffer of `module` that spans at least one huge page.
pub fn back_with_huge_pages<M: Module<Flex>>(module: &M) {
    module.visit(&mut HugePageAdvisor);
}

/// The visitor advising each float parameter's buffer.
struct HugePageAdvisor;

impl ModuleVisitor<Flex> for HugePageAdvisor {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Flex, D>>) {
        if let Some(storage) = f32_storage(&param.val()) {
            crate::huge_pages::back_with_huge_pages(values(&storage));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::flex::storage::tensor_of;

    #[test]
    fn advising_leaves_values_unchanged() {
        let n = 3 * crate::huge_pages::HUGE_PAGE / 4 + 5;
        let values_in: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let tensor = tensor_of(values_in.clone(), [n]);
        let param = Param::from_tensor(tensor);
        HugePageAdvisor.visit_float(&param);
        let storage = f32_storage(&param.val()).unwrap();
        assert_eq!(values(&storage), values_in.as_slice());
    }
}
