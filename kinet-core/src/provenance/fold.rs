//! Text folded for comparison: the same text however it is written
//! (case, accents, look-alike letters, escapes, invisible characters,
//! separators in numbers), its words and its 6-byte windows, hashed for the
//! ledger's index. The ledger ([`Provenance`](super::Provenance)) and the
//! injection defence compare text only in this form.

use std::hash::{BuildHasherDefault, Hasher};

use unicode_normalization::UnicodeNormalization as _;

/// Length of the windows the index keeps (bytes of folded text).
pub(crate) const GRAM: usize = 6;

/// The hasher of the index's keys (already hashed).
pub(super) type Fast = BuildHasherDefault<MixHasher>;

/// Text folded for comparison.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Folded {
    /// The letters and digits, lower case, in order.
    pub(crate) compact: String,
    /// The words (maximal runs of letters and digits): ranges of `compact`.
    pub(super) atoms: Vec<(usize, usize)>,
    /// Digit groups written with separators ("US13 3000 0001", "10,000"),
    /// joined: ranges of `compact`.
    groups: Vec<(usize, usize)>,
}

impl Folded {
    /// The words, then the joined digit groups.
    pub(crate) fn words(&self) -> impl Iterator<Item = &str> + Clone {
        self.atoms
            .iter()
            .chain(&self.groups)
            .map(|&(a, b)| &self.compact[a..b])
    }

    /// How many words and joined digit groups.
    pub(crate) fn word_count(&self) -> usize {
        self.atoms.len() + self.groups.len()
    }

    /// The joined digit groups.
    pub(crate) fn groups(&self) -> impl Iterator<Item = &str> + Clone {
        self.groups.iter().map(|&(a, b)| &self.compact[a..b])
    }

    /// The words with one space between them and around them: a value
    /// matches a trusted text only at word boundaries.
    pub(super) fn spaced(&self) -> String {
        let mut out = String::with_capacity(self.compact.len() + self.atoms.len() + 1);
        out.push(' ');
        for &(a, b) in &self.atoms {
            out.push_str(&self.compact[a..b]);
            out.push(' ');
        }
        out
    }
}

/// Folds text for comparison (see the module docs).
pub(crate) fn fold(text: &str) -> Folded {
    let decoded = decode_escapes(text);
    let mut out = Folded::default();
    let mut words = Words::default();
    let mut take = |c: char, out: &mut Folded| {
        if c.is_alphanumeric() {
            words.start.get_or_insert(out.compact.len());
            out.compact.push(c);
        } else {
            words.end(out);
            words.separator(c);
        }
    };
    if decoded.is_ascii() {
        // ASCII is its own NFKD form and has no marks or look-alikes.
        for c in decoded.chars() {
            take(c.to_ascii_lowercase(), &mut out);
        }
    } else {
        // Compatibility decomposition, then accents and other combining
        // marks dropped (`ḿ`, `m` + U+0301 and `m` fold alike).
        for c in decoded.nfkd() {
            if is_ignorable(c) || unicode_normalization::char::is_combining_mark(c) {
                continue;
            }
            for c in latin_look_alike(c).to_lowercase() {
                take(latin_look_alike(c), &mut out);
            }
        }
    }
    words.end(&mut out);
    words.flush(&mut out);
    out
}

/// Splits folded text into words, joining digit groups.
#[derive(Default)]
struct Words {
    /// Where the current word starts in the folded text.
    start: Option<usize>,
    /// The digit group being joined and how many words it holds.
    group: (usize, usize),
    group_words: usize,
    /// Separators since the last word, and whether they may join a group.
    gap: usize,
    gap_joins: bool,
}

impl Words {
    fn separator(&mut self, c: char) {
        self.gap += 1;
        self.gap_joins &= matches!(c, ' ' | ',' | '.' | '-' | '/' | '(' | ')' | '\'');
    }

    fn end(&mut self, out: &mut Folded) {
        let Some(start) = self.start.take() else {
            return;
        };
        let end = out.compact.len();
        let digits = out.compact.as_bytes()[start..end]
            .iter()
            .any(u8::is_ascii_digit);
        if digits && self.group_words > 0 && self.gap <= 2 && self.gap_joins {
            self.group.1 = end;
            self.group_words += 1;
        } else {
            self.flush(out);
            if digits {
                self.group = (start, end);
                self.group_words = 1;
            }
        }
        out.atoms.push((start, end));
        self.gap = 0;
        self.gap_joins = true;
    }

