//! Truncation of tool output for the model.
//!
//! Past a threshold (default 8192 characters) the model sees the first 3000
//! and the last 3000 characters with a marker in between that says how many
//! were left out. Lengths count Unicode scalar values, and cuts always fall on
//! character boundaries. The host always receives the full output.

use std::borrow::Cow;

/// How long tool output may be before the model sees a head + tail cut.
///
/// ```
/// use kinet_core::tool::TruncationPolicy;
///
/// let policy = TruncationPolicy::default();
/// let long = "x".repeat(10_000);
/// let seen = policy.apply(&long);
/// assert!(seen.starts_with(&"x".repeat(3000)));
/// assert!(seen.contains("4000 characters omitted"));
/// assert_eq!(policy.apply("short"), "short");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TruncationPolicy {
    /// Outputs up to this many characters pass unchanged. Default 8192.
    pub threshold: usize,
    /// Characters kept from the start. Default 3000.
    pub head: usize,
    /// Characters kept from the end. Default 3000.
    pub tail: usize,
}

impl Default for TruncationPolicy {
    fn default() -> Self {
        Self {
            threshold: 8192,
            head: 3000,
            tail: 3000,
        }
    }
}

impl TruncationPolicy {
    /// A policy that never truncates.
    pub const fn disabled() -> Self {
        Self {
            threshold: usize::MAX,
            head: 0,
            tail: 0,
        }
    }

    /// Returns what the model should see of `text`.
    pub fn apply<'a>(&self, text: &'a str) -> Cow<'a, str> {
        // A string of n bytes has at most n characters: short outputs need no
        // counting at all.
        if text.len() <= self.threshold {
            return Cow::Borrowed(text);
        }
        let total = count_chars(text.as_bytes());
        if total <= self.threshold || self.head.saturating_add(self.tail) >= total {
            return Cow::Borrowed(text);
        }
        let head_end = byte_offset_after_chars(text, self.head);
        let tail_start = byte_offset_before_last_chars(text, self.tail);
        let omitted = total - self.head - self.tail;
        let mut out = String::with_capacity(head_end + (text.len() - tail_start) + 96);
        out.push_str(&text[..head_end]);
        out.push_str(&format!(
            "\n\n[... {omitted} characters omitted; the output had {total} characters in all ...]\n\n"
        ));
        out.push_str(&text[tail_start..]);
        Cow::Owned(out)
    }
}

/// Counts UTF-8 characters: the bytes that are not continuation bytes
/// (`0b10xx_xxxx`). Eight bytes at a time with SWAR arithmetic: a byte is a
/// continuation byte when its bit 7 is set and its bit 6 is not.
fn count_chars(bytes: &[u8]) -> usize {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const PAIRS: u64 = 0x00FF_00FF_00FF_00FF;
    // 255 words per block, so no per-byte lane of the accumulator overflows.
    const BLOCK: usize = 8 * 255;
    let mut continuation = 0usize;
    let mut blocks = bytes.chunks_exact(BLOCK);
    for block in &mut blocks {
        let (words, _) = block.as_chunks::<8>();
        let mut lanes = 0u64;
        for word in words {
            let w = u64::from_le_bytes(*word);
            lanes += ((w & !(w << 1)) & HIGH) >> 7;
        }
        // Add the eight byte lanes: pairwise into 16-bit lanes, then all four.
        let pairs = (lanes & PAIRS) + ((lanes >> 8) & PAIRS);
        continuation += (pairs.wrapping_mul(0x0001_0001_0001_0001) >> 48) as usize;
    }
    continuation += blocks
        .remainder()
        .iter()
        .filter(|&&b| (b & 0xC0) == 0x80)
        .count();
    bytes.len() - continuation
}

fn byte_offset_after_chars(text: &str, chars: usize) -> usize {
    text.char_indices()
        .nth(chars)
        .map_or(text.len(), |(index, _)| index)
}

fn byte_offset_before_last_chars(text: &str, chars: usize) -> usize {
    if chars == 0 {
        return text.len();
    }
    text.char_indices()
        .rev()
        .nth(chars - 1)
        .map_or(0, |(index, _)| index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_threshold_is_untouched() {
        let policy = TruncationPolicy::default();
        let text = "a".repeat(8192);
        assert!(matches!(policy.apply(&text), Cow::Borrowed(_)));
    }

    #[test]
    fn multibyte_text_under_threshold_in_chars_is_untouched() {
        // 5000 chars but 15000 bytes.
        let text = "日".repeat(5000);
        assert_eq!(TruncationPolicy::default().apply(&text), text);
    }

    #[test]
    fn cuts_on_char_boundaries_and_counts_chars() {
        let text: String = "é日🎉a".repeat(5000); // 20000 chars
        let seen = TruncationPolicy::default().apply(&text);
        assert!(seen.contains(
            "[... 14000 characters omitted; the output had 20000 characters in all ...]"
        ));
        let head: String = text.chars().take(3000).collect();
        let tail: String = text.chars().skip(17000).collect();
        assert!(seen.starts_with(&head));
        assert!(seen.ends_with(&tail));
    }

    #[test]
    fn disabled_never_cuts() {
        let text = "x".repeat(100_000);
        assert_eq!(TruncationPolicy::disabled().apply(&text).len(), 100_000);
    }

    #[test]
    fn count_matches_std() {
        let text = "añ日🎉\u{10FFFF}".repeat(3333);
        assert_eq!(count_chars(text.as_bytes()), text.chars().count());
    }
}
