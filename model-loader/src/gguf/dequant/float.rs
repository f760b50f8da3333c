//! Plain floating-point elements: one value per "block".

use super::bits::f16_at;
use half::bf16;

/// One little-endian f32, bits unchanged.
pub(super) fn f32_value(bytes: &[u8], out: &mut [f32]) {
    out[0] = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
}

/// One little-endian IEEE half.
pub(super) fn f16_value(bytes: &[u8], out: &mut [f32]) {
    out[0] = f16_at(bytes, 0);
}

/// One little-endian bfloat16 (the upper half of an f32).
pub(super) fn bf16_value(bytes: &[u8], out: &mut [f32]) {
    out[0] = bf16::from_le_bytes([bytes[0], bytes[1]]).to_f32();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn each(decode: fn(&[u8], &mut [f32]), bytes: &[u8], width: usize) -> Vec<f32> {
        bytes
            .chunks_exact(width)
            .map(|b| {
                let mut v = [f32::NAN];
                decode(b, &mut v);
                v[0]
            })
            .collect()
    }

    #[test]
    fn f32_f16_bf16_are_widened_exactly() {
        let f32_bytes: Vec<u8> = [1.5f32, -0.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(each(f32_value, &f32_bytes, 4), [1.5, -0.25]);
        // 0x3C00 = 1.0, 0xC000 = -2.0, 0x0001 = smallest subnormal 2^-24.
        let f16_bytes = [0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00];
        assert_eq!(each(f16_value, &f16_bytes, 2), [1.0, -2.0, 2f32.powi(-24)]);
        // bf16 0x3FC0 = 1.5, 0xC120 = -10.0.
        let bf16_bytes = [0xC0, 0x3F, 0x20, 0xC1];
        assert_eq!(each(bf16_value, &bf16_bytes, 2), [1.5, -10.0]);
    }
}
