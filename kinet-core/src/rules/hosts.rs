//! The network allowlist of a sandbox: which hosts (and ports) a
//! sandboxed command may reach through the sandbox's proxy.

use std::fmt;

/// One entry of a network allowlist: `example.com` (that host),
/// `*.example.com` (its subdomains, not itself), an IP address, each
/// optionally with `:port` (default: any port). Names compare without
/// case and without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    host: String,
    subdomains: bool,
    port: Option<u16>,
}

impl HostPattern {
    /// Parses an entry; the error says what is wrong with it.
    pub fn parse(entry: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("the network allowlist entry `{entry}` {why}");
        let entry_trimmed = entry.trim();
        if entry_trimmed.is_empty() {
            return Err(bad("is empty"));
        }
        let (host, port) = split_host_port(entry_trimmed).map_err(|why| bad(&why))?;
        let (host, subdomains) = match host.strip_prefix("*.") {
            Some(rest) => (rest, true),
            None => (host, false),
        };
        let host = normalize(host);
        let literal = host.parse::<std::net::IpAddr>().is_ok();
        if !literal && !is_host_name(&host) {
            return Err(bad(
                "is not a host name, `*.domain`, an IP address or one of them with `:port`",
            ));
        }
        if literal && subdomains {
            return Err(bad("puts `*.` before an IP address"));
        }
        Ok(Self {
            host,
            subdomains,
            port,
        })
    }

    /// Whether a request for `host` on `port` matches.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        let host = normalize(host);
        if self.subdomains {
            host.len() > self.host.len() + 1
                && host.ends_with(&self.host)
                && host.as_bytes()[host.len() - self.host.len() - 1] == b'.'
        } else {
            host == self.host
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.subdomains {
            f.write_str("*.")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// Splits `host`, `host:port`, `[v6]` or `[v6]:port`; a bare IPv6
/// address (more than one colon) is a host without a port.
pub(crate) fn split_host_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let parse_port = |port: &str| {
        port.parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("has a bad port `{port}`"))
    };
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "has an unclosed `[`".to_owned())?;
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(parse_port(port)?))),
                None => Err(format!("has `{after}` after `]`")),
            },
        };
    }
    match text.matches(':').count() {
        0 => Ok((text, None)),
        1 => {
            let (host, port) = text.split_once(':').unwrap_or((text, ""));
            Ok((host, Some(parse_port(port)?)))
        }
        _ => Ok((text, None)),
    }
}

fn normalize(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Letters, digits, `-` and `_` in dot-separated labels of 1 to 63.
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The hosts a sandboxed command may reach: allowed when an `allow`
/// pattern matches and no `deny` pattern does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Allowlist {
    pub(crate) allow: Vec<HostPattern>,
    pub(crate) forbid: Vec<HostPattern>,
}

impl Allowlist {
    /// Parses both lists; the error names the bad entry.
    pub(crate) fn parse(allow: &[String], forbid: &[String]) -> Result<Self, String> {
        let parse = |list: &[String]| {
            list.iter()
                .map(|entry| HostPattern::parse(entry))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Self {
            allow: parse(allow)?,
            forbid: parse(forbid)?,
        })
    }

    pub(crate) fn permits(&self, host: &str, port: u16) -> bool {
        self.allow.iter().any(|p| p.matches(host, port))
            && !self.forbid.iter().any(|p| p.matches(host, port))
    }

    /// The allowed entries, for messages.
    pub(crate) fn describe(&self) -> String {
        let allowed: Vec<String> = self.allow.iter().map(ToString::to_string).collect();
        let mut text = allowed.join(", ");
        if !self.forbid.is_empty() {
            let forbidden: Vec<String> = self.forbid.iter().map(ToString::to_string).collect();
            text.push_str(&format!(" (except {})", forbidden.join(", ")));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> HostPattern {
        HostPattern::parse(text).unwrap()
    }

    #[test]
    fn names_subdomains_ports_and_addresses() {
        assert!(pattern("crates.io").matches("crates.io", 443));
        assert!(pattern("crates.io").matches("Crates.IO.", 80));
        assert!(!pattern("crates.io").matches("static.crates.io", 443));
        assert!(!pattern("crates.io").matches("evilcrates.io", 443));
        assert!(pattern("*.crates.io").matches("static.crates.io", 443));
        assert!(!pattern("*.crates.io").matches("crates.io", 443));
        assert!(!pattern("*.crates.io").matches("static.evilcrates.io", 443));
        assert!(pattern("localhost:8080").matches("localhost", 8080));
        assert!(!pattern("localhost:8080").matches("localhost", 8081));
        assert!(pattern("127.0.0.1").matches("127.0.0.1", 1));
        assert!(pattern("[::1]:80").matches("::1", 80));
        assert!(pattern("::1").matches("::1", 80));
        assert_eq!(
            pattern("*.Example.com.:443").to_string(),
            "*.example.com:443"
        );
        for bad in [
            "",
            "a b",
            "*.1.2.3.4",
            "host:0",
            "host:x",
            "[::1",
            "ex*ample.com",
            "http://x",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn forbidden_entries_win() {
        let list = Allowlist::parse(
            &["*.github.com".into(), "github.com".into()],
            &["gist.github.com".into()],
        )
        .unwrap();
        assert!(list.permits("api.github.com", 443));
        assert!(list.permits("github.com", 443));
        assert!(!list.permits("gist.github.com", 443));
        assert!(!list.permits("example.com", 443));
        assert_eq!(
            list.describe(),
            "*.github.com, github.com (except gist.github.com)"
        );
    }
}
