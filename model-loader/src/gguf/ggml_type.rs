//! GGML tensor element types and their block layouts.

/// A GGML tensor type with a known block layout (the type codes of llama.cpp's `ggml_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// IEEE half float.
    F16,
    /// bfloat16.
    BF16,
    /// 32 values: f16 scale, 16 bytes of 4-bit values offset by 8.
    Q4_0,
    /// 32 values: f16 scale, f16 minimum, 16 bytes of 4-bit values.
    Q4_1,
    /// 32 values: f16 scale, 32 high bits, 16 bytes of low nibbles, offset by 16.
    Q5_0,
    /// 32 values: f16 scale, f16 minimum, 32 high bits, 16 bytes of low nibbles.
    Q5_1,
    /// 32 values: f16 scale, 32 signed bytes.
    Q8_0,
    /// 32 values: 8-bit with scale and sum (an intermediate format, never stored in models).
    Q8_1,
    /// K-quant: 256 values of 2 bits, 16 sub-blocks with 4-bit scales and minimums.
    Q2K,
    /// K-quant: 256 values of 3 bits, 16 sub-blocks with 6-bit scales.
    Q3K,
    /// K-quant: 256 values of 4 bits, 8 sub-blocks with 6-bit scales and minimums.
    Q4K,
    /// K-quant: 256 values of 5 bits, 8 sub-blocks with 6-bit scales and minimums.
    Q5K,
    /// K-quant: 256 values of 6 bits, 16 sub-blocks with 8-bit scales.
    Q6K,
    /// K-quant: 256 values of 8 bits (an intermediate format, never stored in models).
    Q8K,
    /// 256 values from an E8 lattice grid of 256 entries (about 2.06 bits per value).
    Iq2Xxs,
    /// 256 values from a grid of 512 entries with 4-bit scales (about 2.31 bits per value).
    Iq2Xs,
    /// 256 values from a grid of 1024 entries with explicit signs (about 2.5 bits per value).
    Iq2S,
    /// 256 values from a 4-wide grid of 256 entries (about 3.06 bits per value).
    Iq3Xxs,
    /// 256 values from a 4-wide grid of 512 entries (about 3.44 bits per value).
    Iq3S,
    /// 256 values from a ternary grid of 2048 entries (about 1.56 bits per value).
    Iq1S,
    /// 256 values from the IQ1_S grid with 3-bit sub-block scales (about 1.75 bits per value).
    Iq1M,
    /// 32 values: f16 scale, 4-bit indices into a non-linear table of 16 levels.
    Iq4Nl,
    /// 256 values: the IQ4_NL table with 6-bit sub-block scales.
    Iq4Xs,
    /// Ternary: 256 values of {-1, 0, 1} packed five to a byte, f16 scale.
    Tq1_0,
    /// Ternary: 256 values of {-1, 0, 1} in 2 bits each, f16 scale.
    Tq2_0,
    /// OCP microscaling FP4: 32 E2M1 values with a shared E8M0 exponent.
    Mxfp4,
    /// NVIDIA FP4: 64 E2M1 values in 4 sub-blocks, each with an unsigned E4M3 scale.
    Nvfp4,
    /// 128 values of 1 bit with an f16 scale (no reference dequantization in gguf-py).
    Q1_0,
    /// 8-bit integer.
    I8,
    /// 16-bit integer.
    I16,
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
    /// 64-bit float.
    F64,
}

/// A type's code, name and block layout.
struct Layout {
    id: u32,
    name: &'static str,
    block_len: u64,
    block_bytes: u64,
}

