//! GGML tensor element types and their block layouts.

/// A GGML tensor type with a known block layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// 32 values: f16 scale, 32 signed bytes.
    Q8_0,
    /// 32 values: 5-bit with offset (not dequantized here).
    Q5_0,
    /// 32 values: 5-bit with minimum (not dequantized here).
    Q5_1,
    /// 32 values: 8-bit with sum (not dequantized here).
    Q8_1,
    /// K-quant, 256 values in 84 bytes (not dequantized here).
    Q2K,
    /// K-quant, 256 values in 110 bytes (not dequantized here).
    Q3K,
    /// K-quant, 256 values in 144 bytes (not dequantized here).
    Q4K,
    /// K-quant, 256 values in 176 bytes (not dequantized here).
    Q5K,
    /// K-quant, 256 values in 210 bytes (not dequantized here).
    Q6K,
    /// K-quant, 256 values in 292 bytes (not dequantized here).
    Q8K,
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

impl GgmlType {
    /// The type for a GGUF type code, if known.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2K,
            11 => Self::Q3K,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            15 => Self::Q8K,
            24 => Self::I8,
            25 => Self::I16,
            26 => Self::I32,
            27 => Self::I64,
            28 => Self::F64,
            30 => Self::BF16,
            _ => return None,
        })
    }

    /// The type's name as llama.cpp spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q8_0 => "Q8_0",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_1 => "Q8_1",
            Self::Q2K => "Q2_K",
            Self::Q3K => "Q3_K",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
            Self::Q8K => "Q8_K",
            Self::I8 => "I8",
            Self::I16 => "I16",
            Self::I32 => "I32",
            Self::I64 => "I64",
            Self::F64 => "F64",
        }
    }

    /// Values per block (1 for plain element types).
    pub fn block_len(self) -> u64 {
        match self {
            Self::Q4_0 | Self::Q4_1 | Self::Q8_0 | Self::Q5_0 | Self::Q5_1 | Self::Q8_1 => 32,
            Self::Q2K | Self::Q3K | Self::Q4K | Self::Q5K | Self::Q6K | Self::Q8K => 256,
            _ => 1,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        match self {
            Self::F32 | Self::I32 => 4,
            Self::F16 | Self::BF16 | Self::I16 => 2,
            Self::I8 => 1,
            Self::I64 | Self::F64 => 8,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q8_0 => 34,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_1 => 36,
            Self::Q2K => 84,
            Self::Q3K => 110,
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
            Self::Q8K => 292,
        }
    }

    /// Whether [`super::dequant`] can turn this type into f32.
    pub fn is_dequantizable(self) -> bool {
        matches!(
            self,
            Self::F32 | Self::F16 | Self::BF16 | Self::Q4_0 | Self::Q4_1 | Self::Q8_0
        )
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
    }

    #[test]
    fn block_sizes_match_layouts() {
        // f16 scale (+ f16 min) + packed values.
        assert_eq!(GgmlType::Q4_0.block_bytes(), 2 + 16);
        assert_eq!(GgmlType::Q4_1.block_bytes(), 2 + 2 + 16);
        assert_eq!(GgmlType::Q8_0.block_bytes(), 2 + 32);
        assert_eq!(GgmlType::F16.block_len(), 1);
    }
}
