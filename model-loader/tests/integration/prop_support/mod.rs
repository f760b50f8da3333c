//! Support for the parser properties (`props_*`): input mutations, JSON edits, and the
//! allocation probe.

#![allow(dead_code)]

pub mod alloc_probe;
pub mod json_edit;
pub mod mutation;

pub use alloc_probe::largest_allocation;

/// Runs `parse` on an input of `input_len` bytes and fails the property unless its largest
/// single allocation stays within `per_byte` bytes per input byte plus 1 MiB: a parser must
/// not trust a declared length or count beyond what the input can hold.
pub fn assert_bounded_allocation<T>(
    what: &str,
    input_len: usize,
    per_byte: usize,
    parse: impl FnOnce() -> T,
) -> T {
    let (result, largest) = largest_allocation(parse);
    let cap = (1 << 20) + per_byte * input_len;
    assert!(
        largest <= cap,
        "{what}: a {largest}-byte allocation for a {input_len}-byte input (cap {cap})"
    );
    result
}
