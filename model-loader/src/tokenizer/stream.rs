//! Token-by-token detokenization that never splits a multi-byte UTF-8 character.

use super::{Tokenizer, TokenizerError};

/// Context tokens (e.g. the end of the prompt) that seed the decoding window.
const CONTEXT_TOKENS: usize = 5;

/// Most tokens an incomplete UTF-8 character at the end of the window can span (its at most
/// three bytes, one or more per token).
const MAX_INCOMPLETE_TOKENS: usize = 3;

/// What decoders produce for incomplete or invalid UTF-8.
const REPLACEMENT: char = '\u{FFFD}';

/// Something that turns token ids into text ([`Tokenizer`], or a stand-in in tests).
pub trait Decode {
    /// The error of a failed decode.
    type Error;
    /// Decodes `ids`, leaving special tokens out if `skip_special_tokens`.
    fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, Self::Error>;
}

impl Decode for Tokenizer {
    type Error = TokenizerError;

    fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        Tokenizer::decode(self, ids, skip_special_tokens)
    }
}

/// Turns a stream of token ids into text deltas.
///
/// Byte-level tokens can end in the middle of a UTF-8 character, and decoders treat the first
/// token of a decode specially (SentencePiece drops its leading space). So each push decodes a
/// short window of recent tokens twice, with and without the new ones, and emits the
/// difference once it no longer ends in an incomplete character (U+FFFD). A window that still
/// ends in U+FFFD after more than three pending tokens holds invalid bytes: the text before
/// its last tokens is emitted then, so output keeps flowing. [`StreamDecoder::flush`] returns
/// what is still held back, so the pieces always add up to the full decode. Only the window
/// is kept, so memory stays constant over long generations.
///
/// The decoder owns no tokenizer: pass the same one to every call.
#[derive(Clone, Debug)]
pub struct StreamDecoder {
    /// Recent tokens: context first, then tokens whose text is not emitted yet.
    window: Vec<u32>,
    /// Start of the tokens whose text was already emitted but that give context.
    prefix_offset: usize,
    /// Start of the tokens whose text is not emitted yet.
    read_offset: usize,
    /// Whether special tokens are left out of the text.
    skip_special_tokens: bool,
}

impl StreamDecoder {
    /// A decoder with no context; `skip_special_tokens` drops special tokens from the text.
    pub fn new(skip_special_tokens: bool) -> Self {
        Self::with_context(&[], skip_special_tokens)
    }

    /// A decoder whose first tokens are decoded after the last few tokens of `context` (e.g.
    /// the prompt), whose own text is never emitted.
    pub fn with_context(context: &[u32], skip_special_tokens: bool) -> Self {
        let context = &context[context.len().saturating_sub(CONTEXT_TOKENS)..];
        Self {
            window: context.to_vec(),
            prefix_offset: 0,
            read_offset: context.len(),
            skip_special_tokens,
        }
    }

    /// Adds `token` and returns the text that became final, or `None` while a character is
    /// incomplete (or the token adds no text, like a skipped special token).
    pub fn push<D: Decode + ?Sized>(
        &mut self,
        decoder: &D,
        token: u32,
    ) -> Result<Option<String>, D::Error> {
        self.window.push(token);
        let end = self.window.len();
        let full = self.decode(decoder, end)?;
        if !full.ends_with(REPLACEMENT) {
            return self.advance(decoder, &full, end);
        }
        if end - self.read_offset > MAX_INCOMPLETE_TOKENS {
            let cut = end - MAX_INCOMPLETE_TOKENS;
            let settled = self.decode(decoder, cut)?;
            if full.starts_with(&settled) {
                return self.advance(decoder, &settled, cut);
            }
        }
        Ok(None)
    }

    /// Returns the text of the tokens still held back (incomplete characters become U+FFFD),
    /// e.g. at the end of generation.
    pub fn flush<D: Decode + ?Sized>(&mut self, decoder: &D) -> Result<Option<String>, D::Error> {
        let end = self.window.len();
        if end == self.read_offset {
            return Ok(None);
        }
        let full = self.decode(decoder, end)?;
        self.advance(decoder, &full, end)
    }

    /// Decodes the window from the context start up to `end`.
    fn decode<D: Decode + ?Sized>(&self, decoder: &D, end: usize) -> Result<String, D::Error> {
        decoder.decode(
            &self.window[self.prefix_offset..end],
            self.skip_special_tokens,
        )
    }

    /// Emits `text` (the decode of the window up to `end`) past what was already emitted, and
    /// marks the tokens up to `end` as emitted.
    fn advance<D: Decode + ?Sized>(
        &mut self,
        decoder: &D,
        text: &str,
        end: usize,
    ) -> Result<Option<String>, D::Error> {
        let emitted = self.decode(decoder, self.read_offset)?;
        if text.len() <= emitted.len() {
            return Ok(None);
        }
        let new_text = match text.strip_prefix(&emitted) {
            Some(new_text) => new_text.to_string(),
            // The context decodes differently once tokens are appended (a tokenizer that
            // normalizes across pieces): emit the part after the common byte length.
            None => {
                let mut at = emitted.len();
                while !text.is_char_boundary(at) {
                    at += 1;
                }
                text[at..].to_string()
            }
        };
        self.prefix_offset = self.read_offset;
        self.read_offset = end;
        self.compact();
        Ok(Some(new_text))
    }