    fn flush(&mut self, out: &mut Folded) {
        if self.group_words > 1 {
            out.groups.push(self.group);
        }
        self.group_words = 0;
    }
}

/// Percent-escapes (`%40`) and numeric HTML entities (`&#64;`, `&#x40;`)
/// decoded, twice over for doubly escaped text.
fn decode_escapes(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(['%', '&']) {
        return std::borrow::Cow::Borrowed(text);
    }
    let once = decode_once(text);
    if once.contains(['%', '&']) {
        std::borrow::Cow::Owned(decode_once(&once))
    } else {
        std::borrow::Cow::Owned(once)
    }
}

fn decode_once(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push(high * 16 + low);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            b'&' if bytes.get(i + 1) == Some(&b'#') => match numeric_entity(&text[i..]) {
                Some((c, used)) => {
                    let mut buffer = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
                    i += used;
                }
                None => {
                    out.push(b'&');
                    i += 1;
                }
            },
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(byte: u8) -> Option<u8> {
    (byte as char)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// `&#64;` or `&#x40;` at the start of `text`: the character and the bytes
/// used.
fn numeric_entity(text: &str) -> Option<(char, usize)> {
    let rest = text.strip_prefix("&#")?;
    let (digits, radix, skip) = match rest.strip_prefix(['x', 'X']) {
        Some(hex) => (hex, 16, 3),
        None => (rest, 10, 2),
    };
    let len = digits
        .bytes()
        .take(8)
        .take_while(|b| (*b as char).is_digit(radix))
        .count();
    if len == 0 {
        return None;
    }
    let code = u32::from_str_radix(&digits[..len], radix).ok()?;
    let c = char::from_u32(code)?;
    let used = skip + len + usize::from(digits[len..].starts_with(';'));
    Some((c, used))
}

/// Characters that change nothing a reader sees: zero-width spaces and
/// joiners, direction marks, soft hyphens, the byte-order mark.
fn is_ignorable(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}'
        | '\u{FFA0}' | '\u{E0000}'..='\u{E0FFF}')
}

/// Lower-case Cyrillic and Greek letters that look like Latin ones, as the
/// Latin letter.
fn latin_look_alike(c: char) -> char {
    match c {
        // Capitals whose lower case looks like another Latin letter.
        'Η' | 'Н' => 'h',
        'Ν' => 'n',
        'Μ' | 'М' => 'm',
        'Ζ' => 'z',
        'Υ' => 'y',
        'Ρ' | 'Р' => 'p',
        'Β' | 'В' => 'b',
        'Κ' | 'К' => 'k',
        'Τ' | 'Т' => 't',
        'Χ' | 'Х' => 'x',
        'Ι' | 'І' | 'ı' => 'i',
        'ɑ' => 'a',
        'ɡ' => 'g',
        'օ' => 'o',
        'ս' => 'u',
        'а' | 'α' => 'a',
        'в' | 'β' => 'b',
        'с' | 'ϲ' => 'c',
        'ԁ' => 'd',
        'е' | 'ε' => 'e',
        'һ' => 'h',
        'і' | 'ι' => 'i',
        'ј' => 'j',
        'к' | 'κ' => 'k',
        'м' => 'm',
        'п' | 'η' => 'n',
        'о' | 'ο' | 'σ' => 'o',
        'р' | 'ρ' => 'p',
        'ԛ' => 'q',
        'ѕ' => 's',
        'т' | 'τ' => 't',
        'υ' => 'u',
        'ν' => 'v',
        'ԝ' | 'ω' => 'w',
        'х' | 'χ' => 'x',
        'у' | 'γ' => 'y',
        'ᴢ' => 'z',
        other => other,
    }
}

pub(super) fn word_key(word: &str) -> u64 {
    // FNV-1a.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in word.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// A window's bytes, packed: exact, no collisions.
pub(super) fn gram_key(gram: &[u8]) -> u64 {
    let mut key = 0u64;
    for &byte in gram {
        key = (key << 8) | u64::from(byte);
    }
    key
}

/// A random key for this process.
fn seed() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    })
}

/// A hasher for keys that are already hashes or packed bytes: one
/// multiply.
#[derive(Default)]
pub(super) struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, value: u64) {
        // Keyed per process, so text cannot be written to collide.
        let value = value ^ seed();
        self.0 = (value ^ (value >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}
