//! A bounds-checked little-endian reader over the bytes of a GGUF file.

use super::GgufError;

/// Longest string accepted (metadata keys and values, tensor names), in bytes.
pub const MAX_STRING_BYTES: u64 = 16 << 20;

/// Reads little-endian values from a byte slice, failing with [`GgufError::Truncated`] instead
/// of reading past its end.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// The current byte offset.
    pub(crate) fn position(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes left after the current position.
    pub(crate) fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    /// Takes the next `n` bytes.
    pub(crate) fn take(
        &mut self,
        n: u64,
        what: &dyn Fn() -> String,
    ) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.position(),
                needed: n,
                available: self.remaining(),
            });
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.bytes[start..self.pos])
    }

    /// Takes exactly `N` bytes as an array.
    pub(crate) fn array<const N: usize>(
        &mut self,
        what: &dyn Fn() -> String,
    ) -> Result<[u8; N], GgufError> {
        let bytes = self.take(N as u64, what)?;
        Ok(bytes.try_into().expect("take returned N bytes"))
    }

    /// Reads a `u32`.
    pub(crate) fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    /// Reads a `u64`.
    pub(crate) fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Reads a GGUF string: a `u64` length then UTF-8 bytes, at most [`MAX_STRING_BYTES`].
    pub(crate) fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.u64(&|| format!("length of {}", what()))?;
        if len > MAX_STRING_BYTES {
            return Err(GgufError::LimitExceeded {
                what: format!("length of {}", what()),
                value: len,
                limit: MAX_STRING_BYTES,
            });
        }
        let offset = self.position();
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::InvalidUtf8 {
            what: what(),
            offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_strings() {
        let mut bytes = 7u32.to_le_bytes().to_vec();
        bytes.extend(2u64.to_le_bytes());
        bytes.extend(b"hi");
        let mut cursor = Cursor::new(&bytes);
        assert_eq!(cursor.u32(&|| "x".into()).unwrap(), 7);
        assert_eq!(cursor.string(&|| "s".into()).unwrap(), "hi");
        assert_eq!(cursor.remaining(), 0);
    }

    #[test]
    fn reading_past_the_end_is_truncation() {
        let mut cursor = Cursor::new(&[1, 2]);
        let err = cursor.u32(&|| "the count".into()).unwrap_err();
        assert!(
            matches!(
                err,
                GgufError::Truncated {
                    needed: 4,
                    available: 2,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("the count"));
    }

    #[test]
    fn absurd_string_length_is_rejected_before_reading() {
        let bytes = u64::MAX.to_le_bytes();
        let err = Cursor::new(&bytes).string(&|| "a key".into()).unwrap_err();
        assert!(matches!(err, GgufError::LimitExceeded { .. }), "{err}");
    }

    #[test]
    fn invalid_utf8_is_reported() {
        let mut bytes = 1u64.to_le_bytes().to_vec();
        bytes.push(0xFF);
        let err = Cursor::new(&bytes).string(&|| "a key".into()).unwrap_err();
        assert!(
            matches!(err, GgufError::InvalidUtf8 { offset: 8, .. }),
            "{err}"
        );
    }
}