impl GgmlType {
    /// Every known type, in type-code order.
    pub const ALL: [GgmlType; 34] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q8_1,
        Self::Q2K,
        Self::Q3K,
        Self::Q4K,
        Self::Q5K,
        Self::Q6K,
        Self::Q8K,
        Self::Iq2Xxs,
        Self::Iq2Xs,
        Self::Iq3Xxs,
        Self::Iq1S,
        Self::Iq4Nl,
        Self::Iq3S,
        Self::Iq2S,
        Self::Iq4Xs,
        Self::I8,
        Self::I16,
        Self::I32,
        Self::I64,
        Self::F64,
        Self::Iq1M,
        Self::BF16,
        Self::Tq1_0,
        Self::Tq2_0,
        Self::Mxfp4,
        Self::Nvfp4,
        Self::Q1_0,
    ];

    /// The type's code, name and block layout (llama.cpp's `ggml_type_traits`).
    fn layout(self) -> Layout {
        let (id, name, block_len, block_bytes) = match self {
            Self::F32 => (0, "F32", 1, 4),
            Self::F16 => (1, "F16", 1, 2),
            Self::Q4_0 => (2, "Q4_0", 32, 2 + 16),
            Self::Q4_1 => (3, "Q4_1", 32, 2 + 2 + 16),
            Self::Q5_0 => (6, "Q5_0", 32, 2 + 4 + 16),
            Self::Q5_1 => (7, "Q5_1", 32, 2 + 2 + 4 + 16),
            Self::Q8_0 => (8, "Q8_0", 32, 2 + 32),
            Self::Q8_1 => (9, "Q8_1", 32, 4 + 32),
            Self::Q2K => (10, "Q2_K", 256, 16 + 64 + 2 + 2),
            Self::Q3K => (11, "Q3_K", 256, 32 + 64 + 12 + 2),
            Self::Q4K => (12, "Q4_K", 256, 2 + 2 + 12 + 128),
            Self::Q5K => (13, "Q5_K", 256, 2 + 2 + 12 + 32 + 128),
            Self::Q6K => (14, "Q6_K", 256, 128 + 64 + 16 + 2),
            Self::Q8K => (15, "Q8_K", 256, 4 + 256 + 32),
            Self::Iq2Xxs => (16, "IQ2_XXS", 256, 2 + 64),
            Self::Iq2Xs => (17, "IQ2_XS", 256, 2 + 64 + 8),
            Self::Iq3Xxs => (18, "IQ3_XXS", 256, 2 + 64 + 32),
            Self::Iq1S => (19, "IQ1_S", 256, 2 + 32 + 16),
            Self::Iq4Nl => (20, "IQ4_NL", 32, 2 + 16),
            Self::Iq3S => (21, "IQ3_S", 256, 2 + 64 + 8 + 32 + 4),
            Self::Iq2S => (22, "IQ2_S", 256, 2 + 32 + 32 + 8 + 8),
            Self::Iq4Xs => (23, "IQ4_XS", 256, 2 + 2 + 4 + 128),
            Self::I8 => (24, "I8", 1, 1),
            Self::I16 => (25, "I16", 1, 2),
            Self::I32 => (26, "I32", 1, 4),
            Self::I64 => (27, "I64", 1, 8),
            Self::F64 => (28, "F64", 1, 8),
            Self::Iq1M => (29, "IQ1_M", 256, 32 + 16 + 8),
            Self::BF16 => (30, "BF16", 1, 2),
            Self::Tq1_0 => (34, "TQ1_0", 256, 48 + 4 + 2),
            Self::Tq2_0 => (35, "TQ2_0", 256, 64 + 2),
            Self::Mxfp4 => (39, "MXFP4", 32, 1 + 16),
            Self::Nvfp4 => (40, "NVFP4", 64, 4 + 32),
            Self::Q1_0 => (41, "Q1_0", 128, 2 + 16),
        };
        Layout {
            id,
            name,
            block_len,
            block_bytes,
        }
    }

    /// The type for a GGUF type code, if known.
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The type for a name as llama.cpp spells it (`"Q4_K"`), if known.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The GGUF type code.
    pub fn id(self) -> u32 {
        self.layout().id
    }

    /// The type's name as llama.cpp spells it.
    pub fn name(self) -> &'static str {
        self.layout().name
    }

    /// Values per block (1 for plain element types).
    pub fn block_len(self) -> u64 {
        self.layout().block_len
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        self.layout().block_bytes
    }

    /// Whether [`super::dequant`] can turn this type into f32.
    pub fn is_dequantizable(self) -> bool {
        super::dequant::block_decoder(self).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_names() {
        assert_eq!(GgmlType::from_id(3), Some(GgmlType::Q4_1));
        assert_eq!(GgmlType::from_id(30), Some(GgmlType::BF16));
        assert_eq!(GgmlType::from_id(4), None);
        assert_eq!(GgmlType::Q8_0.name(), "Q8_0");
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
    }

    #[test]
    fn block_sizes_match_layouts() {
        // f16 scale (+ f16 min) + packed values.
        assert_eq!(GgmlType::Q4_0.block_bytes(), 2 + 16);
        assert_eq!(GgmlType::Q4_1.block_bytes(), 2 + 2 + 16);
        assert_eq!(GgmlType::Q8_0.block_bytes(), 2 + 32);
        assert_eq!(GgmlType::F16.block_len(), 1);
        // Bits per value of the K-quants: 2.625, 3.4375, 4.5, 5.5, 6.5625.
        let bits = |t: GgmlType| t.block_bytes() as f64 * 8.0 / t.block_len() as f64;
        assert_eq!(bits(GgmlType::Q2K), 2.625);
        assert_eq!(bits(GgmlType::Q3K), 3.4375);
        assert_eq!(bits(GgmlType::Q4K), 4.5);
        assert_eq!(bits(GgmlType::Q5K), 5.5);
        assert_eq!(bits(GgmlType::Q6K), 6.5625);
    }
}
