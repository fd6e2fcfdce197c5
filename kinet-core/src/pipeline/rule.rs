//! The provenance rule: which of a call's values came from untrusted text
//! only (see [`Defence`](super::Defence) for what is compared).

use serde_json::Value;

use super::finding::{DefenceMode, Finding, FindingRule};
use crate::provenance::{Folded, GRAM, Provenance, amount_of_value, day_of_value, fold};

/// Values shorter than this many words are compared whole.
const SHORT_WORDS: usize = 4;
/// ... if they are no longer than this (chars).
const SHORT_CHARS: usize = 100;
/// A run of this many letters and digits from one untrusted text, across
/// the call's short values, is flagged.
const JOINED_RUN: usize = 12;

/// A run of this many letters and digits of free text (a long value)
/// that one untrusted text holds and no trusted one is flagged.
const FREE_RUN: usize = 24;

/// Whether `source` is one of `sources` (tool names or patterns such as
/// `mcp__bank__*`).
fn among(sources: &[String], source: &str) -> bool {
    sources
        .iter()
        .any(|pattern| crate::rules::pattern_matches(pattern, source))
}

/// The provenance rule: the first value of `arguments` that untrusted text
/// holds and no trusted text does.
pub(super) fn provenance_rule(
    arguments: &Value,
    ledger: &Provenance,
    listed: &dyn Fn(&str) -> bool,
) -> Option<Finding> {
    let mut found = None;
    let mut joined = Joined::default();
    leaves(arguments, &mut String::new(), &mut |path, text, number| {
        if found.is_some() {
            return;
        }
        if let Some(f) = flag_date_or_number(ledger, path, text, number) {
            found = Some(f);
            return;
        }
        if exempt(text, number) {
            return;
        }
        let folded = fold(text);
        let short = folded.word_count() <= SHORT_WORDS && text.chars().count() <= SHORT_CHARS;
        if short {
            joined.push(&folded.compact);
            if let Some(f) = flag(ledger, path, text, &folded) {
                // Asked only now: the schema costs more than the check.
                if listed(text) {
                    return;
                }
                found = Some(f);
                return;
            }
        }
        found = long_value(ledger, path, text, &folded, short);
    });
    found.or_else(|| joined_run(&joined, ledger))
}

/// The rule for an argument a declared action's sources supply: every
/// value in it (a whole short value, a date, an amount; in free text, each
/// identifier token) is in what those tools returned or in what the user
/// said; free text copies no run from other untrusted text.
pub(super) fn bound_rule(
    name: &str,
    value: &Value,
    sources: &[String],
    ledger: &Provenance,
    listed: &dyn Fn(&str) -> bool,
) -> Option<Finding> {
    let accept = |source: &str| among(sources, source);
    let mut found = None;
    let mut path = format!("/{name}");
    leaves(value, &mut path, &mut |path, text, number| {
        if found.is_some() {
            return;
        }
        let supplied = if number || small_number(text) {
            match amount_of_value(text) {
                Some(amount) => {
                    ledger.user_said_amount(amount)
                        || ledger.tool_text_writes_amount(amount, &accept)
                }
                None => true,
            }
        } else if let Some(day) = day_of_value(text) {
            ledger.user_said_day(day) || ledger.tool_text_names_day(day, &accept)
        } else {
            let folded = fold(text);
            let short = folded.word_count() <= SHORT_WORDS && text.chars().count() <= SHORT_CHARS;
            if !short {
                found = bound_free_text(ledger, sources, path, text, &folded);
                return;
            }
            folded.compact.is_empty()
                || ledger.user_said(&folded)
                || ledger.tool_text_holds(&folded.compact, &accept)
                || listed(text)
        };
        if !supplied {
            found = Some(not_from_sources(ledger, sources, path, text));
        }
    });
    found
}

/// [`bound_rule`] for free text: the sources supply its prose, but a link,
/// host, e-mail address or account number (eight digits or more) written
/// into it is one the user said or a trusted source among them returned (a page's prose may be
/// summarised; its links are not passed on); and it copies no run from
/// untrusted text the sources did not return.
fn bound_free_text(
    ledger: &Provenance,
    sources: &[String],
    path: &str,
    text: &str,
    folded: &Folded,
) -> Option<Finding> {
    let accept = |source: &str| among(sources, source);
    for token in text.split_whitespace() {
        let token = token.trim_matches(|c: char| !c.is_alphanumeric());
        if token.is_empty() || !place_or_account(token) {
            continue;
        }
        let value = fold(token);
        if !(ledger.user_said(&value) || ledger.trusted_tool_holds(&value.compact, &accept)) {
            return Some(not_from_sources(ledger, sources, path, token));
        }
    }
    free_run(ledger, sources, path, &folded.compact)
}

