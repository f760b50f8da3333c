//! Byte-level mutations of valid files: flipped bits, truncation, inserted and removed runs,
//! and integers written over the bytes (lengths and counts in binary formats).

use proptest::collection::vec;
use proptest::prelude::*;

/// One change to a byte string. Positions are taken modulo the current length.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// XOR one byte with a non-zero mask.
    Flip { at: usize, mask: u8 },
    /// Keep only the first `keep` bytes.
    Truncate { keep: usize },
    /// Write a little-endian `u64` over 8 bytes (a length, count or offset in GGUF).
    PutU64 { at: usize, value: u64 },
    /// Write a little-endian `u32` over 4 bytes (a type code or dimension count in GGUF).
    PutU32 { at: usize, value: u32 },
    /// Insert bytes.
    Insert { at: usize, bytes: Vec<u8> },
    /// Remove up to `len` bytes.
    Remove { at: usize, len: usize },
}

/// Integers that break careless parsers: extremes, powers of two, small counts.
fn interesting_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX / 2),
        Just(1 << 32),
        Just(1 << 40),
        Just(u64::from(u32::MAX)),
        0..4096u64,
        any::<u64>(),
    ]
}

/// One mutation.
pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), 1..=255u8).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        1 => any::<usize>().prop_map(|keep| Mutation::Truncate { keep }),
        3 => (any::<usize>(), interesting_u64()).prop_map(|(at, value)| Mutation::PutU64 { at, value }),
        2 => (any::<usize>(), interesting_u64()).prop_map(|(at, value)| Mutation::PutU32 {
            at,
            value: value as u32,
        }),
        1 => (any::<usize>(), vec(any::<u8>(), 1..16)).prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        1 => (any::<usize>(), 1..64usize).prop_map(|(at, len)| Mutation::Remove { at, len }),
    ]
}

/// One to four mutations.
pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    vec(mutation(), 1..=4)
}

/// `bytes` with `mutations` applied in order.
pub fn apply(bytes: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for m in mutations {
        let len = out.len().max(1);
        match m {
            Mutation::Flip { at, mask } => {
                if let Some(b) = out.get_mut(at % len) {
                    *b ^= mask;
                }
            }
            Mutation::Truncate { keep } => out.truncate(keep % len),
            Mutation::PutU64 { at, value } => put(&mut out, at % len, &value.to_le_bytes()),
            Mutation::PutU32 { at, value } => put(&mut out, at % len, &value.to_le_bytes()),
            Mutation::Insert { at, bytes } => {
                let at = (at % len).min(out.len());
                out.splice(at..at, bytes.iter().copied());
            }
            Mutation::Remove { at, len: n } => {
                let at = (at % len).min(out.len());
                let end = (at + n).min(out.len());
                out.drain(at..end);
            }
        }
    }
    out
}

/// Overwrites `out[at..]` with `bytes`, as far as `out` reaches.
fn put(out: &mut [u8], at: usize, bytes: &[u8]) {
    for (dst, &src) in out.iter_mut().skip(at).zip(bytes) {
        *dst = src;
    }
}
