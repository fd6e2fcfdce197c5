//! Which of the host's environment variables a started command inherits.

use std::ffi::OsString;

/// The variables [`EnvPolicy::core`] passes on: what shells, build tools,
/// compilers and package managers need to find themselves and behave, and
/// nothing that commonly holds a secret (API keys, tokens, proxy URLs with
/// passwords, cloud credentials are all left out).
pub const CORE_VARIABLES: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "TMP",
    "TEMP",
    "HOSTNAME",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "JAVA_HOME",
    "PYENV_ROOT",
    "VIRTUAL_ENV",
    "NVM_DIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Which of the host's environment variables a command started through
/// [`Launch`](super::Launch) inherits. Variables the caller sets on the
/// command itself (`Command::env`) always apply.
///
/// [`core`](Self::core) (the shell tool's default) passes on
/// [`CORE_VARIABLES`] only, so a command the model writes cannot print the
/// host's API keys with `env`; widen it with [`allow`](Self::allow), or
/// pass everything with [`inherit_all`](Self::inherit_all).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EnvPolicy {
    all: bool,
    allowed: Vec<String>,
}

impl Default for EnvPolicy {
    /// [`core`](Self::core).
    fn default() -> Self {
        Self::core()
    }
}

impl EnvPolicy {
    /// [`CORE_VARIABLES`] only.
    pub fn core() -> Self {
        Self {
            all: false,
            allowed: CORE_VARIABLES.iter().map(|&v| v.to_owned()).collect(),
        }
    }

    /// Nothing of the host's environment.
    pub fn empty() -> Self {
        Self {
            all: false,
            allowed: Vec::new(),
        }
    }

    /// The host's whole environment, secrets included.
    pub fn inherit_all() -> Self {
        Self {
            all: true,
            allowed: Vec::new(),
        }
    }

    /// Also passes on `name`: a variable name, or a prefix ending in `*`
    /// (`"NPM_CONFIG_*"`).
    pub fn allow(mut self, name: impl Into<String>) -> Self {
        self.allowed.push(name.into());
        self
    }

    /// Whether the host's variable `name` is passed on.
    pub fn allows(&self, name: &str) -> bool {
        self.all
            || self
                .allowed
                .iter()
                .any(|rule| crate::rules::pattern_matches(rule, name))
    }

    /// Gives `command` the host's allowed variables, then what the caller
    /// set or removed on it.
    pub(super) fn apply(&self, command: &mut std::process::Command) {
        if self.all {
            return;
        }
        let explicit: Vec<(OsString, Option<OsString>)> = command
            .get_envs()
            .map(|(name, value)| (name.to_owned(), value.map(ToOwned::to_owned)))
            .collect();
        command.env_clear();
        for (name, value) in std::env::vars_os() {
            if name.to_str().is_some_and(|name| self.allows(name)) {
                command.env(name, value);
            }
        }
        for (name, value) in explicit {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_passes_the_basics_and_no_secrets() {
        let core = EnvPolicy::core();
        for name in ["PATH", "HOME", "LC_ALL", "LC_CTYPE", "TMPDIR"] {
            assert!(core.allows(name), "{name}");
        }
        for name in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "HTTPS_PROXY",
            "PATHOLOGICAL",
        ] {
            assert!(!core.allows(name), "{name}");
        }
        let wider = EnvPolicy::core().allow("NPM_CONFIG_*").allow("CI");
        assert!(wider.allows("NPM_CONFIG_CACHE") && wider.allows("CI"));
        assert!(!wider.allows("CIRCLE_TOKEN"));
        assert!(EnvPolicy::inherit_all().allows("OPENAI_API_KEY"));
        assert!(!EnvPolicy::empty().allows("PATH"));
    }

    #[test]
    fn explicit_settings_survive_the_filter() {
        let mut command = std::process::Command::new("env");
        command.env("KINET_SET_HERE", "1").env_remove("HOME");
        EnvPolicy::empty()
            .allow("PATH")
            .allow("HOME")
            .apply(&mut command);
        let envs: Vec<_> = command
            .get_envs()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.is_some()))
            .collect();
        assert!(envs.contains(&("KINET_SET_HERE".into(), true)));
        // Removed stays removed (after the clear, by not being set).
        assert!(!envs.contains(&("HOME".into(), true)));
        assert!(!envs.iter().any(|(k, _)| k == "USER"));
    }
}
