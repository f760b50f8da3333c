//! The K-quants Q2_K to Q6_K: 256 values in sub-blocks of 16 or 32, each sub-block with its own
//! small integer scale (and minimum) that multiplies the block's f16 super-scale `d` (`dmin`).
//! Quants are packed per group of 32 (or 64) bytes, plane by plane ([`planes`]).

use super::bits::{f16_at, fill, grouped_planes, planes};

/// Q2_K (84 bytes): 16 bytes of 4-bit scale/minimum pairs, 64 bytes of 2-bit quants, `d`,
/// `dmin`. Sub-block `k` (16 values): `d * (scale & 15) * q - dmin * (scale >> 4)`.
pub(super) fn q2_k(block: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(block, 80), f16_at(block, 82));
    let params = block[..16]
        .iter()
        .map(|&s| (d * f32::from(s & 0x0F), dmin * f32::from(s >> 4)));
    let quants = grouped_planes(&block[16..80], 32, 2);
    fill(out, 16, params, quants, |(scale, min), q| {
        scale * f32::from(q) - min
    });
}

/// Q3_K (110 bytes): 32 bytes of high bits, 64 bytes of 2-bit low parts, 12 bytes of 6-bit
/// scales, `d`. The high bit *clear* subtracts 4: `q = low - 4 * !high`, in `-4..4`. Sub-block
/// `k` (16 values): `d * (scale - 32) * q`.
pub(super) fn q3_k(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 108);
    // Scale k: low nibble from bytes 96..104 (plane order), top 2 bits from bytes 104..108.
    let scales = planes(&block[96..104], 4)
        .zip(planes(&block[104..108], 2))
        .map(|(low, high)| d * f32::from((low | (high << 4)) as i8 - 32));
    let quants = grouped_planes(&block[32..96], 32, 2)
        .zip(planes(&block[..32], 1))
        .map(|(low, high)| low as i8 - (((high ^ 1) << 2) as i8));
    fill(out, 16, scales, quants, |scale, q| scale * f32::from(q));
}

/// Unpacks the eight 6-bit scales and eight 6-bit minimums of Q4_K and Q5_K from 12 bytes:
/// bytes 0..4 hold scales 0..4 (low 6 bits) and the top bits of scales 4..8, bytes 4..8 the
/// same for the minimums, bytes 8..12 the low nibbles of scales (low half) and minimums (high
/// half) 4..8.
fn scales_and_mins(packed: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (sc, mn, low) = (&packed[0..4], &packed[4..8], &packed[8..12]);
    let mut scales = [0u8; 8];
    let mut mins = [0u8; 8];
    for j in 0..4 {
        scales[j] = sc[j] & 0x3F;
        mins[j] = mn[j] & 0x3F;
        scales[4 + j] = (low[j] & 0x0F) | ((sc[j] >> 2) & 0x30);
        mins[4 + j] = (low[j] >> 4) | ((mn[j] >> 2) & 0x30);
    }
    (scales, mins)
}

/// The per-sub-block `(d * scale, dmin * min)` of a Q4_K/Q5_K block.
fn scale_min_params(block: &[u8]) -> impl Iterator<Item = (f32, f32)> {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let (scales, mins) = scales_and_mins(&block[4..16]);
    scales
        .into_iter()
        .zip(mins)
        .map(move |(s, m)| (d * f32::from(s), dmin * f32::from(m)))
}

/// Q4_K (144 bytes): `d`, `dmin`, 12 bytes of scales and minimums, 128 bytes of nibbles.
/// Sub-block `k` (32 values): `d * scale_k * q - dmin * min_k`.
pub(super) fn q4_k(block: &[u8], out: &mut [f32]) {
    let quants = grouped_planes(&block[16..144], 32, 4);
    fill(
        out,
        32,
        scale_min_params(block),
        quants,
        |(scale, min), q| scale * f32::from(q) - min,
    );
}

/// Q5_K (176 bytes): as Q4_K with 32 bytes of fifth bits (bytes 16..48, plane order) before
/// the nibbles.
pub(super) fn q5_k(block: &[u8], out: &mut [f32]) {
    let quants = grouped_planes(&block[48..176], 32, 4)
        .zip(planes(&block[16..48], 1))
        .map(|(low, high)| low | (high << 4));
    fill(
        out,
        32,
        scale_min_params(block),
        quants,
        |(scale, min), q| scale * f32::from(q) - min,
    );
}

/// Q6_K (210 bytes): 128 bytes of low nibbles (groups of 64), 64 bytes of 2-bit high parts
/// (groups of 32), 16 signed scales, `d`. Sub-block `k` (16 values): `d * scale_k * (q - 32)`.
pub(super) fn q6_k(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 208);
    let scales = block[192..208].iter().map(|&s| d * f32::from(s as i8));
    let quants = grouped_planes(&block[..128], 64, 4)
        .zip(grouped_planes(&block[128..192], 32, 2))
        .map(|(low, high)| (low | (high << 4)) as i8 - 32);
    fill(out, 16, scales, quants, |scale, q| scale * f32::from(q));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn six_bit_scales_and_mins_unpack_from_twelve_bytes() {
        // Scales 0..8 = 1, 2, ..., 8 | 0x20 for the upper four; minimums = 63 - scale.
        let scales: Vec<u8> = (1..=8).map(|s| if s > 4 { s | 0x20 } else { s }).collect();
        let mins: Vec<u8> = scales.iter().map(|s| 63 - s).collect();
        let mut packed = [0u8; 12];
        for j in 0..4 {
            packed[j] = scales[j] | ((scales[4 + j] >> 4) << 6);
            packed[4 + j] = mins[j] | ((mins[4 + j] >> 4) << 6);
            packed[8 + j] = (scales[4 + j] & 0x0F) | ((mins[4 + j] & 0x0F) << 4);
        }
        let (got_scales, got_mins) = scales_and_mins(&packed);
        assert_eq!(got_scales.to_vec(), scales);
        assert_eq!(got_mins.to_vec(), mins);
    }

    #[test]
    fn q6_k_centres_six_bit_quants_on_32() {
        // d = 1, every scale 1, low nibbles 0, high parts 2: q = 32 -> value 0; then make the
        // first low nibble 1 -> value 1.
        let mut block = vec![0u8; 210];
        block[128..192].fill(0b1010_1010);
        block[192..208].fill(1);
        block[208..210].copy_from_slice(&[0x00, 0x3C]);
        block[0] = 1;
        let mut out = vec![f32::NAN; 256];
        q6_k(&block, &mut out);
        assert_eq!(out[0], 1.0);
        assert!(out[1..].iter().all(|&v| v == 0.0));
    }
}