/// A place to send to (a URL, host or e-mail address) or an account, card
/// or phone number (eight digits or more).
fn place_or_account(token: &str) -> bool {
    destination(token)
        || token.contains('@')
        || token.bytes().filter(u8::is_ascii_digit).count() >= 8
}

fn not_from_sources(ledger: &Provenance, sources: &[String], path: &str, shown: &str) -> Finding {
    Finding {
        argument: path.to_owned(),
        value: shorten(shown),
        source: ledger
            .first_untrusted_source()
            .unwrap_or("a tool")
            .to_owned(),
        mode: DefenceMode::Planned,
        rule: FindingRule::NotFromSources {
            sources: sources.to_vec(),
        },
    }
}

/// The parts of a value compared beyond the whole: identifier tokens and
/// their hosts; in long values, digit groups and runs of free text.
fn long_value(
    ledger: &Provenance,
    path: &str,
    text: &str,
    folded: &Folded,
    short: bool,
) -> Option<Finding> {
    for token in text.split_whitespace() {
        let token = token.trim_matches(|c: char| !c.is_alphanumeric());
        if token.is_empty() || !identifier(token) || small_number(token) || date_or_time(token) {
            continue;
        }
        // A short value's whole token was compared above; its host not.
        let whole = short && token == text.trim();
        if let Some(f) = flag_token(ledger, path, token, !whole) {
            return Some(f);
        }
    }
    if short {
        return None;
    }
    for group in folded.groups() {
        if !small_number(group)
            && let Some(f) = flag(ledger, path, group, &fold(group))
        {
            return Some(f);
        }
    }
    free_run(ledger, &[], path, &folded.compact)
}

/// A date or a number (two digits or more, or a fraction) that untrusted
/// text names, however it wrote it, and no trusted text does.
fn flag_date_or_number(
    ledger: &Provenance,
    path: &str,
    text: &str,
    number: bool,
) -> Option<Finding> {
    let index = if number || small_number(text) {
        let amount = amount_of_value(text)?;
        let index = *ledger.untrusted_amount(amount).first()?;
        if ledger.trusted_amount(amount) {
            return None;
        }
        index
    } else {
        let day = day_of_value(text)?;
        let index = *ledger.untrusted_day(day).first()?;
        if ledger.trusted_day(day) {
            return None;
        }
        index
    };
    Some(finding(ledger, path, text, index))
}

/// Free text the call writes (a message body, an event's title) that
/// copies a run of [`FREE_RUN`] letters and digits from untrusted text no
/// trusted text holds, nor the output of one of `sources`.
fn free_run(ledger: &Provenance, sources: &[String], path: &str, compact: &str) -> Option<Finding> {
    let bytes = compact.as_bytes();
    if bytes.len() < FREE_RUN {
        return None;
    }
    let mut start = 0;
    while start + FREE_RUN <= bytes.len() {
        let window = &bytes[start..start + FREE_RUN];
        if window.windows(GRAM).all(|gram| ledger.untrusted_gram(gram))
            && let Some(run) = compact.get(start..start + FREE_RUN)
            && !ledger.trusted_run(run)
            && let Some(index) = ledger.untrusted_index(run, std::iter::empty())
            && (sources.is_empty()
                || ledger
                    .untrusted_index_where(run, &|source| among(sources, source))
                    .is_none())
        {
            return Some(finding(ledger, path, run, index));
        }
        start += FREE_RUN / 2;
    }
    None
}

/// The short values of a call, joined, with where each ends.
#[derive(Default)]
struct Joined {
    text: String,
    ends: Vec<usize>,
}

impl Joined {
    fn push(&mut self, compact: &str) {
        if !compact.is_empty() {
            self.text.push_str(compact);
            self.ends.push(self.text.len());
        }
    }

    /// Whether `start..end` takes at least [`FROM_EACH`] bytes from each of
    /// two values or more (a run inside one value, or one that only grazes
    /// its neighbour, was judged with that value).
    fn spans_values(&self, start: usize, end: usize) -> bool {
        let mut from = 0;
        let mut values = 0;
        for &value_end in &self.ends {
            let overlap = value_end.min(end).saturating_sub(from.max(start));
            if overlap >= FROM_EACH {
                values += 1;
            }
            from = value_end;
        }
        values >= 2
    }
}

/// See [`Joined::spans_values`].
const FROM_EACH: usize = 4;

/// The strings a schema lists in `enum` or `const`, anywhere.
pub(super) fn enum_values(schema: &Value, found: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("enum", Value::Array(items)) => {
                        found.extend(items.iter().filter_map(Value::as_str).map(str::to_owned));
                    }
                    ("const", Value::String(text)) => found.push(text.clone()),
                    _ => enum_values(value, found),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                enum_values(item, found);
            }
        }
        _ => {}
    }
}

