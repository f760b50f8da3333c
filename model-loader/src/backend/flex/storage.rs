//! `Flex` tensors as plain `f32` slices: read in place, updated in place, or made from values.

use burn::backend::Flex;
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use burn_flex::FlexTensor;

/// The CPU tensor behind `tensor` (a cheap shared handle, no copy) when it holds contiguous
/// `f32` values; read them with [`values`].
pub fn f32_storage<const D: usize>(tensor: &Tensor<Flex, D>) -> Option<FlexTensor> {
    let storage = tensor.clone().into_primitive().tensor();
    (storage.dtype() == DType::F32 && storage.as_slice::<f32>().is_some()).then_some(storage)
}

/// The values of a tensor [`f32_storage`] accepted.
pub fn values(storage: &FlexTensor) -> &[f32] {
    storage
        .as_slice::<f32>()
        .expect("f32_storage only returns contiguous f32 tensors")
}

/// `tensor` with `update` applied to its values in place (after a copy if the buffer is
/// shared) when it holds contiguous `f32` values; otherwise `fallback(tensor)`.
pub fn update_in_place_or<const D: usize>(
    tensor: Tensor<Flex, D>,
    update: impl FnOnce(&mut [f32]),
    fallback: impl FnOnce(Tensor<Flex, D>) -> Tensor<Flex, D>,
) -> Tensor<Flex, D> {
    let Some(mut storage) = f32_storage(&tensor) else {
        return fallback(tensor);
    };
    // Drop the caller's handle so that a buffer only it held is updated without a copy.
    drop(tensor);
    let (start, end) = storage
        .layout()
        .contiguous_offsets()
        .expect("f32_storage only returns contiguous tensors");
    update(&mut storage.storage_mut::<f32>()[start..end]);
    Tensor::from_primitive(TensorPrimitive::Float(storage))
}

/// A CPU tensor of `shape` holding `values` (row-major).
pub fn tensor_of<const D: usize>(values: Vec<f32>, shape: [usize; D]) -> Tensor<Flex, D> {
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_tensors_are_read_in_place() {
        let t = tensor_of(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]);
        let storage = f32_storage(&t).expect("a contiguous f32 tensor");
        assert_eq!(values(&storage), [1.0, 2.0, 3.0, 4.0]);
        // A transposed view is not contiguous: the caller falls back to burn's operations.
        assert!(f32_storage(&t.clone().transpose()).is_none());
        let narrowed = t.narrow(0, 1, 1);
        let storage = f32_storage(&narrowed).expect("a contiguous row range");
        assert_eq!(values(&storage), [3.0, 4.0]);
        // Other float types are left to burn's operations too.
        let half = tensor_of(vec![1.0f32], [1]).cast(DType::F16);
        assert!(f32_storage(&half).is_none());
    }

    #[test]
    fn updates_happen_in_place_without_touching_other_handles() {
        let t = tensor_of(vec![1.0f32, 2.0, 3.0], [3]);
        let kept = t.clone();
        let unreachable = |_| panic!("a contiguous f32 tensor is updated in place");
        let doubled = update_in_place_or(t, |v| v.iter_mut().for_each(|x| *x *= 2.0), unreachable);
        assert_eq!(doubled.to_data().to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0]);
        // The other handle shared the buffer, so it was copied first.
        assert_eq!(
            kept.clone().to_data().to_vec::<f32>().unwrap(),
            [1.0, 2.0, 3.0]
        );
        let tail = update_in_place_or(kept.narrow(0, 1, 2), |v| v[0] = 9.0, unreachable);
        assert_eq!(tail.to_data().to_vec::<f32>().unwrap(), [9.0, 3.0]);
        let transposed = tensor_of(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]).transpose();
        let fell_back = update_in_place_or(transposed, |_| panic!("not contiguous"), |t| t * 10.0);
        assert_eq!(
            fell_back.to_data().to_vec::<f32>().unwrap(),
            [10.0, 30.0, 20.0, 40.0]
        );
    }
}
