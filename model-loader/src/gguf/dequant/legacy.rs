//! The 32-value formats: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0. One f16 scale `d` (and for the `_1`
//! types an f16 minimum `m`) per block; the 16 bytes of nibbles hold values `0..16` in their
//! low halves and values `16..32` in their high halves, and Q5's 32 fifth bits sit in one
//! little-endian `u32` (bit `i` for value `i`).

use super::bits::{f16_at, fill, planes, u32_at};
use std::iter::once;

/// Q4_0 (18 bytes): `d`, 16 bytes of nibbles `q`; value `d * (q - 8)`.
pub(super) fn q4_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    fill(out, 32, once(d), planes(&block[2..18], 4), |d, q| {
        d * f32::from(q as i8 - 8)
    });
}

/// Q4_1 (20 bytes): `d`, `m`, 16 bytes of nibbles `q`; value `d * q + m`.
pub(super) fn q4_1(block: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    fill(
        out,
        32,
        once((d, m)),
        planes(&block[4..20], 4),
        |(d, m), q| d * f32::from(q) + m,
    );
}

/// The 5-bit quants of a Q5 block: the low nibbles in `low`, the fifth bits in `high`.
fn five_bit(low: &[u8], high: u32) -> impl Iterator<Item = u8> + '_ {
    planes(low, 4)
        .enumerate()
        .map(move |(i, q)| q | (((high >> i) & 1) as u8) << 4)
}

/// Q5_0 (22 bytes): `d`, fifth bits, 16 bytes of nibbles; value `d * (q - 16)`.
pub(super) fn q5_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let quants = five_bit(&block[6..22], u32_at(block, 2));
    fill(out, 32, once(d), quants, |d, q| d * f32::from(q as i8 - 16));
}

/// Q5_1 (24 bytes): `d`, `m`, fifth bits, 16 bytes of nibbles; value `d * q + m`.
pub(super) fn q5_1(block: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    let quants = five_bit(&block[8..24], u32_at(block, 4));
    fill(out, 32, once((d, m)), quants, |(d, m), q| {
        d * f32::from(q) + m
    });
}

/// Q8_0 (34 bytes): `d`, 32 signed bytes `q`; value `d * q`.
pub(super) fn q8_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    fill(out, 32, once(d), &block[2..34], |d, &q| {
        d * f32::from(q as i8)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(decode: fn(&[u8], &mut [f32]), block: &[u8]) -> Vec<f32> {
        let mut out = vec![f32::NAN; 32];
        decode(block, &mut out);
        out
    }

    #[test]
    fn q8_0_scales_signed_bytes() {
        // d = 0.5 (f16 0x3800); q = 0, 1, -1, 127, -128, then 2 for the rest.
        let mut block = vec![0x00, 0x38];
        let qs: Vec<i8> = [0, 1, -1, 127, -128]
            .into_iter()
            .chain(std::iter::repeat_n(2, 27))
            .collect();
        block.extend(qs.iter().map(|&q| q as u8));
        let out = run(q8_0, &block);
        assert_eq!(&out[..5], &[0.0, 0.5, -0.5, 63.5, -64.0]);
        assert!(out[5..].iter().all(|&v| v == 1.0));
    }

    #[test]
    fn q4_0_puts_low_nibbles_first_and_offsets_by_eight() {
        // d = 2.0 (f16 0x4000); byte j = (high nibble 15 - j % 16) << 4 | (low nibble j).
        let mut block = vec![0x00, 0x40];
        block.extend((0u8..16).map(|j| ((15 - j) << 4) | j));
        let out = run(q4_0, &block);
        for j in 0..16 {
            assert_eq!(out[j], 2.0 * (j as f32 - 8.0), "low {j}");
            assert_eq!(out[16 + j], 2.0 * (7.0 - j as f32), "high {j}");
        }
    }

    #[test]
    fn q4_1_multiplies_then_adds_the_minimum() {
        // d = 0.1 (f16 0x2E66 = 0.0999755859375), m = -1.0 (f16 0xBC00).
        let mut block = vec![0x66, 0x2E, 0x00, 0xBC];
        block.extend((0u8..16).map(|j| (j << 4) | (15 - j)));
        let out = run(q4_1, &block);
        let d = 1638.0f32 / 16384.0; // f16 0x2E66 exactly
        for j in 0..16 {
            assert_eq!(out[j], d * (15 - j) as f32 + -1.0, "low {j}");
            assert_eq!(out[16 + j], d * j as f32 + -1.0, "high {j}");
        }
        assert_eq!(out[0], 8186.0 / 16384.0); // d * 15 - 1, exact in f32.
    }

    #[test]
    fn q5_takes_the_fifth_bit_of_value_i_from_bit_i() {
        // d = 1.0; all nibbles 15; fifth bits set for values 0 and 31 only.
        let mut block = vec![0x00, 0x3C];
        block.extend(((1u32 << 31) | 1).to_le_bytes());
        block.extend([0xFF; 16]);
        let out = run(q5_0, &block);
        assert_eq!((out[0], out[1], out[30], out[31]), (15.0, -1.0, -1.0, 15.0));
        // Q5_1 with d = 1, m = 0.5 and the same quants: q + 0.5.
        let mut block = vec![0x00, 0x3C, 0x00, 0x38];
        block.extend(((1u32 << 31) | 1).to_le_bytes());
        block.extend([0xFF; 16]);
        let out = run(q5_1, &block);
        assert_eq!((out[0], out[1], out[31]), (31.5, 15.5, 31.5));
    }
}
