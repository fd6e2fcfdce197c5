//! From a parsed line to a [`Plan`]: words expanded, programs resolved,
//! wrappers read, nested shells planned as their scripts.

use super::glob;
use super::grammar::{self, Simple};
use super::lex::{Char, OpKind, RedirectOp, Word};
use super::pathcache::Lookups;
use super::resolve::{Context, DEFAULT_PATH};
use super::wrappers::{self, is_wrapper};
use super::{
    Command, Invocation, Item, Nested, Pipeline, Plan, Planned, Redirect, RedirectFile,
    RedirectKind, Target,
};

/// How deep `sh -c` may nest.
const MAX_DEPTH: usize = 4;

/// Where a shell looks for programs when `PATH` is not set.
const SHELL_DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Shell builtins that change or read the shell's own state (or have no
/// program of their name): a line using one needs a real shell.
const BUILTINS: &[&str] = &[
    ".",
    ":",
    "source",
    "alias",
    "unalias",
    "bg",
    "fg",
    "jobs",
    "break",
    "continue",
    "cd",
    "chdir",
    "eval",
    "exit",
    "export",
    "readonly",
    "return",
    "set",
    "shift",
    "times",
    "trap",
    "unset",
    "umask",
    "ulimit",
    "wait",
    "read",
    "getopts",
    "hash",
    "type",
    "local",
    "declare",
    "typeset",
    "let",
    "shopt",
    "enable",
    "builtin",
    "caller",
    "compgen",
    "complete",
    "compopt",
    "dirs",
    "popd",
    "pushd",
    "disown",
    "history",
    "fc",
    "help",
    "logout",
    "mapfile",
    "readarray",
    "suspend",
    "bind",
];

/// The shells whose `-c` script kinet plans itself.
const SHELLS: &[&str] = &["sh", "bash", "dash"];

/// Plans `line` for running in `context` (see the [module docs](super)).
pub fn plan(line: &str, context: &Context) -> Planned {
    let cx = Cx {
        context,
        lookups: std::cell::RefCell::new(Lookups::default()),
    };
    match plan_at(line, &cx, 0, true) {
        Ok(plan) => Planned::Plan(plan),
        Err(why) => Planned::Unsure(why),
    }
}

/// Where a line is planned, and the directories already looked in.
struct Cx<'a> {
    context: &'a Context,
    lookups: std::cell::RefCell<Lookups>,
}

impl Cx<'_> {
    fn find(&self, word: &str, path: &str) -> super::resolve::Found {
        self.context
            .find(word, path, &mut self.lookups.borrow_mut())
    }
}

/// `globs`: whether the line's first pipeline may expand globs (no
/// command ran before it).
fn plan_at(line: &str, cx: &Cx<'_>, depth: usize, globs: bool) -> Result<Plan, String> {
    if depth > MAX_DEPTH {
        return Err("shells nested too deep".into());
    }
    let script = grammar::parse(line)?;
    let mut items = Vec::with_capacity(script.items.len());
    for (n, item) in script.items.iter().enumerate() {
        if item.background {
            return Err(
                "a background job (`&`): dash and bash give it different input, and it would end with the line"
                    .into(),
            );
        }
        let first_globs = globs && n == 0 && !writes(&item.first);
        let first = pipeline(&item.first, cx, depth, first_globs)?;
        let mut rest = Vec::with_capacity(item.rest.len());
        for (connector, commands) in &item.rest {
            rest.push((*connector, pipeline(commands, cx, depth, false)?));
        }
        items.push(Item { first, rest });
    }
    Ok(Plan { items })
}

/// Whether a pipeline may write a file through a redirection (which a
/// glob beside it could see or not, by timing): its own, or a nested
/// shell's.
fn writes(commands: &[Simple]) -> bool {
    commands.iter().any(|simple| {
        let nested = simple
            .words
            .first()
            .is_some_and(|w| SHELLS.contains(&program_name(&w.text())));
        nested
            || simple.redirects.iter().any(|(op, word)| {
                matches!(op.kind, OpKind::Write | OpKind::Append) && word.text() != "/dev/null"
            })
    })
}

fn pipeline(
    commands: &[Simple],
    cx: &Cx<'_>,
    depth: usize,
    globs: bool,
) -> Result<Pipeline, String> {
    let commands = commands
        .iter()
        .map(|simple| command(simple, cx, depth, globs))
        .collect::<Result<_, _>>()?;
    Ok(Pipeline { commands })
}

/// A word after expansion, and whether a glob made it.
struct Expanded {
    text: String,
    from_glob: bool,
}