    /// Drops tokens before the context window so the window stays short.
    fn compact(&mut self) {
        if self.prefix_offset > 0 {
            self.window.drain(..self.prefix_offset);
            self.read_offset -= self.prefix_offset;
            self.prefix_offset = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::tokenizer::write_tiny_tokenizer;

    /// Token `i` stands for the bytes `PIECES[i]`; token 9 is a special token.
    struct ByteDecoder;

    const PIECES: [&[u8]; 9] = [
        b"Hello",
        b" world",
        b"\xC3", // first byte of "é"
        b"\xA9", // second byte of "é"
        b"!",
        b"\xE2\x82", // first two bytes of "€"
        b"\xAC",     // last byte of "€"
        b" ",
        b"a",
    ];
    const SPECIAL: u32 = 9;

    impl Decode for ByteDecoder {
        type Error = String;
        fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, String> {
            let mut bytes = Vec::new();
            for &id in ids {
                match id {
                    SPECIAL if skip_special_tokens => {}
                    SPECIAL => bytes.extend_from_slice(b"<eos>"),
                    id => bytes.extend_from_slice(PIECES.get(id as usize).ok_or("bad id")?),
                }
            }
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        }
    }

    fn piece(out: Option<String>) -> String {
        out.unwrap_or_default()
    }

    fn stream(tokens: &[u32], skip: bool) -> Vec<String> {
        let mut detok = StreamDecoder::with_context(&[0, 7], skip);
        tokens
            .iter()
            .map(|&t| piece(detok.push(&ByteDecoder, t).unwrap()))
            .collect()
    }

    #[test]
    fn pieces_concatenate_to_the_full_decode() {
        let tokens = [1, 2, 3, 4, 5, 6, 7, 8, SPECIAL, 0];
        let pieces = stream(&tokens, false);
        assert_eq!(pieces.concat(), ByteDecoder.decode(&tokens, false).unwrap());
        assert_eq!(pieces.concat(), " world\u{e9}!\u{20ac} a<eos>Hello");
    }

    #[test]
    fn incomplete_characters_are_held_until_complete() {
        let pieces = stream(&[2, 3, 5, 6], true);
        assert_eq!(pieces, vec!["", "\u{e9}", "", "\u{20ac}"]);
    }

    #[test]
    fn invalid_bytes_are_emitted_after_a_short_delay_and_flushed_at_the_end() {
        let mut detok = StreamDecoder::with_context(&[0], true);
        // Lone continuation bytes never complete a character.
        let tokens = [3u32, 3, 3, 3, 3, 1, 3, 3];
        let mut pieces: Vec<String> = tokens
            .iter()
            .map(|&t| piece(detok.push(&ByteDecoder, t).unwrap()))
            .collect();
        assert!(pieces[3].starts_with('\u{FFFD}'), "{pieces:?}");
        pieces.push(piece(detok.flush(&ByteDecoder).unwrap()));
        assert_eq!(pieces.concat(), ByteDecoder.decode(&tokens, true).unwrap());
        assert_eq!(detok.flush(&ByteDecoder).unwrap(), None);
    }

    #[test]
    fn an_incomplete_character_after_invalid_bytes_is_not_cut() {
        let mut detok = StreamDecoder::new(true);
        let tokens = [3u32, 3, 3, 2, 3, 8];
        let pieces: Vec<String> = tokens
            .iter()
            .map(|&t| piece(detok.push(&ByteDecoder, t).unwrap()))
            .collect();
        assert_eq!(pieces.concat(), ByteDecoder.decode(&tokens, true).unwrap());
    }

    #[test]
    fn special_tokens_can_be_skipped() {
        let pieces = stream(&[8, SPECIAL, 8], true);
        assert_eq!(pieces.concat(), "aa");
    }

    #[test]
    fn decode_errors_are_returned() {
        let mut detok = StreamDecoder::new(true);
        assert_eq!(detok.push(&ByteDecoder, 42), Err("bad id".to_string()));
    }

    #[test]
    fn window_stays_small_over_long_streams() {
        let dir = tempfile::tempdir().unwrap();
        write_tiny_tokenizer(dir.path()).unwrap();
        let tokenizer = Tokenizer::from_dir(dir.path()).unwrap();
        let text = "the cat sat on the mat. ".repeat(200);
        let mut stream = StreamDecoder::new(false);
        let mut out = String::new();
        for id in tokenizer.encode(&text, false).unwrap() {
            out.extend(stream.push(&tokenizer, id).unwrap());
            assert!(
                stream.window.len() <= CONTEXT_TOKENS + MAX_INCOMPLETE_TOKENS,
                "window of {}",
                stream.window.len()
            );
        }
        assert_eq!(out, text);
    }
}
