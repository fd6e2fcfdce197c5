//! The index of a ledger's text: whole words, 6-byte windows, days and
//! numbers, for the untrusted side and for the trusted side.

use std::collections::{HashMap, HashSet};

use super::fold::{Fast, Folded, GRAM, fold, gram_key, word_key};
use super::values::{Amount, Day, days_in, month, numbers_in};

/// The index of one side (trusted or untrusted).
#[derive(Clone, Default)]
pub(super) struct Side {
    /// Whole words (and digit groups written with separators, joined), to
    /// the first piece of text holding them.
    pub(super) words: HashMap<u64, u32, Fast>,
    /// Every 6-byte window of the folded text.
    pub(super) grams: HashSet<u64, Fast>,
    /// The folded text of each piece, for exact confirmation.
    pub(super) folded: Vec<(u32, String)>,
    /// The days named, to the pieces naming them.
    pub(super) days: HashMap<Day, Vec<u32>, Fast>,
    /// The numbers written, to the pieces writing them.
    pub(super) amounts: HashMap<Amount, Vec<u32>, Fast>,
}

impl Side {
    pub(super) fn add(&mut self, index: u32, text: &str) {
        let folded = fold(text);
        for word in folded.words() {
            self.words.entry(word_key(word)).or_insert(index);
        }
        for gram in folded.compact.as_bytes().windows(GRAM) {
            self.grams.insert(gram_key(gram));
        }
        if !folded.compact.is_empty() {
            self.folded.push((index, folded.compact));
        }
        for day in days_in(text) {
            self.days.entry(day).or_default().push(index);
        }
        for amount in numbers_in(text) {
            self.amounts.entry(amount).or_default().push(index);
        }
    }

    /// The piece holding a folded value: one of its words for a value
    /// shorter than a window, else the whole value (every window indexed,
    /// then confirmed in the text).
    pub(super) fn find<'a>(
        &self,
        compact: &str,
        words: impl Iterator<Item = &'a str>,
    ) -> Option<u32> {
        if compact.is_empty() {
            return None;
        }
        if compact.len() < GRAM {
            // Every word of the value is a word here, or the value is one
            // joined digit group.
            if let Some(&index) = self.words.get(&word_key(compact)) {
                return Some(index);
            }
            let mut first = None;
            for word in words {
                let index = *self.words.get(&word_key(word))?;
                first.get_or_insert(index);
            }
            return first;
        }
        if !compact
            .as_bytes()
            .windows(GRAM)
            .all(|gram| self.grams.contains(&gram_key(gram)))
        {
            return None;
        }
        self.folded
            .iter()
            .find(|(_, text)| text.contains(compact))
            .map(|(index, _)| *index)
    }
}

/// The numbers of up to four digits that are parts of dates and times in
/// `text`: next to a month's name ("June 13", "13 Jun"), or joined to other
/// digits by `:`, `/`, `-` or `.` ("13:00", "13/06", "2024-06-13").
fn date_parts(text: &str) -> Vec<String> {
    // Words of letters or digits, each with the character after it.
    let mut tokens: Vec<(String, Option<char>)> = Vec::new();
    let mut current = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_alphanumeric() {
            current.push(c.to_ascii_lowercase());
        } else if !current.is_empty() {
            tokens.push((std::mem::take(&mut current), Some(c)));
        } else if let Some(last) = tokens.last_mut()
            && last.1 == Some(' ')
        {
            last.1 = Some(c);
        }
    }
    let digits = |t: &str| !t.is_empty() && t.len() <= 4 && t.bytes().all(|b| b.is_ascii_digit());
    let month = |t: &str| month(t).is_some();
    let mut parts = Vec::new();
    for (i, (token, after)) in tokens.iter().enumerate() {
        if !digits(token) {
            continue;
        }
        let before = i.checked_sub(1).and_then(|j| tokens.get(j));
        let next = tokens.get(i + 1);
        let joined = |sep: Option<char>, other: Option<&(String, Option<char>)>| {
            matches!(sep, Some(':' | '/' | '-' | '.')) && other.is_some_and(|(t, _)| digits(t))
        };
        if before.is_some_and(|(t, _)| month(t))
            || next.is_some_and(|(t, _)| month(t))
            || joined(*after, next)
            || before.is_some_and(|b| joined(b.1, Some(b)) && digits(&b.0))
        {
            parts.push(token.clone());
        }
    }
    parts
}

