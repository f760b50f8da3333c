//! The grid-based "i-quants" IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M: each
//! group of 8 (IQ2, IQ1) or 4 (IQ3) values is one row of a fixed lattice grid, picked by an
//! index, times its sub-block's scale; IQ2/IQ3 rows get per-value signs, IQ1 rows a shared
//! offset of ±1/8.

use super::bits::{bit, f16_at, nibble, u16_at, u32_at};
use super::grids;
use std::sync::OnceLock;

/// A lattice grid, decoded from its packed hexadecimal form on first use.
struct Grid {
    /// Two hexadecimal digits per byte; each byte packs a few level indices, lowest first.
    hex: &'static [u8],
    /// The value of each level index.
    levels: &'static [f32],
    /// Coordinates per row.
    width: usize,
    values: OnceLock<Vec<f32>>,
}

impl Grid {
    const fn new(hex: &'static [u8], levels: &'static [f32], width: usize) -> Self {
        Self {
            hex,
            levels,
            width,
            values: OnceLock::new(),
        }
    }

    /// Row `index` (the caller's index has at most the grid's number of bits).
    fn row(&self, index: usize) -> &[f32] {
        let values = self.values.get_or_init(|| self.decode());
        &values[index * self.width..(index + 1) * self.width]
    }

    /// Every coordinate's value, row by row.
    fn decode(&self) -> Vec<f32> {
        // Levels take the fewest bits that can number them (2 for 3 levels, 3 for 8), and a
        // byte holds as many such fields as fit, spaced evenly (4 of 2 bits, 2 of 4 bits).
        let bits = usize::BITS - (self.levels.len() - 1).leading_zeros();
        let per_byte = 8 / bits;
        let step = 8 / per_byte;
        let digit = |c: u8| {
            (c as char)
                .to_digit(16)
                .expect("grid tables are hexadecimal") as u8
        };
        self.hex
            .chunks_exact(2)
            .map(|pair| (digit(pair[0]) << 4) | digit(pair[1]))
            .flat_map(|byte| {
                (0..per_byte).map(move |i| (byte >> (i * step)) & ((1 << bits) - 1) as u8)
            })
            .map(|index| self.levels[usize::from(index)])
            .collect()
    }
}

/// The levels of the IQ2 grids.
const IQ2_LEVELS: &[f32] = &[8.0, 25.0, 43.0];
static IQ2_XXS_GRID: Grid = Grid::new(grids::IQ2_XXS_GRID, IQ2_LEVELS, 8);
static IQ2_XS_GRID: Grid = Grid::new(grids::IQ2_XS_GRID, IQ2_LEVELS, 8);
static IQ2_S_GRID: Grid = Grid::new(grids::IQ2_S_GRID, IQ2_LEVELS, 8);
static IQ3_XXS_GRID: Grid = Grid::new(
    grids::IQ3_XXS_GRID,
    &[4.0, 12.0, 20.0, 28.0, 36.0, 44.0, 52.0, 62.0],
    4,
);
static IQ3_S_GRID: Grid = Grid::new(
    grids::IQ3_S_GRID,
    &[1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0],
    4,
);
static IQ1_GRID: Grid = Grid::new(grids::IQ1_S_GRID, &[-1.0, 0.0, 1.0], 8);

/// One grid row of a block: which row, its sub-block's scale, and its signs (bit `j` set
/// negates coordinate `j`).
struct SignedRow {
    row: usize,
    scale: f32,
    signs: u8,
}

/// Fills `out` row by row with `scale * grid[row][j] * (±1)`.
fn fill_signed(out: &mut [f32], grid: &Grid, rows: impl Iterator<Item = SignedRow>) {
    for (values, r) in out.chunks_exact_mut(grid.width).zip(rows) {
        for (j, (v, &g)) in values.iter_mut().zip(grid.row(r.row)).enumerate() {
            let sign = if (r.signs >> j) & 1 == 1 { -1.0 } else { 1.0 };
            *v = r.scale * g * sign;
        }
    }
}

/// Eight signs from a 7-bit index: the eighth sign makes the number of minus signs even.
fn even_signs(index: u32) -> u8 {
    let low = (index & 0x7F) as u8;
    low | (((low.count_ones() & 1) as u8) << 7)
}

/// The scale `d * (0.5 + s) * factor` of the IQ2/IQ3_XXS sub-blocks.
fn half_step_scale(d: f32, s: u32, factor: f32) -> f32 {
    d * (0.5 + s as f32) * factor
}

/// IQ2_XXS (66 bytes): `d`, then per sub-block of 32 values two `u32`s: the first's bytes
/// index four grid rows, the second holds four 7-bit sign indices and a 4-bit scale on top.
pub(super) fn iq2_xxs(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let rows = (0..32).map(|i| {
        let at = 2 + 8 * (i / 4);
        let aux = u32_at(block, at + 4);
        SignedRow {
            row: usize::from(block[at + i % 4]),
            scale: half_step_scale(d, aux >> 28, 0.25),
            signs: even_signs(aux >> (7 * (i % 4))),
        }
    });
    fill_signed(out, &IQ2_XXS_GRID, rows);
}

/// IQ2_XS (74 bytes): `d`, 32 `u16`s (9-bit grid row, 7-bit sign index), 16 scale nibbles
/// (one per 16 values).
pub(super) fn iq2_xs(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let rows = (0..32).map(|i| {
        let q = u16_at(block, 2 + 2 * i);
        SignedRow {
            row: usize::from(q & 511),
            scale: half_step_scale(d, u32::from(nibble(&block[66..74], i / 2)), 0.25),
            signs: even_signs(u32::from(q >> 9)),
        }
    });
    fill_signed(out, &IQ2_XS_GRID, rows);
}

