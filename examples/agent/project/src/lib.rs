//! Word statistics for short texts.

/// The number of words in `text`: runs of characters between whitespace
/// (spaces, tabs, line breaks).
pub fn word_count(text: &str) -> usize {
    text.split(' ').filter(|word| !word.is_empty()).count()
}

/// The mean length of the words in `text`, in characters; 0 for a text
/// without words.
pub fn mean_word_len(text: &str) -> f64 {
    let words = word_count(text);
    if words == 0 {
        return 0.0;
    }
    let letters: usize = text.split_whitespace().map(|w| w.chars().count()).sum();
    letters as f64 / words as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_words_between_spaces() {
        assert_eq!(word_count("one two  three"), 3);
        assert_eq!(word_count(""), 0);
    }

    #[test]
    fn counts_words_across_lines_and_tabs() {
        assert_eq!(word_count("one\ntwo\tthree"), 3);
    }

    #[test]
    fn mean_word_len_of_a_line() {
        assert_eq!(mean_word_len("ab abcd"), 3.0);
        assert_eq!(mean_word_len("   "), 0.0);
    }
}