fn command(simple: &Simple, cx: &Cx<'_>, depth: usize, globs: bool) -> Result<Command, String> {
    let context = cx.context;
    let mut env = Vec::with_capacity(simple.assignments.len());
    for (name, value) in &simple.assignments {
        set_var(&mut env, name, assignment_value(name, value, context)?);
    }
    let mut words = Vec::with_capacity(simple.words.len());
    for word in &simple.words {
        expand_word(word, context, globs, &mut words)?;
    }
    let redirects = simple
        .redirects
        .iter()
        .map(|(op, word)| redirect(*op, word, context))
        .collect::<Result<Vec<_>, _>>()?;
    let (start, exec) = prefixes(&words)?;
    if exec && redirects.iter().any(|r| r.file().is_some()) {
        return Err(
            "`exec` with a redirection: when the file cannot be opened, dash stops and bash goes on"
                .into(),
        );
    }
    let words = &words[start..];
    let written: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
    let path_var = lookup(&env, "PATH")
        .or_else(|| context.var("PATH"))
        .unwrap_or(SHELL_DEFAULT_PATH)
        .to_owned();
    let found = cx.find(&written[0], &path_var);
    let name = program_name(&written[0]);
    if found.system && SHELLS.contains(&name) {
        if !env.is_empty() || exec {
            return Err(format!(
                "`{}` is given variables or run by `exec`",
                written[0]
            ));
        }
        return nested(words, redirects, cx, depth, globs);
    }
    let mut invocation = Invocation {
        // Not found: it fails to start, as in a shell.
        path: found
            .path
            .clone()
            .unwrap_or_else(|| written[0].clone().into()),
        argv: written.clone(),
        env: env.clone(),
        redirects,
        exec,
        target: Target {
            written: written[0].clone(),
            path: found.path,
            system: found.system,
            args: Vec::new(),
            open_args: false,
            env: env.clone(),
        },
        wrappers: Vec::new(),
    };
    // A program not found, or not a system program, is no wrapper: the
    // target is the program itself.
    let at = unwrap(&mut invocation, words, &env, &path_var, cx)?;
    invocation.target.args = invocation.argv[at + 1..].to_vec();
    Ok(Command::Program(invocation))
}

/// Strips `exec` and `command` in front of the program; refuses builtins.
/// Returns where the program is and whether `exec` was given.
fn prefixes(words: &[Expanded]) -> Result<(usize, bool), String> {
    let mut start = 0;
    let mut exec = false;
    loop {
        let Some(first) = words.get(start) else {
            return Err(if exec {
                "`exec` without a command changes the shell's own descriptors".into()
            } else {
                "`command` without a program".into()
            });
        };
        if first.from_glob {
            return Err(format!(
                "the program's name `{}` comes from a glob",
                first.text
            ));
        }
        let next = words.get(start + 1);
        match first.text.as_str() {
            "exec" => {
                if next.is_some_and(|n| n.text.starts_with('-')) {
                    return Err("`exec` with options (dash and bash read them differently)".into());
                }
                if exec || next.is_some_and(|n| n.text == "command" || n.text == "exec") {
                    return Err(
                        "`exec` runs a program, and what follows it is a shell builtin".into(),
                    );
                }
                exec = true;
                start += 1;
            }
            "command" => {
                start += 1;
                match next {
                    Some(n) if n.text == "--" => start += 1,
                    Some(n) if n.text.starts_with('-') => {
                        return Err(format!(
                            "`command {}` looks the program up differently or runs none",
                            n.text
                        ));
                    }
                    _ => {}
                }
            }
            "" => return Err("an empty program name".into()),
            name if BUILTINS.contains(&name) => {
                return Err(format!(
                    "`{name}` is a shell builtin (it changes or reads the shell's own state)"
                ));
            }
            _ => return Ok((start, exec)),
        }
    }
}

fn program_name(written: &str) -> &str {
    written.rsplit('/').next().unwrap_or(written)
}

/// Sets `name` in `env`: the last assignment of a name wins, once.
fn set_var(env: &mut Vec<(String, String)>, name: &str, value: String) {
    env.retain(|(n, _)| n != name);
    env.push((name.to_owned(), value));
}

