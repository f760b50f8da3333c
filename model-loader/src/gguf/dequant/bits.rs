//! Reading packed fields out of a block: little-endian scalars and the bit layouts GGML packs
//! its quants in.

use half::f16;

/// The f16 at `bytes[at..at + 2]`, widened to f32 (exactly).
pub(super) fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// The little-endian `u16` at `bytes[at..at + 2]`.
pub(super) fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

/// The little-endian `u32` at `bytes[at..at + 4]`.
pub(super) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The `bits`-wide fields of `bytes` (`bits` divides 8), plane by plane: first the lowest
/// field of every byte, then the next field of every byte, and so on. This is how GGML packs
/// nibbles and 2-bit quants: value `j` of a 16-byte Q4_0 run is the low nibble of byte `j`,
/// value `16 + j` its high nibble.
pub(super) fn planes(bytes: &[u8], bits: u32) -> impl Iterator<Item = u8> + '_ {
    let mask = ((1u16 << bits) - 1) as u8;
    (0..8 / bits).flat_map(move |plane| bytes.iter().map(move |&b| (b >> (plane * bits)) & mask))
}

/// [`planes`] of each consecutive `group` bytes in turn (K-quants pack each group of values
/// separately).
pub(super) fn grouped_planes(
    bytes: &[u8],
    group: usize,
    bits: u32,
) -> impl Iterator<Item = u8> + '_ {
    bytes
        .chunks_exact(group)
        .flat_map(move |chunk| planes(chunk, bits))
}

/// The nibbles of `bytes` byte by byte, low nibble first (how sub-block scales are packed).
pub(super) fn nibbles(bytes: &[u8]) -> impl Iterator<Item = u8> + '_ {
    bytes.iter().flat_map(|&b| [b & 0x0F, b >> 4])
}

/// Nibble `i` of `bytes` in [`nibbles`] order.
pub(super) fn nibble(bytes: &[u8], i: usize) -> u8 {
    (bytes[i / 2] >> (4 * (i % 2))) & 0x0F
}

/// Bit `i` of `bytes` read as one little-endian bit string.
pub(super) fn bit(bytes: &[u8], i: usize) -> u8 {
    (bytes[i / 8] >> (i % 8)) & 1
}

/// Fills `out` one sub-block of `sub_len` values at a time: sub-block `k` takes the `k`th
/// item of `params` (its scale, minimum...), and each of its values the next item of `quants`,
/// combined by `value(param, quant)`. Every quantized type walks its block through this.
pub(super) fn fill<P: Copy, Q>(
    out: &mut [f32],
    sub_len: usize,
    params: impl IntoIterator<Item = P>,
    quants: impl IntoIterator<Item = Q>,
    value: impl Fn(P, Q) -> f32,
) {
    let mut quants = quants.into_iter();
    for (values, param) in out.chunks_exact_mut(sub_len).zip(params) {
        for (v, q) in values.iter_mut().zip(&mut quants) {
            *v = value(param, q);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planes_take_each_field_of_every_byte_in_turn() {
        let bytes = [0b1110_0100, 0b0001_1011];
        assert_eq!(planes(&bytes, 4).collect::<Vec<_>>(), [4, 11, 14, 1]);
        assert_eq!(
            planes(&bytes, 2).collect::<Vec<_>>(),
            [0, 3, 1, 2, 2, 1, 3, 0]
        );
        assert_eq!(
            grouped_planes(&bytes, 1, 4).collect::<Vec<_>>(),
            [4, 14, 11, 1]
        );
        assert_eq!(nibbles(&bytes).collect::<Vec<_>>(), [4, 14, 11, 1]);
        assert_eq!((0..16).map(|i| bit(&bytes, i)).sum::<u8>(), 4 + 4);
        assert_eq!(bit(&bytes, 2), 1);
        assert_eq!(bit(&bytes, 3), 0);
    }

    #[test]
    fn fill_gives_each_sub_block_its_parameter() {
        let mut out = [0.0; 6];
        fill(&mut out, 3, [10.0, 20.0], 0..6, |p: f32, q| p + q as f32);
        assert_eq!(out, [10.0, 11.0, 12.0, 23.0, 24.0, 25.0]);
    }
}
