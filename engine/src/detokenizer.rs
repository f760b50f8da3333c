//! Incremental detokenization: the text each new token adds to a request's output.
//!
//! Decoding tokens one at a time is wrong for tokenizers whose pieces depend on their neighbours
//! (SentencePiece drops a leading space at the start of a decode; byte-level BPE splits
//! multi-byte characters across tokens). So each step decodes a short window of recent tokens
//! twice, with and without the new ones, and emits the difference once it no longer ends in an
//! incomplete character (U+FFFD). The window starts with a few prompt tokens so that the first
//! output token is decoded in context. At the end of a request, [`IncrementalDetokenizer::flush`]
//! returns whatever is still held back, so the pieces always add up to the full decode.

use aquila_model_loader::tokenizer::{Tokenizer, TokenizerError};

/// Prompt tokens that seed the decoding window.
const PROMPT_CONTEXT_TOKENS: usize = 5;

/// Most tokens an incomplete UTF-8 character at the end of the window can span (its at most
/// three bytes, one or more per token).
const MAX_INCOMPLETE_TOKENS: usize = 3;

/// What decoders produce for incomplete or invalid UTF-8.
const REPLACEMENT: char = '\u{FFFD}';

/// Something that turns token ids into text.
pub(crate) trait Decode {
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

/// One request's decoding window.
#[derive(Clone, Debug)]
pub(crate) struct IncrementalDetokenizer {
    /// Recent tokens: context first, then tokens whose text is not emitted yet.
    window: Vec<u32>,
    /// Start of the tokens whose text was already emitted but that give context.
    prefix_offset: usize,
    /// Start of the tokens whose text is not emitted yet.
    read_offset: usize,
    /// Whether special tokens are left out of the text.
    skip_special_tokens: bool,
}

impl IncrementalDetokenizer {
    /// A detokenizer for an output that follows `prompt`.
    pub fn new(prompt: &[u32], skip_special_tokens: bool) -> Self {
        let context = &prompt[prompt.len().saturating_sub(PROMPT_CONTEXT_TOKENS)..];
        Self {
            window: context.to_vec(),
            prefix_offset: 0,
            read_offset: context.len(),
            skip_special_tokens,
        }
    }

    /// Adds `token` and returns the text that became final (possibly empty, when the token
    /// ends inside a multi-byte character).
    ///
    /// A window that still ends in U+FFFD after more than [`MAX_INCOMPLETE_TOKENS`] pending
    /// tokens holds invalid bytes, not only an incomplete character: the text before its last
    /// tokens is emitted once it is a prefix of the window's text, so output keeps flowing.
    pub fn push<D: Decode>(&mut self, decoder: &D, token: u32) -> Result<String, D::Error> {
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
        Ok(String::new())
    }

    /// Returns the text of the tokens still held back (incomplete characters become U+FFFD),
    /// for the end of a request.
    pub fn flush<D: Decode>(&mut self, decoder: &D) -> Result<String, D::Error> {
        let end = self.window.len();
        if end == self.read_offset {
            return Ok(String::new());
        }
        let full = self.decode(decoder, end)?;
        self.advance(decoder, &full, end)
    }

    /// Decodes the window from the context start up to `end`.
    fn decode<D: Decode>(&self, decoder: &D, end: usize) -> Result<String, D::Error> {
        decoder.decode(
            &self.window[self.prefix_offset..end],
            self.skip_special_tokens,
        )
    }

    /// Emits `text` (the decode of the window up to `end`) past what was already emitted, and
    /// marks the tokens up to `end` as emitted.
    fn advance<D: Decode>(
        &mut self,
        decoder: &D,
        text: &str,
        end: usize,
    ) -> Result<String, D::Error> {
        let emitted = self.decode(decoder, self.read_offset)?;
        if text.len() <= emitted.len() {
            return Ok(String::new());
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
        Ok(new_text)
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

    fn stream(tokens: &[u32], skip: bool) -> Vec<String> {
        let mut detok = IncrementalDetokenizer::new(&[0, 7], skip);
        tokens
            .iter()
            .map(|&t| detok.push(&ByteDecoder, t).unwrap())
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
        let mut detok = IncrementalDetokenizer::new(&[0], true);
        // Lone continuation bytes never complete a character.
        let tokens = [3u32, 3, 3, 3, 3, 1, 3, 3];
        let mut pieces: Vec<String> = tokens
            .iter()
            .map(|&t| detok.push(&ByteDecoder, t).unwrap())
            .collect();
        assert!(pieces[3].starts_with('\u{FFFD}'), "{pieces:?}");
        pieces.push(detok.flush(&ByteDecoder).unwrap());
        assert_eq!(pieces.concat(), ByteDecoder.decode(&tokens, true).unwrap());
        assert_eq!(detok.flush(&ByteDecoder).unwrap(), "");
    }

    #[test]
    fn an_incomplete_character_after_invalid_bytes_is_not_cut() {
        let mut detok = IncrementalDetokenizer::new(&[], true);
        let tokens = [3u32, 3, 3, 2, 3, 8];
        let pieces: Vec<String> = tokens
            .iter()
            .map(|&t| detok.push(&ByteDecoder, t).unwrap())
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
        let mut detok = IncrementalDetokenizer::new(&[], true);
        assert_eq!(detok.push(&ByteDecoder, 42), Err("bad id".to_string()));
    }
}
