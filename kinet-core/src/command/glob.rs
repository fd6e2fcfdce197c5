//! Pathname expansion as dash and bash do it (`*`, `?`, `[...]`; no
//! match leaves the word as written; a leading `.` only matched by a `.`;
//! results sorted), done by kinet at check time, beneath the workspace
//! roots only. What the two shells expand differently, or what lies
//! outside the roots or behind a symlink, is refused.

use std::ffi::OsStr;

use super::lex::Char;
use super::resolve::Context;
use crate::confine::{EntryKind, WorkspaceDir};

/// Most names listed for one word, and most words it may expand to.
const MAX_LISTED: usize = 20_000;
const MAX_MATCHES: usize = 5_000;

/// Whether an unquoted glob character occurs in `chars`.
pub(crate) fn is_pattern(chars: &[Char]) -> bool {
    chars
        .iter()
        .any(|c| !c.quoted && matches!(c.c, '*' | '?' | '['))
}

/// The words `chars` expands to, sorted; `None` when nothing matches (the
/// word stays as written).
pub(crate) fn expand(chars: &[Char], context: &Context) -> Result<Option<Vec<String>>, String> {
    let shown: String = chars.iter().map(|c| c.c).collect();
    let refuse = |why: &str| Err(format!("the glob `{shown}` {why}"));
    let components: Vec<&[Char]> = chars.split(|c| c.c == '/').collect();
    let absolute = chars.first().is_some_and(|c| c.c == '/');
    // The literal directory the pattern starts in, as written.
    let first_pattern = components
        .iter()
        .position(|part| is_pattern(part))
        .unwrap_or(components.len());
    let prefix = &components[..first_pattern];
    let patterns = &components[first_pattern..];
    for (n, part) in components.iter().enumerate() {
        let text: String = part.iter().map(|c| c.c).collect();
        if text == ".." {
            return refuse("climbs out with `..`");
        }
        let empty_inside = text.is_empty() && n > 0 && n + 1 < components.len();
        if empty_inside {
            return refuse("has an empty path component");
        }
        if n >= first_pattern && text.starts_with('.') && is_pattern(part) {
            return refuse("starts with `.` (dash also matches `.` and `..`, bash does not)");
        }
        if part.iter().any(|c| !c.quoted && c.c == '[') && !closes(part) {
            // A `[` whose set would span a `/`.
            if chars
                .iter()
                .skip_while(|c| c.c != '[' || c.quoted)
                .any(|c| c.c == '/')
            {
                return refuse("has a `[` set across a `/`");
            }
        }
    }
    if context.is_examples() {
        return Ok(None);
    }
    let written_prefix: String = prefix
        .iter()
        .map(|part| part.iter().map(|c| c.c).collect::<String>())
        .collect::<Vec<_>>()
        .join("/");
    let dir_text = if absolute && written_prefix.is_empty() {
        "/".to_owned()
    } else if written_prefix.is_empty() {
        ".".to_owned()
    } else {
        written_prefix.clone()
    };
    let place = crate::confine::place(context.cwd(), context.workspace_roots(), &dir_text)
        .map_err(|_| format!("the glob `{shown}` looks outside the workspace roots"))?;
    let dir = match place.open_walk() {
        Ok(dir) => dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(_) => return refuse("starts in a directory kinet cannot open beneath the roots"),
    };
    let lead = if written_prefix.is_empty() && !absolute {
        String::new()
    } else {
        format!("{written_prefix}/")
    };
    let mut found = Vec::new();
    let mut listed = 0;
    walk(&dir, patterns, lead, &mut found, &mut listed)
        .map_err(|why| format!("the glob `{shown}` {why}"))?;
    if found.is_empty() {
        return Ok(None);
    }
    found.sort_by(|a: &String, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(Some(found))
}

/// Matches `patterns` (one per remaining component) beneath `dir`.
fn walk(
    dir: &WorkspaceDir,
    patterns: &[&[Char]],
    lead: String,
    found: &mut Vec<String>,
    listed: &mut usize,
) -> Result<(), String> {
    let Some((pattern, rest)) = patterns.split_first() else {
        return Ok(());
    };
    let last = rest.is_empty();
    // `dir/*/`: a trailing slash matches directories alone.
    let dirs_only = rest.len() == 1 && rest[0].is_empty();
    if !is_pattern(pattern) {
        let name: String = pattern.iter().map(|c| c.c).collect();
        if name.is_empty() || name == "." {
            let next = if name.is_empty() {
                lead
            } else {
                format!("{lead}./")
            };
            return walk(dir, rest, next, found, listed);
        }
        return step(dir, OsStr::new(&name), &name, rest, &lead, found, listed);
    }
    let entries = dir
        .entries()
        .map_err(|e| format!("could not list a directory: {e}"))?;
    *listed += entries.len();
    if *listed > MAX_LISTED {
        return Err(format!("lists more than {MAX_LISTED} names"));
    }
    for entry in entries {
        let Some(name) = entry.name().to_str() else {
            return Err("matches a name that is not UTF-8".into());
        };
        if !matches(pattern, name)? {
            continue;
        }
        if last && !dirs_only {
            found.push(format!("{lead}{name}"));
        } else {
            if entry.kind() == EntryKind::Symlink {
                return Err(format!("goes through the symlink `{name}`"));
            }
            if entry.kind() != EntryKind::Dir {
                continue;
            }
            if dirs_only {
                found.push(format!("{lead}{name}/"));
                continue;
            }
            let sub = dir
                .open_dir(entry.name())
                .map_err(|e| format!("could not open `{name}`: {e}"))?;
            walk(&sub, rest, format!("{lead}{name}/"), found, listed)?;
        }
        if found.len() > MAX_MATCHES {
            return Err(format!("matches more than {MAX_MATCHES} names"));
        }
    }
    Ok(())
}

/// A literal component in the middle of a pattern: entered when it is a
/// directory (not through a symlink).
fn step(
    dir: &WorkspaceDir,
    name: &OsStr,
    shown: &str,
    rest: &[&[Char]],
    lead: &str,
    found: &mut Vec<String>,
    listed: &mut usize,
) -> Result<(), String> {
    match dir.metadata(name) {
        Err(_) => Ok(()),
        Ok(meta) if meta.kind == EntryKind::Symlink => {
            Err(format!("goes through the symlink `{shown}`"))
        }
        Ok(meta) if meta.kind == EntryKind::Dir => {
            let sub = dir
                .open_dir(name)
                .map_err(|e| format!("could not open `{shown}`: {e}"))?;
            walk(&sub, rest, format!("{lead}{shown}/"), found, listed)
        }
        Ok(_) => Ok(()),
    }
}

/// Whether every unquoted `[` of a component has its `]`.
fn closes(part: &[Char]) -> bool {
    let mut i = 0;
    while i < part.len() {
        if !part[i].quoted && part[i].c == '[' {
            match bracket_end(part, i) {
                Some(end) => i = end + 1,
                None => return false,
            }
        } else {
            i += 1;
        }
    }
    true
}

/// The index of the `]` closing the set that opens at `open`.
fn bracket_end(pattern: &[Char], open: usize) -> Option<usize> {
    let mut i = open + 1;
    if pattern
        .get(i)
        .is_some_and(|c| !c.quoted && (c.c == '!' || c.c == '^'))
    {
        i += 1;
    }
    // A `]` first in the set is a member.
    if pattern.get(i).is_some_and(|c| c.c == ']') {
        i += 1;
    }
    while i < pattern.len() {
        if !pattern[i].quoted && pattern[i].c == ']' {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Whether `name` matches one component's pattern.
pub(crate) fn matches(pattern: &[Char], name: &str) -> Result<bool, String> {
    let name: Vec<char> = name.chars().collect();
    // A leading `.` is matched only by a `.` written first.
    if name.first() == Some(&'.') && pattern.first().is_none_or(|c| c.c != '.') {
        return Ok(false);
    }
    match_from(pattern, &name)
}

fn match_from(pattern: &[Char], name: &[char]) -> Result<bool, String> {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() {
            let c = pattern[p];
            if !c.quoted && c.c == '*' {
                star = Some((p, n));
                p += 1;
                continue;
            }
            if n < name.len() {
                let (hit, width) = if !c.quoted && c.c == '?' {
                    (true, 1)
                } else if !c.quoted && c.c == '[' {
                    match bracket_end(pattern, p) {
                        Some(end) => (in_set(&pattern[p + 1..end], name[n])?, end + 1 - p),
                        None => (name[n] == '[', 1),
                    }
                } else {
                    (c.c == name[n], 1)
                };
                if hit {
                    p += width;
                    n += 1;
                    continue;
                }
            }
        } else if n == name.len() {
            return Ok(true);
        }
        match star {
            Some((sp, sn)) if sn < name.len() => {
                star = Some((sp, sn + 1));
                p = sp + 1;
                n = sn + 1;
            }
            _ => return Ok(false),
        }
    }
}

/// Whether `c` is in the set written between `[` and `]`.
fn in_set(set: &[Char], c: char) -> Result<bool, String> {
    let (negate, mut items) = match set.first() {
        Some(first) if !first.quoted && (first.c == '!' || first.c == '^') => (true, &set[1..]),
        _ => (false, set),
    };
    let mut hit = false;
    while let Some(first) = items.first() {
        if !first.quoted
            && first.c == '['
            && items.get(1).is_some_and(|c| matches!(c.c, ':' | '=' | '.'))
        {
            return Err("uses a character class, which kinet does not match".into());
        }
        if items.len() >= 3 && items[1].c == '-' && !items[1].quoted {
            if first.c <= c && c <= items[2].c {
                hit = true;
            }
            items = &items[3..];
        } else {
            if first.c == c {
                hit = true;
            }
            items = &items[1..];
        }
    }
    Ok(hit != negate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(text: &str) -> Vec<Char> {
        text.chars().map(|c| Char { c, quoted: false }).collect()
    }

    #[test]
    fn patterns_match_as_the_shells_do() {
        let m = |p: &str, n: &str| matches(&chars(p), n).unwrap();
        assert!(m("*.rs", "main.rs"));
        assert!(!m("*.rs", ".hidden.rs"));
        assert!(m(".*.rs", ".hidden.rs"));
        assert!(m("a?c", "abc") && !m("a?c", "ac"));
        assert!(m("[a-c]x", "bx") && !m("[!a-c]x", "bx") && m("[^a-c]x", "dx"));
        assert!(m("[]]", "]") && m("[x", "[x"));
        assert!(m("*", "--output=x"));
        assert!(m("**", "a") && m("a*b*c", "axxbyyc") && !m("a*b*c", "axxbyy"));
        let quoted: Vec<Char> = "*x".chars().map(|c| Char { c, quoted: true }).collect();
        assert!(!matches(&quoted, "ax").unwrap() && matches(&quoted, "*x").unwrap());
        assert!(matches(&chars("[[:alpha:]]"), "a").is_err());
    }

    #[test]
    fn expansion_stays_beneath_the_root_and_sorts() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for name in ["b.rs", "a.rs", ".h.rs", "--output=x", "c.txt"] {
            std::fs::write(root.join(name), "").unwrap();
        }
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "").unwrap();
        let context = Context::new(&root);
        let expand = |p: &str| expand(&chars(p), &context);
        assert_eq!(expand("*.rs").unwrap().unwrap(), ["a.rs", "b.rs"]);
        assert_eq!(expand("./*.rs").unwrap().unwrap(), ["./a.rs", "./b.rs"]);
        assert_eq!(expand("*/*.rs").unwrap().unwrap(), ["src/lib.rs"]);
        assert_eq!(expand("src/*").unwrap().unwrap(), ["src/lib.rs"]);
        assert_eq!(expand("*/").unwrap().unwrap(), ["src/"]);
        assert_eq!(expand("*.none").unwrap(), None);
        assert!(
            expand("*")
                .unwrap()
                .unwrap()
                .contains(&"--output=x".to_owned())
        );
        let absolute = format!("{}/*.txt", root.display());
        assert_eq!(
            expand(&absolute).unwrap().unwrap(),
            [format!("{}/c.txt", root.display())]
        );
        std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
        assert!(expand("*/*.rs").is_err(), "through a symlink");
        for refused in ["out/*", "/etc/*", "../*", ".*", "*/../*"] {
            assert!(expand(refused).is_err(), "{refused}: {:?}", expand(refused));
        }
    }
}