/// The trusted side of the index: text kept with a space between words,
/// so a value is vouched for only where it stands as whole words (a
/// landlord's name does not vouch for `to@mylandlordanna.de`).
#[derive(Clone, Default)]
pub(super) struct TrustedSide {
    /// Whole words and joined digit groups.
    pub(super) words: HashSet<u64, Fast>,
    /// Every 6-byte window of the spaced text.
    pub(super) grams: HashSet<u64, Fast>,
    /// The spaced text, in pieces.
    pub(super) pieces: Vec<String>,
    /// Every 6-byte window of the pieces without their spaces (for runs
    /// of free text).
    pub(super) compact_grams: HashSet<u64, Fast>,
    /// The days named (year 0 where the text gave none).
    pub(super) days: HashSet<Day, Fast>,
    /// The numbers written.
    pub(super) amounts: HashSet<Amount, Fast>,
}

impl TrustedSide {
    /// Whether this side names `day` (or its day and month, with no year).
    pub(super) fn names_day(&self, day: Day) -> bool {
        self.days.contains(&day) || self.days.contains(&day.any_year())
    }

    /// Adds trusted text, less what it echoes of `echoed` (the call's own
    /// argument values: every 6-byte window and every word they share)
    /// and less the numbers of its dates ("June 13" does not vouch for a
    /// file id `13`).
    pub(super) fn add(&mut self, text: &str, echoed: &[String]) {
        let folded = fold(text);
        let dates = date_parts(text);
        let echoed_text = echoed.join(" ");
        let echoed_days = days_in(&echoed_text);
        let echoed_amounts = numbers_in(&echoed_text);
        self.days.extend(
            days_in(text)
                .into_iter()
                .filter(|d| !echoed_days.contains(d)),
        );
        self.amounts.extend(
            numbers_in(text)
                .into_iter()
                .filter(|a| !echoed_amounts.contains(a)),
        );
        let mut echo_words: HashSet<&str> = HashSet::new();
        let mut echo_grams: HashSet<u64, Fast> = HashSet::default();
        let echoed: Vec<Folded> = echoed.iter().map(|e| fold(e)).collect();
        for value in &echoed {
            echo_words.extend(value.words().filter(|w| !w.is_empty()));
            for gram in value.spaced().as_bytes().windows(GRAM) {
                echo_grams.insert(gram_key(gram));
            }
        }
        let excluded = |word: &str| echo_words.contains(word) || dates.iter().any(|d| d == word);
        for word in folded.words().filter(|w| !excluded(w)) {
            self.words.insert(word_key(word));
        }
        // The spaced text with the excluded words and echoed windows cut
        // out; joined digit groups as pieces of their own.
        let spaced = folded.spaced();
        let bytes = spaced.as_bytes();
        let mut cut = vec![false; bytes.len()];
        let mut at = 1;
        for word in folded.atoms.iter().map(|&(a, b)| &folded.compact[a..b]) {
            if excluded(word) {
                cut[at..at + word.len()].iter_mut().for_each(|c| *c = true);
            }
            at += word.len() + 1;
        }
        if !echo_grams.is_empty() {
            for (i, gram) in bytes.windows(GRAM).enumerate() {
                if echo_grams.contains(&gram_key(gram)) {
                    cut[i..i + GRAM].iter_mut().for_each(|c| *c = true);
                }
            }
        }
        let mut start = None;
        for i in 0..=bytes.len() {
            match (i < bytes.len() && !cut[i], start) {
                (true, None) => start = Some(i),
                (false, Some(from)) => {
                    self.piece(&spaced[from..i]);
                    start = None;
                }
                _ => {}
            }
        }
        for group in folded.groups().filter(|g| !excluded(g)) {
            self.piece(&format!(" {group} "));
        }
    }

    pub(super) fn piece(&mut self, piece: &str) {
        if piece.trim().is_empty() {
            return;
        }
        for gram in piece.as_bytes().windows(GRAM) {
            self.grams.insert(gram_key(gram));
        }
        let compact: Vec<u8> = piece.bytes().filter(|b| *b != b' ').collect();
        for gram in compact.windows(GRAM) {
            self.compact_grams.insert(gram_key(gram));
        }
        self.pieces.push(piece.to_owned());
    }

    /// Whether the value stands here as whole words: one word (or joined
    /// digit group) looked up, several as a phrase.
    pub(super) fn holds(&self, value: &Folded) -> bool {
        if value.compact.is_empty() {
            return false;
        }
        if self.words.contains(&word_key(&value.compact)) {
            return true;
        }
        if value.atoms.len() < 2 {
            return false;
        }
        let phrase = value.spaced();
        let bytes = phrase.as_bytes();
        if bytes.len() >= GRAM
            && !bytes
                .windows(GRAM)
                .all(|gram| self.grams.contains(&gram_key(gram)))
        {
            return false;
        }
        self.pieces
            .iter()
            .any(|piece| piece.contains(phrase.as_str()))
    }
}