/// For reads: the destinations in the arguments (URLs, hosts, e-mail
/// addresses) and their hosts.
pub(super) fn destination_rule(arguments: &Value, ledger: &Provenance) -> Option<Finding> {
    let mut found = None;
    leaves(arguments, &mut String::new(), &mut |path, text, _| {
        for token in text.split_whitespace() {
            let token = token.trim_matches(|c: char| !c.is_alphanumeric());
            if found.is_some() || !destination(token) {
                continue;
            }
            if let Some(f) = flag_token(ledger, path, token, true) {
                found = Some(f);
                return;
            }
        }
    });
    found
}

/// Whether a token names a place a request can go: a URL, an e-mail
/// address, `www.` anything, or a dotted name ending in letters that is not
/// a file name (`report.docx`).
pub(super) fn destination(token: &str) -> bool {
    const FILES: [&str; 34] = [
        "doc", "docx", "xls", "xlsx", "ppt", "pptx", "pdf", "txt", "md", "csv", "tsv", "json",
        "yaml", "yml", "toml", "xml", "html", "htm", "png", "jpg", "jpeg", "gif", "svg", "webp",
        "mp3", "mp4", "wav", "log", "rs", "py", "js", "ts", "sh", "odt",
    ];
    if token.contains("://") || token.starts_with("www.") {
        return true;
    }
    let (_, _, host) = host_part(token);
    let Some((_, last)) = host.rsplit_once('.') else {
        return false;
    };
    let dotted = host
        .split('.')
        .all(|l| !l.is_empty() && l.chars().all(|c| c.is_alphanumeric() || c == '-'));
    dotted
        && (2..=24).contains(&last.len())
        && last.chars().all(|c| c.is_ascii_alphabetic())
        && !FILES.contains(&last.to_ascii_lowercase().as_str())
}

/// [`flag`] for a token (unless `itself` is false) and then for its hosts.
fn flag_token(ledger: &Provenance, path: &str, token: &str, itself: bool) -> Option<Finding> {
    itself
        .then_some(token)
        .into_iter()
        .chain(hosts(token))
        .find_map(|candidate| flag(ledger, path, candidate, &fold(candidate)))
}

/// A value that appears in untrusted text and nowhere trusted.
fn flag(ledger: &Provenance, path: &str, shown: &str, value: &Folded) -> Option<Finding> {
    let index = ledger.untrusted_index(&value.compact, value.words())?;
    if ledger.trusted_holds(value) {
        return None;
    }
    Some(finding(ledger, path, shown, index))
}

fn finding(ledger: &Provenance, path: &str, shown: &str, index: u32) -> Finding {
    Finding {
        argument: if path.is_empty() {
            "/".into()
        } else {
            path.to_owned()
        },
        value: shorten(shown),
        source: ledger.source_of(index).unwrap_or("a tool").to_owned(),
        mode: DefenceMode::Provenance,
        rule: FindingRule::Provenance,
    }
}

/// A run of [`JOINED_RUN`] or more letters and digits of the call's short
/// values, joined, across two values or more, that one untrusted text holds
/// and no trusted one.
fn joined_run(joined: &Joined, ledger: &Provenance) -> Option<Finding> {
    let bytes = joined.text.as_bytes();
    if bytes.len() < JOINED_RUN {
        return None;
    }
    let grams = bytes.len() + 1 - GRAM;
    let mut start = 0;
    while start < grams {
        if !ledger.untrusted_gram(&bytes[start..start + GRAM]) {
            start += 1;
            continue;
        }
        let mut end = start + 1;
        while end < grams && ledger.untrusted_gram(&bytes[end..end + GRAM]) {
            end += 1;
        }
        let run_end = end - 1 + GRAM;
        if run_end - start >= JOINED_RUN
            && joined.spans_values(start, run_end)
            && let Some(run) = joined.text.get(start..run_end)
            && let Some(f) = flag(ledger, "(several arguments)", run, &fold(run))
        {
            return Some(f);
        }
        start = end;
    }
    None
}

/// Numbers under seven digits, and dates and times, are not compared.
fn exempt(text: &str, number: bool) -> bool {
    if number {
        return small_number(text);
    }
    date_or_time(text)
}

/// A number of fewer than seven digits as text (`98.70`, `10,000`, `-5`).
pub(super) fn small_number(text: &str) -> bool {
    let text = text.trim();
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || b".,-+eE".contains(&b))
        && text.bytes().filter(u8::is_ascii_digit).count() < 7
        && text.bytes().any(|b| b.is_ascii_digit())
}

