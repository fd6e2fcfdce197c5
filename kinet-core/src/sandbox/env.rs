//! Which of the host's environment variables a started command inherits.

use std::ffi::OsString;

use crate::command::is_program_variable;

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
    #[serde(default)]
    strip_program: bool,
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
            strip_program: false,
        }
    }

    /// Nothing of the host's environment.
    pub fn empty() -> Self {
        Self {
            all: false,
            allowed: Vec::new(),
            strip_program: false,
        }
    }

    /// The host's whole environment, secrets included.
    pub fn inherit_all() -> Self {
        Self {
            all: true,
            allowed: Vec::new(),
            strip_program: false,
        }
    }

    /// Also passes on `name`: a variable name, or a prefix ending in `*`
    /// (`"NPM_CONFIG_*"`).
    pub fn allow(mut self, name: impl Into<String>) -> Self {
        self.allowed.push(name.into());
        self
    }

    /// Also keeps out the [`PROGRAM_VARIABLES`](crate::command::PROGRAM_VARIABLES) this policy does not name
    /// exactly (by `allow("GIT_DIR")`, or in [`CORE_VARIABLES`]), however
    /// wide it is otherwise; `PATH` and `HOME` pass whenever allowed. The
    /// shell tool applies it to its commands.
    pub fn without_program_variables(mut self) -> Self {
        self.strip_program = true;
        self
    }

    /// Whether the host's variable `name` is passed on.
    pub fn allows(&self, name: &str) -> bool {
        let allowed = self.all
            || self
                .allowed
                .iter()
                .any(|rule| crate::rules::pattern_matches(rule, name));
        allowed
            && !(self.strip_program
                && is_program_variable(name)
                && name != "PATH"
                && name != "HOME"
                && !self.allowed.iter().any(|rule| rule == name))
    }

    /// The environment a command started with this policy gets: the
    /// host's variables it allows, then `set` (`None` removes).
    pub fn environment(
        &self,
        set: &std::collections::BTreeMap<String, Option<String>>,
    ) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .filter(|(name, _)| self.allows(name) && !set.contains_key(name))
            .collect();
        env.extend(
            set.iter()
                .filter_map(|(name, value)| Some((name.clone(), value.clone()?))),
        );
        env
    }

    /// Whether a command keeps the host's whole environment (nothing to
    /// filter).
    fn passes_everything(&self) -> bool {
        self.all && !self.strip_program
    }

    /// Gives `command` the host's allowed variables, then what the caller
    /// set or removed on it.
    pub(super) fn apply(&self, command: &mut std::process::Command) {
        if self.passes_everything() {
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
        let strict = EnvPolicy::inherit_all().without_program_variables();
        assert!(strict.allows("PATH") && strict.allows("OPENAI_API_KEY"));
        for name in [
            "LD_PRELOAD",
            "GIT_DIR",
            "BASH_ENV",
            "PAGER",
            "RIPGREP_CONFIG_PATH",
        ] {
            assert!(!strict.allows(name), "{name}");
        }
        let named = EnvPolicy::core()
            .allow("GIT_DIR")
            .without_program_variables();
        assert!(
            named.allows("GIT_DIR") && named.allows("CARGO_HOME") && !named.allows("GIT_PAGER")
        );
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
