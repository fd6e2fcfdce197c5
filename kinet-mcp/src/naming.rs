//! `mcp__<server>__<tool>` names that model APIs accept.

use std::collections::HashMap;

/// Longest name model APIs accept.
pub const MAX_TOOL_NAME: usize = 64;

/// FNV-1a: a small, stable hash (names must not change between runs).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The qualified name of `tool` on `server`: `mcp__<server>__<tool>` with
/// every character outside `[A-Za-z0-9_-]` replaced by `_`; longer than 64
/// characters, it is cut and ends in `_` plus 8 hex digits of a hash of the
/// original names, so different long names stay different.
///
/// ```
/// use kinet_mcp::qualified_tool_name;
///
/// assert_eq!(qualified_tool_name("github", "create_issue"), "mcp__github__create_issue");
/// assert_eq!(qualified_tool_name("my server", "get.file"), "mcp__my_server__get_file");
/// let long = qualified_tool_name("server", &"x".repeat(100));
/// assert_eq!(long.len(), 64);
/// ```
pub fn qualified_tool_name(server: &str, tool: &str) -> String {
    let full = format!("mcp__{}__{}", sanitize(server), sanitize(tool));
    if full.len() <= MAX_TOOL_NAME {
        return full;
    }
    shortened(&full, &format!("{server}\0{tool}"))
}

fn shortened(name: &str, key: &str) -> String {
    let suffix = format!("_{:08x}", fnv1a(key) & 0xffff_ffff);
    let keep = MAX_TOOL_NAME - suffix.len();
    // Sanitised names are ASCII, so any byte index is a char boundary.
    format!("{}{suffix}", &name[..keep.min(name.len())])
}

/// Names for a whole set of `(server, tool)` pairs, unique: when two pairs
/// map to the same name (after sanitising), every one of them after the
/// first, in server-then-tool order, gets a hash suffix instead.
pub(crate) fn assign_names(pairs: &[(String, String)]) -> Vec<String> {
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_by(|&a, &b| pairs[a].cmp(&pairs[b]));
    let mut taken: HashMap<String, usize> = HashMap::new();
    let mut names = vec![String::new(); pairs.len()];
    for index in order {
        let (server, tool) = &pairs[index];
        let mut name = qualified_tool_name(server, tool);
        let mut attempt = 0u32;
        while taken.contains_key(&name) {
            attempt += 1;
            let base = format!("mcp__{}__{}", sanitize(server), sanitize(tool));
            let base = &base[..base.len().min(MAX_TOOL_NAME - 9)];
            name = shortened(base, &format!("{server}\0{tool}\0{attempt}"));
            if base.len() < MAX_TOOL_NAME - 9 {
                // shortened() cut nothing; keep the base readable.
                name = format!(
                    "{base}_{:08x}",
                    fnv1a(&format!("{server}\0{tool}\0{attempt}")) & 0xffff_ffff
                );
            }
        }
        taken.insert(name.clone(), index);
        names[index] = name;
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collisions_are_resolved_deterministically() {
        let pairs = vec![
            ("a.b".to_owned(), "t".to_owned()),
            ("a_b".to_owned(), "t".to_owned()),
            ("srv".to_owned(), "x".repeat(80)),
            ("srv".to_owned(), format!("{}y", "x".repeat(79))),
        ];
        let names = assign_names(&pairs);
        assert_eq!(names[0], "mcp__a_b__t");
        assert!(
            names[1].starts_with("mcp__a_b__t_") && names[1].len() == 20,
            "{}",
            names[1]
        );
        assert_ne!(names[2], names[3]);
        assert!(
            names
                .iter()
                .all(|n| n.len() <= 64 && crate::kinet_core::tool::is_valid_tool_name(n))
        );
        let mut reversed = pairs.clone();
        reversed.reverse();
        let again = assign_names(&reversed);
        assert_eq!(again[3], names[0]);
        assert_eq!(again[2], names[1]);
    }
}
