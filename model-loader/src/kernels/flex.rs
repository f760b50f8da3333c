//! The CPU backend's tensors as plain slices, so that the model can hand its hot loops to the
//! kernels of this module when it runs on [`burn::backend::Flex`] in `f32`, and keep burn's
//! generic operations everywhere else (CUDA, `Autodiff` for training, other float types).
//!
//! The backend is recognized at run time from its tensor type, so model code stays generic
//! over `B: Backend`.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorPrimitive};
use burn_flex::FlexTensor;
use std::any::{Any, TypeId};

/// Whether `B`'s float tensors are the CPU backend's (`Flex`, not wrapped in `Autodiff`).
pub fn is_flex<B: Backend>() -> bool {
    TypeId::of::<B::FloatTensorPrimitive>() == TypeId::of::<FlexTensor>()
}

/// The CPU tensor behind `tensor` (a cheap shared handle, no copy) when `B` is `Flex` and the
/// tensor holds contiguous `f32` values; read them with `FlexTensor::as_slice::<f32>()`.
pub fn f32_storage<B: Backend, const D: usize>(tensor: &Tensor<B, D>) -> Option<FlexTensor> {
    if !is_flex::<B>() {
        return None;
    }
    let TensorPrimitive::Float(primitive) = tensor.clone().into_primitive() else {
        return None;
    };
    let boxed: Box<dyn Any> = Box::new(primitive);
    let flex = *boxed.downcast::<FlexTensor>().ok()?;
    (flex.dtype() == DType::F32 && flex.as_slice::<f32>().is_some()).then_some(flex)
}

/// `tensor` with `update` applied to its values in place (after a copy if the buffer is
/// shared) when `B` is `Flex` and the tensor holds contiguous `f32` values; otherwise
/// `tensor` back, untouched, for the caller's generic path.
pub fn update_in_place<B: Backend, const D: usize>(
    tensor: Tensor<B, D>,
    update: impl FnOnce(&mut [f32]),
) -> Result<Tensor<B, D>, Tensor<B, D>> {
    let Some(mut storage) = f32_storage(&tensor) else {
        return Err(tensor);
    };
    // Drop the caller's handle so that a buffer only it held is updated without a copy.
    drop(tensor);
    let (start, end) = storage
        .layout()
        .contiguous_offsets()
        .expect("f32_storage only returns contiguous tensors");
    update(&mut storage.storage_mut::<f32>()[start..end]);
    let boxed: Box<dyn Any> = Box::new(storage);
    let primitive = *boxed
        .downcast::<B::FloatTensorPrimitive>()
        .unwrap_or_else(|_| unreachable!("f32_storage checked that B is Flex"));
    Ok(Tensor::from_primitive(TensorPrimitive::Float(primitive)))
}

/// The values of a tensor [`f32_storage`] accepted.
pub fn values(storage: &FlexTensor) -> &[f32] {
    storage
        .as_slice::<f32>()
        .expect("f32_storage only returns contiguous f32 tensors")
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::TensorData;

    #[test]
    fn flex_f32_tensors_are_read_in_place() {
        let device = Default::default();
        let t = Tensor::<Flex, 2>::from_data(
            TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]),
            &device,
        );
        let storage = f32_storage(&t).expect("a contiguous f32 Flex tensor");
        assert_eq!(values(&storage), [1.0, 2.0, 3.0, 4.0]);
        // A transposed view is not contiguous: the caller falls back to burn's operations.
        assert!(f32_storage(&t.clone().transpose()).is_none());
        let narrowed = t.narrow(0, 1, 1);
        let storage = f32_storage(&narrowed).expect("a contiguous row range");
        assert_eq!(values(&storage), [3.0, 4.0]);
    }

    #[test]
    fn updates_happen_in_place_without_touching_other_handles() {
        let device = Default::default();
        let t = Tensor::<Flex, 1>::from_data([1.0f32, 2.0, 3.0], &device);
        let kept = t.clone();
        let doubled = update_in_place(t, |v| v.iter_mut().for_each(|x| *x *= 2.0)).unwrap();
        assert_eq!(doubled.to_data().to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0]);
        // The other handle shared the buffer, so it was copied first.
        assert_eq!(
            kept.clone().to_data().to_vec::<f32>().unwrap(),
            [1.0, 2.0, 3.0]
        );
        let tail = update_in_place(kept.narrow(0, 1, 2), |v| v[0] = 9.0).unwrap();
        assert_eq!(tail.to_data().to_vec::<f32>().unwrap(), [9.0, 3.0]);
        let generic = Tensor::<Autodiff<Flex>, 1>::from_data([1.0f32], &device);
        assert!(update_in_place(generic, |_| {}).is_err());
    }

    #[test]
    fn other_backends_are_not_flex() {
        assert!(is_flex::<Flex>());
        assert!(!is_flex::<Autodiff<Flex>>());
        let t = Tensor::<Autodiff<Flex>, 1>::from_data([1.0f32, 2.0], &Default::default());
        assert!(f32_storage(&t).is_none());
    }
}