fn lookup<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Reads the chain of wrappers starting at the program: each one's
/// options by its grammar, the program it runs resolved and written into
/// `argv` as a path. Returns where the target starts in `argv`.
fn unwrap(
    invocation: &mut Invocation,
    words: &[Expanded],
    env: &[(String, String)],
    path_var: &str,
    cx: &Cx<'_>,
) -> Result<usize, String> {
    let mut at = 0;
    // The environment the program at `at` gets, as far as kinet models
    // it: the context's, the assignments, what `env` changed.
    let mut cleared = false;
    let mut unset: Vec<String> = Vec::new();
    let mut set: Vec<(String, String)> = env.to_vec();
    let mut current_path = path_var.to_owned();
    loop {
        let target = &invocation.target;
        let name = program_name(&invocation.argv[at]).to_owned();
        if !(target.system && is_wrapper(&name)) {
            return Ok(at);
        }
        let wrapped = wrappers::read(&name, &invocation.argv[at..])?;
        let end = wrapped.command.map_or(invocation.argv.len(), |c| at + c);
        if let Some(word) = words[at + 1..end].iter().find(|w| w.from_glob) {
            return Err(format!("`{name}` is given `{}` by a glob", word.text));
        }
        if wrapped.clear {
            cleared = true;
            set.clear();
            unset.clear();
        }
        for variable in &wrapped.unset {
            set.retain(|(n, _)| n != variable);
            unset.push(variable.clone());
        }
        for (variable, value) in &wrapped.set {
            set_var(&mut set, variable, value.clone());
        }
        invocation.wrappers.push(name.clone());
        let (inner_at, inner_word) = match wrapped.command {
            Some(c) => (at + c, invocation.argv[at + c].clone()),
            // xargs runs echo when given no command.
            None if name == "xargs" => {
                invocation.argv.push("echo".into());
                (invocation.argv.len() - 1, "echo".to_owned())
            }
            None => return Ok(at),
        };
        if words.get(inner_at).is_some_and(|w| w.from_glob) {
            return Err(format!(
                "the program `{inner_word}` that `{name}` runs comes from a glob"
            ));
        }
        if let Some(replace) = &wrapped.replace
            && inner_word.contains(replace.as_str())
        {
            return Err(format!(
                "`xargs -I` puts its input into the program's name `{inner_word}`"
            ));
        }
        // The inner program is looked up (execvp) in the PATH it gets.
        let inherited = if cleared || unset.iter().any(|n| n == "PATH") {
            None
        } else {
            Some(current_path.as_str())
        };
        let inner_path = lookup(&set, "PATH")
            .or(inherited)
            .unwrap_or(DEFAULT_PATH)
            .to_owned();
        let found = cx.find(&inner_word, &inner_path);
        if found.system && SHELLS.contains(&program_name(&inner_word)) {
            return Err(format!(
                "`{name}` runs a shell, which reads its script itself"
            ));
        }
        if let Some(path) = &found.path {
            let text = path
                .to_str()
                .ok_or_else(|| format!("the path of `{inner_word}` is not UTF-8"))?;
            invocation.argv[inner_at] = text.to_owned();
        }
        invocation.target = Target {
            written: inner_word,
            path: found.path,
            system: found.system,
            args: Vec::new(),
            open_args: invocation.target.open_args || wrapped.appends,
            env: set.clone(),
        };
        current_path = inner_path;
        at = inner_at;
    }
}

/// `sh -c 'script'`: the script planned as a group.
fn nested(
    words: &[Expanded],
    redirects: Vec<Redirect>,
    cx: &Cx<'_>,
    depth: usize,
    globs: bool,
) -> Result<Command, String> {
    let shell = &words[0].text;
    match words.get(1) {
        Some(flag) if flag.text == "-c" && !flag.from_glob => {}
        _ => {
            return Err(format!(
                "`{shell}` runs a script file, reads its input, or takes options besides `-c`"
            ));
        }
    }
    let Some(script) = words.get(2).filter(|s| !s.from_glob) else {
        return Err(format!("`{shell} -c` without a script"));
    };
    let plan = plan_at(&script.text, cx, depth + 1, globs)?;
    Ok(Command::Shell(Nested {
        shell: shell.clone(),
        plan,
        redirects,
    }))
}

/// An assignment's value: `~` first becomes `HOME`; a `~` after a `:`
/// (which both shells also expand) is refused.
fn assignment_value(name: &str, value: &Word, context: &Context) -> Result<String, String> {
    if value
        .chars
        .windows(2)
        .any(|w| !w[0].quoted && w[0].c == ':' && !w[1].quoted && w[1].c == '~')
    {
        return Err(format!("the value of `{name}` has a `~` after a `:`"));
    }
    Ok(tilde(&value.chars, context)?.iter().map(|c| c.c).collect())
}

