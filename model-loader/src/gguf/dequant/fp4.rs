//! The 4-bit float types MXFP4 and NVFP4: E2M1 values (stored doubled, as integers) times a
//! per-block or per-sub-block scale that also halves them back.

use super::bits::{fill, grouped_planes, planes};
use std::iter::once;

/// The E2M1 values of the 16 codes, doubled so they are integers.
const E2M1_DOUBLED: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// The doubled E2M1 value of code `q` as f32.
fn e2m1_doubled(q: u8) -> f32 {
    f32::from(E2M1_DOUBLED[usize::from(q)])
}

/// Half the E8M0 scale `2^(e - 127)`, built from its bits as ggml does (for `e < 2` the
/// result is a subnormal f32: `2^-128` or `2^-127`).
fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// Half the unsigned E4M3 scale `x` (bias 7, no infinities; `0x7F`, its NaN, reads as 0).
fn ue4m3_half(x: u8) -> f32 {
    let exponent = i32::from((x >> 3) & 0x0F);
    let mantissa = f32::from(x & 0x07);
    if x == 0 || x == 0x7F {
        0.0
    } else if exponent == 0 {
        mantissa * 2f32.powi(-9) * 0.5
    } else {
        (1.0 + mantissa / 8.0) * 2f32.powi(exponent - 7) * 0.5
    }
}

/// MXFP4 (17 bytes): an E8M0 exponent byte, 16 bytes of codes (Q4_0's order); value
/// `e8m0_half(e) * doubled(q)`.
pub(super) fn mxfp4(block: &[u8], out: &mut [f32]) {
    let d = e8m0_half(block[0]);
    fill(out, 32, once(d), planes(&block[1..17], 4), |d, q| {
        d * e2m1_doubled(q)
    });
}

/// NVFP4 (36 bytes): four UE4M3 scale bytes, then four groups of 8 bytes of codes (16 values
/// each, low nibbles first); sub-block `k` (16 values): `ue4m3_half(s_k) * doubled(q)`.
pub(super) fn nvfp4(block: &[u8], out: &mut [f32]) {
    let scales = block[..4].iter().map(|&s| ue4m3_half(s));
    fill(
        out,
        16,
        scales,
        grouped_planes(&block[4..36], 8, 4),
        |d, q| d * e2m1_doubled(q),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_decode_to_half_their_value() {
        assert_eq!(e8m0_half(127), 0.5);
        assert_eq!(e8m0_half(128), 1.0);
        assert_eq!(e8m0_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_half(0), 2f32.powi(-128));
        // UE4M3 0x38 = exponent 7, mantissa 0 = 1.0; 0x3C = 1.5; 0x01 = 2^-9.
        assert_eq!(ue4m3_half(0x38), 0.5);
        assert_eq!(ue4m3_half(0x3C), 0.75);
        assert_eq!(ue4m3_half(0x01), 2f32.powi(-10));
        assert_eq!(ue4m3_half(0x7F), 0.0);
    }
}
