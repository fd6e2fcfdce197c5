//! Dates and numbers in text, read into one form so that a value an
//! acting call holds (`2024-05-13`, `98.7`) is found in the text it came
//! from however that text wrote it ("the 13th of May 2024", "$98.70").

/// A calendar day; `year` 0 when the text did not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Day {
    pub(crate) year: u16,
    pub(crate) month: u8,
    pub(crate) day: u8,
}

impl Day {
    fn new(year: u32, month: u32, day: u32) -> Option<Self> {
        let year = if year == 0 || (1900..=2100).contains(&year) {
            u16::try_from(year).ok()?
        } else {
            return None;
        };
        let month = u8::try_from(month).ok().filter(|m| (1..=12).contains(m))?;
        let day = u8::try_from(day).ok().filter(|d| (1..=31).contains(d))?;
        Some(Self { year, month, day })
    }

    /// The same day with the year left open.
    pub(crate) fn any_year(self) -> Self {
        Self { year: 0, ..self }
    }

    /// Whether text naming `named` names this day: the same day, or its
    /// day and month with no year.
    pub(crate) fn is_named_by(self, named: Day) -> bool {
        named == self || named == self.any_year()
    }
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// The month a word names (`May`, `sept`, `Dec`), 1-based.
pub(super) fn month(word: &str) -> Option<u32> {
    const SHORT: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let index = MONTHS
        .iter()
        .position(|m| *m == word)
        .or_else(|| SHORT.iter().position(|m| *m == word))
        .or_else(|| (word == "sept").then_some(8))?;
    u32::try_from(index + 1).ok()
}

/// A day of the month as a word: `13`, `13th`, `1st`.
fn day_number(word: &str) -> Option<(u32, bool)> {
    let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &word[digits.len()..];
    if digits.is_empty() || digits.len() > 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !suffix.is_empty() && !matches!(suffix, "st" | "nd" | "rd" | "th") {
        return None;
    }
    let n: u32 = digits.parse().ok()?;
    (1..=31).contains(&n).then_some((n, !suffix.is_empty()))
}

fn year(word: &str) -> Option<u32> {
    (word.len() == 4 && word.bytes().all(|b| b.is_ascii_digit()))
        .then(|| word.parse().ok())
        .flatten()
        .filter(|y| (1900..=2100).contains(y))
}

/// Every day `text` names: numeric dates (`2024-05-13`, `13/05/2024`,
/// `05/13/2024`, `13.05.2024`) and days beside a month's name (`May 13`,
/// `13th of May 2024`, `the 13th to the 17th of May`).
pub(crate) fn days_in(text: &str) -> Vec<Day> {
    let mut days = Vec::new();
    numeric_days(text, &mut days);
    named_days(text, &mut days);
    days.sort_by_key(|d| (d.year, d.month, d.day));
    days.dedup();
    days
}

/// The day a call's value holds when the value is a date (a date with a
/// time too: `2024-05-13 09:00`, `2024-05-13T09:00:00Z`, `May 13, 2024`).
pub(crate) fn day_of_value(value: &str) -> Option<Day> {
    let value = value.trim();
    if value.len() > 40 || value.split_whitespace().count() > 5 {
        return None;
    }
    let mut days = Vec::new();
    numeric_days(value, &mut days);
    if days.is_empty() {
        named_days(value, &mut days);
    }
    // A value naming one day (`05/06/2024` reads two ways: not a value).
    match days.as_slice() {
        [day] => Some(*day),
        _ => None,
    }
}

fn numeric_days(text: &str, days: &mut Vec<Day>) {
    for token in
        text.split(|c: char| c.is_whitespace() || c == 'T' || c == ',' || c == '(' || c == ')')
    {
        let token = token.trim_matches(|c: char| !c.is_ascii_digit());
        let separator = token.bytes().find(|b| matches!(b, b'-' | b'/' | b'.'));
        let Some(separator) = separator else { continue };
        let parts: Vec<&str> = token.split(char::from(separator)).collect();
        if parts.len() != 3
            || parts
                .iter()
                .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let n = |p: &str| p.parse::<u32>().unwrap_or(u32::MAX);
        if let Some(y) = year(parts[0]) {
            days.extend(Day::new(y, n(parts[1]), n(parts[2])));
        } else if let Some(y) = year(parts[2]) {
            let (a, b) = (n(parts[0]), n(parts[1]));
            // Day first (most of the world), and month first (the US).
            days.extend(Day::new(y, b, a));
            if a != b {
                days.extend(Day::new(y, a, b));
            }
        }
    }
}

/// How far from a month's name its days and year may stand, in words.
const BEFORE: usize = 6;
const AFTER: usize = 3;

fn named_days(text: &str, days: &mut Vec<Day>) {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    for (i, word) in words.iter().enumerate() {
        let Some(m) = month(word) else { continue };
        let from = i.saturating_sub(BEFORE);
        let to = (i + AFTER + 1).min(words.len());
        let y = words[i + 1..to]
            .iter()
            .chain(words[i.saturating_sub(2)..i].iter())
            .find_map(|w| year(w))
            .unwrap_or(0);
        for (j, other) in words.iter().enumerate().take(to).skip(from) {
            let Some((d, ordinal)) = day_number(other) else {
                continue;
            };
            // A plain number counts only right beside the month ("May
            // 13", "13 May"); an ordinal anywhere near ("the 13th to the
            // 17th of May").
            if ordinal || j + 1 == i || j == i + 1 {
                days.extend(Day::new(y, m, d));
            }
        }
    }
}

/// A number as a value compares: to hundredths, so `98.7` is `98.70`.
pub(crate) type Amount = i64;

/// The numbers `text` writes as words of their own (`98.70`, `$1,200`,
/// `-5`, `10000`), not those inside dates, times or identifiers.
pub(crate) fn numbers_in(text: &str) -> Vec<Amount> {
    text.split_whitespace().filter_map(number_of_word).collect()
}

/// The number a call's value (a JSON number, or a string that is only a
/// number) holds, when it is one worth comparing: two digits or more, or
/// a fraction (single digits are in every text).
pub(crate) fn amount_of_value(value: &str) -> Option<Amount> {
    let amount = number_of_word(value.trim())?;
    (amount.abs() >= 1000 || amount % 100 != 0).then_some(amount)
}

fn number_of_word(word: &str) -> Option<Amount> {
    let word = word
        .trim_start_matches(['$', '€', '£', '(', '"', '\''])
        .trim_end_matches(['.', ',', ';', ':', ')', '!', '?', '"', '\'', '%']);
    let (negative, word) = match word.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, word),
    };
    if word.is_empty() || !word.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
        return None;
    }
    let (whole, fraction) = match word.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (word, None),
    };
    // Thousands written with commas: groups of three after the first.
    let mut groups = whole.split(',');
    let first = groups.next()?;
    if first.is_empty() || first.len() > 15 || !first.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut digits = first.to_owned();
    for group in groups {
        if group.len() != 3 || !group.bytes().all(|b| b.is_ascii_digit()) || first.len() > 3 {
            return None;
        }
        digits.push_str(group);
    }
    let cents = match fraction {
        None => 0,
        Some(f) if !f.is_empty() && f.len() <= 6 && f.bytes().all(|b| b.is_ascii_digit()) => {
            let two: String = f.chars().chain(std::iter::repeat('0')).take(2).collect();
            two.parse::<i64>().ok()?
        }
        Some(_) => return None,
    };
    let units: i64 = digits.parse().ok()?;
    let amount = units.checked_mul(100)?.checked_add(cents)?;
    Some(if negative { -amount } else { amount })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(year: u16, month: u8, day: u8) -> Day {
        Day { year, month, day }
    }

    #[test]
    fn days_are_read_however_the_text_writes_them() {
        let text = "Book it from the 13th to the 17th of May 2024. Then on May 1st, 2024 \
                    at 09:00, and 2024-06-02, 03/07/2024; see you December 5 and 9 Jan.";
        let days = days_in(text);
        for wanted in [
            day(2024, 5, 13),
            day(2024, 5, 17),
            day(2024, 5, 1),
            day(2024, 6, 2),
            day(2024, 7, 3),
            day(2024, 3, 7),
            day(0, 12, 5),
            day(0, 1, 9),
        ] {
            assert!(days.contains(&wanted), "{wanted:?} in {days:?}");
        }
        // The time is not a day, nor the year's digits.
        assert!(!days.iter().any(|d| d.day == 9 && d.month == 5));
    }

    #[test]
    fn a_value_is_a_date_only_when_it_names_one_day() {
        assert_eq!(day_of_value("2024-05-13"), Some(day(2024, 5, 13)));
        assert_eq!(day_of_value("2024-05-13 09:00"), Some(day(2024, 5, 13)));
        assert_eq!(day_of_value("2024-05-13T09:00:00Z"), Some(day(2024, 5, 13)));
        assert_eq!(day_of_value("May 13, 2024"), Some(day(2024, 5, 13)));
        assert_eq!(day_of_value("13/05/2024"), Some(day(2024, 5, 13)));
        assert_eq!(day_of_value("05/06/2024"), None);
        assert_eq!(day_of_value("US13 3000 0001"), None);
        assert_eq!(day_of_value("Riverside View Hotel"), None);
    }

    #[test]
    fn numbers_compare_as_amounts() {
        assert_eq!(
            numbers_in("Pay $98.70, then 1,200 and -5; not 09:00 or US13 or 2024-05-13."),
            vec![9870, 120_000, -500]
        );
        assert_eq!(amount_of_value("98.7"), Some(9870));
        assert_eq!(amount_of_value("1200"), Some(120_000));
        assert_eq!(amount_of_value("10"), Some(1000));
        assert_eq!(amount_of_value("7"), None);
        assert_eq!(amount_of_value("0.01"), Some(1));
        assert_eq!(amount_of_value("1,2,3"), None);
    }
}
