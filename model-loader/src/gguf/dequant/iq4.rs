//! The non-linear 4-bit types IQ4_NL and IQ4_XS: each nibble indexes a fixed table of 16
//! levels (denser near zero) that an f16 scale multiplies.

use super::bits::{f16_at, fill, grouped_planes, nibbles, planes, u16_at};
use std::iter::once;

/// The 16 levels a 4-bit IQ4 index selects.
const LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The level of index `q` as f32.
fn level(q: u8) -> f32 {
    f32::from(LEVELS[usize::from(q)])
}

/// IQ4_NL (18 bytes): `d`, 16 bytes of nibbles (Q4_0's order); value `d * level(q)`.
pub(super) fn iq4_nl(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    fill(out, 32, once(d), planes(&block[2..18], 4), |d, q| {
        d * level(q)
    });
}

/// IQ4_XS (136 bytes): `d`, a `u16` of 2-bit scale high parts, 4 bytes of scale nibbles, 128
/// bytes of nibbles (groups of 16 bytes). Sub-block `k` (32 values) has the 6-bit scale
/// `s_k` and values `d * (s_k - 32) * level(q)`.
pub(super) fn iq4_xs(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let high = u16_at(block, 2);
    let scales = nibbles(&block[4..8]).enumerate().map(|(k, low)| {
        let scale = low | ((((high >> (2 * k)) & 3) as u8) << 4);
        d * f32::from(scale as i8 - 32)
    });
    let quants = grouped_planes(&block[8..136], 16, 4);
    fill(out, 32, scales, quants, |scale, q| scale * level(q));
}
