//! The byte-to-character alphabet of byte-level BPE (GPT-2 style).
//!
//! Byte-level BPE vocabularies spell every byte as one printable character: printable
//! Latin-1 bytes stand for themselves and the remaining 68 bytes (controls, space, ...) are
//! assigned the code points 256, 257, ... in byte order. A space is therefore `Ġ` (U+0120)
//! and a newline `Ċ` (U+010A).

/// Returns `true` for bytes that byte-level BPE spells as the same Latin-1 character.
fn is_self_spelled(byte: u8) -> bool {
    matches!(byte, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The character that spells each byte, indexed by byte value.
pub fn byte_alphabet() -> [char; 256] {
    let mut alphabet = ['\0'; 256];
    let mut next_extra = 256u32;
    for byte in 0..=255u8 {
        alphabet[usize::from(byte)] = if is_self_spelled(byte) {
            char::from(byte)
        } else {
            let spelled = char::from_u32(next_extra).expect("code points 256..324 are valid chars");
            next_extra += 1;
            spelled
        };
    }
    alphabet
}

/// Spells `bytes` in the byte-level alphabet (the form tokens take in the vocabulary).
pub fn spell_bytes(alphabet: &[char; 256], bytes: &[u8]) -> String {
    bytes.iter().map(|&b| alphabet[usize::from(b)]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn alphabet_is_a_bijection_onto_known_characters() {
        let alphabet = byte_alphabet();
        let distinct: HashSet<char> = alphabet.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
        assert_eq!(alphabet[usize::from(b' ')], '\u{120}');
        assert_eq!(alphabet[usize::from(b'\n')], '\u{10A}');
        assert_eq!(alphabet[0], '\u{100}');
        assert_eq!(alphabet[usize::from(b'a')], 'a');
        assert_eq!(alphabet[0xAD], '\u{143}');
        assert_eq!(alphabet[0xFF], '\u{FF}');
    }

    #[test]
    fn spells_multibyte_text() {
        let alphabet = byte_alphabet();
        assert_eq!(spell_bytes(&alphabet, " é".as_bytes()), "ĠÃ©");
    }
}