/// `~` or `~/...` at the start replaced by `HOME` (quoted, so never a
/// pattern); `~user` refused.
fn tilde(chars: &[Char], context: &Context) -> Result<Vec<Char>, String> {
    if chars.first().is_none_or(|c| c.quoted || c.c != '~') {
        return Ok(chars.to_vec());
    }
    let end = chars.iter().position(|c| c.c == '/').unwrap_or(chars.len());
    if end != 1 {
        return Err("`~user` and `~+` forms are not expanded by kinet".into());
    }
    let home = context
        .var("HOME")
        .ok_or("`~` with no HOME in the command's environment")?;
    let mut out: Vec<Char> = home.chars().map(|c| Char { c, quoted: true }).collect();
    out.extend_from_slice(&chars[1..]);
    Ok(out)
}

/// Refuses what bash would brace-expand and dash would not, and a `~`
/// after `=` or `:` (bash expands some of those, dash none).
fn check_word(word: &Word) -> Result<(), String> {
    let chars = &word.chars;
    let active = |i: usize, c: char| chars[i].c == c && !chars[i].quoted;
    if let Some(open) = (0..chars.len()).find(|&i| active(i, '{')) {
        let close = (open..chars.len()).rev().find(|&i| active(i, '}'));
        if let Some(close) = close {
            let inner = &chars[open + 1..close];
            let comma = inner.iter().any(|c| c.c == ',' && !c.quoted);
            let range = inner
                .windows(2)
                .any(|w| w[0].c == '.' && w[1].c == '.' && !w[0].quoted && !w[1].quoted);
            if comma || range {
                return Err(format!(
                    "`{}` is brace-expanded by bash and not by dash",
                    word.text()
                ));
            }
        }
    }
    if (1..chars.len()).any(|i| active(i, '~') && (active(i - 1, '=') || active(i - 1, ':'))) {
        return Err(format!(
            "`{}` has a `~` that bash expands and dash does not",
            word.text()
        ));
    }
    Ok(())
}

fn expand_word(
    word: &Word,
    context: &Context,
    globs: bool,
    out: &mut Vec<Expanded>,
) -> Result<(), String> {
    check_word(word)?;
    let chars = tilde(&word.chars, context)?;
    if glob::is_pattern(&chars) {
        if !globs {
            return Err(format!(
                "the glob `{}` comes after other commands of the line, which could change what it matches",
                word.text()
            ));
        }
        if let Some(matches) = glob::expand(&chars, context)? {
            out.extend(matches.into_iter().map(|text| Expanded {
                text,
                from_glob: true,
            }));
            return Ok(());
        }
    }
    out.push(Expanded {
        text: chars.iter().map(|c| c.c).collect(),
        from_glob: false,
    });
    Ok(())
}

fn redirect(op: RedirectOp, word: &Word, context: &Context) -> Result<Redirect, String> {
    let text = word.text();
    if matches!(op.kind, OpKind::DupOut | OpKind::DupIn) {
        return match text.parse::<u8>() {
            Ok(n) if n <= 2 && word.unquoted() => Ok(Redirect {
                fd: op.fd.unwrap_or(u8::from(op.kind == OpKind::DupOut)),
                kind: RedirectKind::Dup(n),
            }),
            _ if text == "-" => Err("closing a descriptor is not wired by kinet".into()),
            _ => Err(format!(
                "`{}{text}`: bash sends both streams to that file, dash refuses it",
                grammar::op_text(op)
            )),
        };
    }
    check_word(word)?;
    let chars = tilde(&word.chars, context)?;
    if glob::is_pattern(&chars) {
        return Err(format!(
            "the redirection target `{text}` is a glob (bash expands it, dash does not)"
        ));
    }
    let path: String = chars.iter().map(|c| c.c).collect();
    if path.is_empty() {
        return Err("an empty redirection target".into());
    }
    if path.starts_with("/dev/tcp/") || path.starts_with("/dev/udp/") {
        return Err(format!("`{path}` is a network connection in bash"));
    }
    let file = RedirectFile {
        outside_roots: context.outside_roots(&path),
        path,
    };
    Ok(match op.kind {
        OpKind::Read => Redirect {
            fd: op.fd.unwrap_or(0),
            kind: RedirectKind::Read(file),
        },
        OpKind::Append => Redirect {
            fd: op.fd.unwrap_or(1),
            kind: RedirectKind::Append(file),
        },
        _ => Redirect {
            fd: op.fd.unwrap_or(1),
            kind: RedirectKind::Write(file),
        },
    })
}

#[cfg(test)]
mod tests;