/// IQ2_S (82 bytes): `d`, 32 low bytes of grid rows, 32 bytes of explicit signs, 8 bytes of
/// 2-bit row high parts, 16 scale nibbles (one per 16 values).
pub(super) fn iq2_s(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let rows = (0..32).map(|i| {
        let high = (block[66 + i / 4] >> (2 * (i % 4))) & 3;
        SignedRow {
            row: usize::from(block[2 + i]) | usize::from(high) << 8,
            scale: half_step_scale(d, u32::from(nibble(&block[74..82], i / 2)), 0.25),
            signs: block[34 + i],
        }
    });
    fill_signed(out, &IQ2_S_GRID, rows);
}

/// IQ3_XXS (98 bytes): `d`, 64 bytes of grid rows (4 values each), then per sub-block of 32
/// values a `u32` with four 7-bit sign indices and a 4-bit scale on top.
pub(super) fn iq3_xxs(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let rows = (0..64).map(|i| {
        let aux = u32_at(block, 66 + 4 * (i / 8));
        SignedRow {
            row: usize::from(block[2 + i]),
            scale: half_step_scale(d, aux >> 28, 0.5),
            signs: even_signs(aux >> (7 * ((i % 8) / 2))) >> (4 * (i % 2)),
        }
    });
    fill_signed(out, &IQ3_XXS_GRID, rows);
}

/// IQ3_S (110 bytes): `d`, 64 low bytes of grid rows, 8 bytes of row high bits, 32 bytes of
/// explicit signs, 8 scale nibbles `s` (one per 32 values, scale `d * (1 + 2s)`).
pub(super) fn iq3_s(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let rows = (0..64).map(|i| SignedRow {
        row: usize::from(block[2 + i]) | usize::from(bit(&block[66..74], i)) << 8,
        scale: d * f32::from(1 + 2 * nibble(&block[106..110], i / 8)),
        signs: block[74 + i / 2] >> (4 * (i % 2)),
    });
    fill_signed(out, &IQ3_S_GRID, rows);
}

/// One IQ1 grid row of a block: which row, its sub-block's scale and its offset (±1/8).
struct ShiftedRow {
    row: usize,
    scale: f32,
    delta: f32,
}

/// Fills `out` row by row with `scale * (grid[row][j] + delta)`.
fn fill_shifted(out: &mut [f32], rows: impl Iterator<Item = ShiftedRow>) {
    for (values, r) in out.chunks_exact_mut(IQ1_GRID.width).zip(rows) {
        for (v, &g) in values.iter_mut().zip(IQ1_GRID.row(r.row)) {
            *v = r.scale * (g + r.delta);
        }
    }
}

/// The IQ1 row offset: +1/8, or -1/8 when `negative`.
fn delta(negative: bool) -> f32 {
    if negative {
        -0.125
    } else {
        0.125
    }
}

/// IQ1_S (50 bytes): `d`, 32 low bytes of grid rows, then per sub-block of 32 values a `u16`
/// with four 3-bit row high parts, a 3-bit scale `s` (`d * (2s + 1)`) and the offset's sign.
pub(super) fn iq1_s(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let rows = (0..32).map(|i| {
        let h = u16_at(block, 34 + 2 * (i / 4));
        ShiftedRow {
            row: usize::from(block[2 + i]) | usize::from((h >> (3 * (i % 4))) & 7) << 8,
            scale: d * f32::from(2 * ((h >> 12) & 7) + 1),
            delta: delta(h & 0x8000 != 0),
        }
    });
    fill_shifted(out, rows);
}

/// IQ1_M (56 bytes): 32 low bytes of grid rows, 32 nibbles (3-bit row high part, offset
/// sign), then four `u16`s holding sixteen 3-bit scales `s` (`d * (2s + 1)`, one per 16
/// values) in their low 12 bits and the f16 `d` spread over their top nibbles.
pub(super) fn iq1_m(block: &[u8], out: &mut [f32]) {
    let words: [u16; 4] = std::array::from_fn(|k| u16_at(block, 48 + 2 * k));
    let d_bits = words
        .iter()
        .enumerate()
        .fold(0u16, |acc, (k, w)| acc | ((w >> 12) << (4 * k)));
    let d = half::f16::from_bits(d_bits).to_f32();
    let rows = (0..32).map(|i| {
        let high = nibble(&block[32..48], i);
        let scale_bits = (words[i / 8] >> (3 * ((i / 2) % 4))) & 7;
        ShiftedRow {
            row: usize::from(block[i]) | usize::from(high & 7) << 8,
            scale: d * f32::from(2 * scale_bits + 1),
            delta: delta(high & 8 != 0),
        }
    });
    fill_shifted(out, rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_decode_to_their_sizes_and_levels() {
        for (grid, rows) in [
            (&IQ2_XXS_GRID, 256),
            (&IQ2_XS_GRID, 512),
            (&IQ2_S_GRID, 1024),
            (&IQ3_XXS_GRID, 256),
            (&IQ3_S_GRID, 512),
            (&IQ1_GRID, 2048),
        ] {
            assert_eq!(grid.decode().len(), rows * grid.width);
            assert!(grid.row(rows - 1).iter().all(|v| grid.levels.contains(v)));
        }
        // llama.cpp's iq2xxs_grid[0] is 0x0808080808080808: every coordinate the lowest level.
        assert_eq!(IQ2_XXS_GRID.row(0), [8.0; 8]);
    }

    #[test]
    fn even_signs_have_an_even_count_of_minus_signs() {
        for i in 0..128 {
            assert_eq!(even_signs(i).count_ones() % 2, 0);
            assert_eq!(u32::from(even_signs(i) & 0x7F), i);
        }
    }
}