/// `2024-05-19`, `19/05/2024`, `10:30`, `2024-05-19 10:30:00`,
/// `2024-05-19T10:30:00Z`: a date (year 1900-2100, month, day, in either
/// order) and/or a time (hours, minutes, seconds), every group in range,
/// so phone numbers, account numbers and addresses are not dates.
pub(super) fn date_or_time(text: &str) -> bool {
    let text = text.trim();
    if text.is_empty()
        || !text
            .bytes()
            .all(|b| b.is_ascii_digit() || b" -/:.TZ+".contains(&b))
    {
        return false;
    }
    let groups: Vec<&str> = text
        .split(|c: char| !c.is_ascii_digit())
        .filter(|g| !g.is_empty())
        .collect();
    let number = |g: &str| g.parse::<u32>().unwrap_or(u32::MAX);
    let year = |g: &str| g.len() == 4 && (1900..=2100).contains(&number(g));
    let upto = |g: &str, max: u32| g.len() <= 2 && number(g) <= max;
    let date = |g: &[&str]| match g {
        [y, m, d] if year(y) => upto(m, 12) && upto(d, 31) && number(m) > 0 && number(d) > 0,
        [d, m, y] if year(y) => upto(m, 12) && upto(d, 31) && number(m) > 0 && number(d) > 0,
        _ => false,
    };
    let time = |g: &[&str]| {
        matches!(g.len(), 2 | 3)
            && upto(g[0], 23)
            && g[1..]
                .iter()
                .all(|part| part.len() == 2 && number(part) <= 59)
    };
    match groups.len() {
        2 => time(&groups) && text.contains(':'),
        3 => date(&groups) || (time(&groups) && text.contains(':')),
        // A date with a time, and perhaps a zone offset.
        5..=8 => date(&groups[..3]) && time(&groups[3..groups.len().min(6)]),
        _ => false,
    }
}

/// Whether a token looks like an identifier: a digit, or a connector
/// between letters.
pub(super) fn identifier(token: &str) -> bool {
    token.chars().count() >= 2
        && token
            .chars()
            .any(|c| c.is_ascii_digit() || "@/:._\\#%=?&+~".contains(c))
}

/// The host of a URL, address or domain, with and without `www.`, and its
/// last two labels. The authority is cut out first (up to `/ ? # \\`),
/// then user info and port inside it, so `evil.com/?d=x@y` is `evil.com`.
pub(super) fn hosts(token: &str) -> Vec<&str> {
    let (scheme, user, host) = host_part(token);
    if host.is_empty() || (host == token && !host.contains('.')) {
        return Vec::new();
    }
    let mut out = Vec::new();
    // A bare domain is compared whole already; a host inside a URL or an
    // address is compared on its own, dotted or not (`http://3627734734/`).
    if host != token && (scheme || user || host.contains('.')) {
        out.push(host);
    }
    if let Some(bare) = host.strip_prefix("www.") {
        out.push(bare);
    }
    out.extend(registrable(host));
    out
}

/// The host in a URL, address or domain: after the scheme, before the
/// path, query or fragment, after any user info, without the port (an IPv6
/// literal without its brackets); with whether there was a scheme and user
/// info.
fn host_part(token: &str) -> (bool, bool, &str) {
    let (scheme, rest) = match token.split_once("://") {
        Some((_, rest)) => (true, rest),
        None => (false, token),
    };
    let authority = rest.split(['/', '?', '#', '\\']).next().unwrap_or_default();
    let at = authority.rsplit_once('@');
    let host = at.map_or(authority, |(_, host)| host);
    let host = if host.starts_with('[') {
        host.split_once(']')
            .map_or(host, |(inside, _)| inside.trim_start_matches('['))
    } else {
        host.split(':').next().unwrap_or_default()
    };
    (scheme, at.is_some(), host)
}

fn registrable(host: &str) -> Option<&str> {
    let labels = host.rsplitn(3, '.').collect::<Vec<_>>();
    if labels.len() < 3 {
        return None;
    }
    let cut = host.len() - labels[0].len() - labels[1].len() - 1;
    host.get(cut..)
}

pub(super) fn shorten(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= 80 {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(77).collect();
    short.push('…');
    short
}

/// Calls `visit(path, text, is_number)` for every string and number in
/// `value`.
pub(super) fn leaves(value: &Value, path: &mut String, visit: &mut dyn FnMut(&str, &str, bool)) {
    match value {
        Value::String(text) => visit(path, text, false),
        Value::Number(number) => visit(path, &number.to_string(), true),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                leaves(item, path, visit);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let len = path.len();
                path.push('/');
                path.push_str(key);
                leaves(item, path, visit);
                path.truncate(len);
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}
