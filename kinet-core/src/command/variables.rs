//! The variables that choose which program runs.

/// Variables that choose which program runs, make a program run another
/// one, or load code or configuration into it (patterns: a name, or a
/// prefix ending in `*`). A command line that sets one needs a rule that
/// names it exactly (a `[[variable]]` rule); the shell tool passes on the
/// host's only when its `EnvPolicy` names them exactly
/// (`EnvPolicy::without_program_variables`).
pub const PROGRAM_VARIABLES: &[&str] = &[
    "PATH",
    "HOME",
    "SHELL",
    "ENV",
    "BASH_ENV",
    "BASH_FUNC_*",
    "SHELLOPTS",
    "BASHOPTS",
    "IFS",
    "PS4",
    "CDPATH",
    "GLOBIGNORE",
    "PROMPT_COMMAND",
    "LD_*",
    "GCONV_PATH",
    "GIT_*",
    "XDG_*",
    "PAGER",
    "MANPAGER",
    "EDITOR",
    "VISUAL",
    "BROWSER",
    "LESSOPEN",
    "LESSCLOSE",
    "RIPGREP_CONFIG_PATH",
    "TAR_OPTIONS",
    "PYTHON*",
    "PERL5*",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "NODE_OPTIONS",
    "NODE_PATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "CARGO_*",
    "RUSTC*",
    "RUSTDOC*",
    "RUSTFLAGS",
    "CC",
    "CXX",
    "MAKEFLAGS",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
];

/// Whether `name` is one of the [`PROGRAM_VARIABLES`].
pub fn is_program_variable(name: &str) -> bool {
    PROGRAM_VARIABLES
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => *pattern == name,
        })
}
