//! The `WWW-Authenticate: Bearer …` challenge of a 401 or 403 answer
//! (RFC 6750 §3, RFC 9728 §5.1).

use std::collections::BTreeMap;

/// What a Bearer challenge says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Challenge {
    /// Where the protected-resource metadata is (RFC 9728).
    pub(crate) resource_metadata: Option<String>,
    /// The scopes the request needs, space-separated.
    pub(crate) scope: Option<String>,
    /// `invalid_token`, `insufficient_scope`, …
    pub(crate) error: Option<String>,
}

impl Challenge {
    /// The Bearer challenge among those in `header` (schemes compare
    /// without case; a header without one gives an empty challenge).
    pub(crate) fn parse(header: &str) -> Self {
        let params = bearer_params(header);
        let take = |name: &str| params.get(name).cloned().filter(|v| !v.is_empty());
        Self {
            resource_metadata: take("resource_metadata"),
            scope: take("scope"),
            error: take("error"),
        }
    }
}

/// The auth-params of the first Bearer challenge, names in lower case.
fn bearer_params(header: &str) -> BTreeMap<String, String> {
    let mut params = BTreeMap::new();
    let mut rest = header;
    let mut in_bearer = false;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        if rest.is_empty() {
            break;
        }
        let before = rest.len();
        let name_end = rest
            .find(|c: char| c == '=' || c == ',' || c.is_whitespace())
            .unwrap_or(rest.len());
        let name = &rest[..name_end];
        let after = rest[name_end..].trim_start();
        if let Some(value_text) = after.strip_prefix('=')
            && !value_text.starts_with('=')
        {
            // name=value: a parameter of the current challenge.
            let (value, remaining) = read_value(value_text.trim_start());
            if in_bearer {
                params.entry(name.to_ascii_lowercase()).or_insert(value);
            }
            rest = remaining;
        } else {
            // A scheme name (or a token68, which Bearer challenges do not
            // use): a new challenge starts.
            if in_bearer {
                break;
            }
            in_bearer = name.eq_ignore_ascii_case("bearer");
            rest = after.strip_prefix('=').map_or(after, |_| {
                // token68 with padding: skip it.
                after.trim_start_matches('=')
            });
        }
        if rest.len() >= before {
            // Nothing was consumed: malformed; stop rather than spin.
            break;
        }
    }
    params
}

/// A token or a quoted string (with `\` escapes), and what follows it.
fn read_value(text: &str) -> (String, &str) {
    if let Some(quoted) = text.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(escaped);
                    }
                }
                '"' => return (value, &quoted[i + 1..]),
                c => value.push(c),
            }
        }
        (value, "")
    } else {
        let end = text
            .find(|c: char| c == ',' || c.is_whitespace())
            .unwrap_or(text.len());
        (text[..end].to_owned(), &text[end..])
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_parameters_are_read() {
        let c = Challenge::parse(
            r#"Bearer error="invalid_token", error_description="Authentication required", resource_metadata="http://127.0.0.1:1/.well-known/oauth-protected-resource/mcp""#,
        );
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("http://127.0.0.1:1/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        let c = Challenge::parse(
            r#"Basic realm="a, b", bearer Scope="files:read files:write", error=insufficient_scope"#,
        );
        assert_eq!(c.scope.as_deref(), Some("files:read files:write"));
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        let c = Challenge::parse(r#"Bearer realm="x\"y", scope="a""#);
        assert_eq!(c.scope.as_deref(), Some("a"));
        // Another scheme's parameters are not the Bearer's.
        let c = Challenge::parse(r#"Basic scope="no", Bearer"#);
        assert_eq!(c.scope, None);
        let c = Challenge::parse(r#"Bearer, DPoP scope="no""#);
        assert_eq!(c.scope, None);
    }

    #[test]
    fn hostile_headers_never_panic() {
        // Every prefix of awkward headers, and bytes around the quoting.
        let samples = [
            r#"Bearer scope="unterminated"#,
            r#"Bearer ==== scope="a""#,
            "Bearer scope=\"é\\",
            "Bearer ,,, =, =\"\", scope=",
            "Négociation abc==, Bearer résource_metadata=\"ü\"",
        ];
        for sample in samples {
            for (i, _) in sample.char_indices() {
                let _ = Challenge::parse(&sample[..i]);
                let _ = Challenge::parse(&sample[i..]);
            }
        }
        let mut seed = 7u64;
        let alphabet = [
            'B', 'e', 'a', 'r', ' ', '=', '"', '\\', ',', 'é', 's', '\t', '\n',
        ];
        for _ in 0..20_000 {
            let text: String = (0..24)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    alphabet[(seed >> 33) as usize % alphabet.len()]
                })
                .collect();
            let _ = Challenge::parse(&text);
        }
    }
}
