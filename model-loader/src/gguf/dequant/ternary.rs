//! The ternary types TQ1_0 and TQ2_0: 256 values in {-1, 0, 1} times an f16 scale at the end
//! of the block.

use super::bits::{f16_at, fill, grouped_planes};
use std::iter::once;

/// TQ1_0 (54 bytes): 48 bytes holding five base-3 digits each, 4 bytes holding four each,
/// `d`. Digit `p` of byte `x` is read as the top base-3 digit of `x * 3^p` (in `u8`,
/// wrapping), mapped to `-1..=1`. Values come digit-plane by digit-plane within each of the
/// runs of 32, 16 and 4 bytes.
pub(super) fn tq1_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 52);
    let shifted = digit_planes(&block[0..32], 5)
        .chain(digit_planes(&block[32..48], 5))
        .chain(digit_planes(&block[48..52], 4));
    fill(out, 256, once(d), shifted, |d, x| {
        d * f32::from(((u16::from(x) * 3) >> 8) as i8 - 1)
    });
}

/// Each byte of `bytes` times `3^p` (wrapping) for `p` in `0..digits`, plane by plane: the top
/// base-3 digit of the product is digit `p` of the byte.
fn digit_planes(bytes: &[u8], digits: usize) -> impl Iterator<Item = u8> + '_ {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    POW3[..digits]
        .iter()
        .flat_map(move |&p| bytes.iter().map(move |&x| x.wrapping_mul(p)))
}

/// TQ2_0 (66 bytes): 64 bytes of 2-bit values `q` (groups of 32 bytes), `d`; value
/// `d * (q - 1)`.
pub(super) fn tq2_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 64);
    fill(
        out,
        256,
        once(d),
        grouped_planes(&block[..64], 32, 2),
        |d, q| d * f32::from(q as i8 - 1),
    );
}
