//! Splitting a shell command line into the simple commands it runs, or
//! saying that it cannot be proven simple.
//!
//! The parser understands what a POSIX shell does to words and lists:
//! blanks, single and double quotes, backslashes, comments, the list and
//! pipe operators (`;`, `&`, `&&`, `||`, `|`, `|&`, newlines), redirections
//! (`<`, `>`, `>>`, `2>`, `&>`, `2>&1`, ...), leading `NAME=value`
//! assignments, the wrappers that run their arguments as a command (`env`,
//! `command`, `exec`, `nohup`, `time`, `nice`, `builtin`) and `sh -c '...'`
//! (and `bash`, `dash`, `zsh`, `ksh`), whose script is parsed in turn.
//!
//! Anything whose words the shell would compute at run time is refused as
//! [`Parsed::Unsure`]: command substitution (`$(...)`, backquotes),
//! parameter expansion (`$X`, `${X}`), arithmetic, process substitution,
//! here-documents, subshells and groups, compound commands (`if`, `for`,
//! `while`, `case`, functions), and a program name with a glob or brace in
//! it. Globs in arguments are kept as written (they cannot change which
//! program runs).

/// A redirection of a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// The operator as written (`>`, `>>`, `2>`, `&>`, `<`, `2>&1`, ...).
    pub op: String,
    /// Its target word (empty for a descriptor duplication such as `2>&1`).
    pub target: String,
}

impl Redirect {
    /// Whether it writes a file (not `/dev/null`, not a duplication).
    pub fn writes_file(&self) -> bool {
        self.op.contains('>') && !self.target.is_empty() && self.target != "/dev/null"
    }
}

/// One program run with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The program and its arguments, quotes removed.
    pub argv: Vec<String>,
    /// Its redirections.
    pub redirects: Vec<Redirect>,
}

/// What a command line runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Parsed {
    /// Exactly these simple commands (in order; empty for a blank line).
    Simple(Vec<SimpleCommand>),
    /// The parser cannot prove what runs; the reason.
    Unsure(String),
}

/// Splits `line` into the simple commands it runs.
pub fn parse(line: &str) -> Parsed {
    match parse_depth(line, 0) {
        Ok(commands) => Parsed::Simple(commands),
        Err(why) => Parsed::Unsure(why),
    }
}

const MAX_DEPTH: usize = 4;

const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "ash"];
const WRAPPERS: &[&str] = &["command", "exec", "nohup", "time", "builtin"];
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
    "function", "select", "{", "}", "!", "[[", "]]", "coproc",
];

/// A token: a word (quotes removed) or an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    /// `;`, `&`, `&&`, `||`, `|`, `|&`, newline.
    Separator,
    Redirect(String),
}

fn parse_depth(line: &str, depth: usize) -> Result<Vec<SimpleCommand>, String> {
    if depth > MAX_DEPTH {
        return Err("shells nested too deep".into());
    }
    let tokens = tokenize(line)?;
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut redirects = Vec::new();
    let mut iter = tokens.into_iter().peekable();
    while let Some(token) = iter.next() {
        match token {
            Token::Word(word) => words.push(word),
            Token::Redirect(op) => {
                let target = if op.ends_with('&') || op.ends_with("&-") {
                    // `2>&1`, `>&2`: the descriptor is part of the word.
                    match iter.next() {
                        Some(Token::Word(fd))
                            if fd.chars().all(|c| c.is_ascii_digit() || c == '-') =>
                        {
                            String::new()
                        }
                        _ => return Err(format!("redirection `{op}` without a descriptor")),
                    }
                } else {
                    match iter.next() {
                        Some(Token::Word(target)) => target,
                        _ => return Err(format!("redirection `{op}` without a target")),
                    }
                };
                redirects.push(Redirect { op, target });
            }
            Token::Separator => {
                finish(&mut words, &mut redirects, &mut commands, depth)?;
            }
        }
    }
    finish(&mut words, &mut redirects, &mut commands, depth)?;
    Ok(commands)
}

/// Ends one simple command: strips assignments and wrappers, expands
/// `sh -c`, checks the program name.
fn finish(
    words: &mut Vec<String>,
    redirects: &mut Vec<Redirect>,
    commands: &mut Vec<SimpleCommand>,
    depth: usize,
) -> Result<(), String> {
    let mut argv = std::mem::take(words);
    let redirects = std::mem::take(redirects);
    if argv.is_empty() {
        if redirects.is_empty() {
            return Ok(());
        }
        return Err("a redirection without a command".into());
    }
    loop {
        // Leading assignments (`X=1 cmd`).
        while argv.first().is_some_and(|w| is_assignment(w)) {
            argv.remove(0);
        }
        let Some(program) = argv.first() else {
            // Only assignments: sets shell variables, runs nothing.
            return if redirects.is_empty() {
                Ok(())
            } else {
                Err("a redirection without a command".into())
            };
        };
        let name = program.rsplit('/').next().unwrap_or(program);
        if KEYWORDS.contains(&program.as_str()) {
            return Err(format!("`{program}` starts a compound command"));
        }
        if program.contains(['*', '?', '[', '{', '~']) {
            return Err(format!(
                "the program name `{program}` is expanded by the shell"
            ));
        }
        if name == "env" {
            argv.remove(0);
            // env's options: -i, -u NAME, --, and assignments.
            while let Some(first) = argv.first() {
                if first == "-u" || first == "--unset" {
                    argv.drain(..2.min(argv.len()));
                } else if first.starts_with('-') {
                    if first == "-S"
                        || first.starts_with("--split-string")
                        || first == "-C"
                        || first == "--chdir"
                    {
                        return Err(format!("`env {first}` changes what runs"));
                    }
                    argv.remove(0);
                } else if is_assignment(first) {
                    argv.remove(0);
                } else {
                    break;
                }
            }
            continue;
        }
        if WRAPPERS.contains(&name) {
            argv.remove(0);
            while argv.first().is_some_and(|w| w.starts_with('-')) {
                argv.remove(0);
            }
            continue;
        }
        if name == "nice" {
            argv.remove(0);
            while let Some(first) = argv.first() {
                if first == "-n" {
                    argv.drain(..2.min(argv.len()));
                } else if first.starts_with('-') {
                    argv.remove(0);
                } else {
                    break;
                }
            }
            continue;
        }
        if SHELLS.contains(&name) {
            return shell_c(&argv, redirects, commands, depth);
        }
        break;
    }
    commands.push(SimpleCommand { argv, redirects });
    Ok(())
}

/// `sh -c 'script' [name args...]`: the script's commands; any other use
/// of a shell (a script file, options) cannot be proven.
fn shell_c(
    argv: &[String],
    redirects: Vec<Redirect>,
    commands: &mut Vec<SimpleCommand>,
    depth: usize,
) -> Result<(), String> {
    let mut rest = argv.iter().skip(1);
    let mut script = None;
    for arg in rest.by_ref() {
        match arg.as_str() {
            // `-c`, also with harmless letters before it (`-ec`, `-xc`).
            flag if flag.len() >= 2
                && flag.starts_with('-')
                && flag.ends_with('c')
                && flag[1..flag.len() - 1].chars().all(|c| "eux".contains(c)) =>
            {
                script = rest.next();
                break;
            }
            // Harmless option letters before -c (`-e`, `-u`, `-x`, `-o pipefail` is not).
            flag if flag.starts_with('-') && flag[1..].chars().all(|c| "eux".contains(c)) => {}
            other => {
                return Err(format!(
                    "`{}` runs a script or takes options (`{other}`)",
                    argv[0]
                ));
            }
        }
    }
    let Some(script) = script else {
        return Err(format!(
            "`{}` without -c reads its commands from input",
            argv[0]
        ));
    };
    let inner = parse_depth(script, depth + 1)?;
    for mut command in inner {
        command.redirects.extend(redirects.iter().cloned());
        commands.push(command);
    }
    Ok(())
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Splits into tokens, refusing what the shell would compute.
fn tokenize(line: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = line.chars().collect();
    let mut tokens = Vec::new();
    let mut word = String::new();
    // Whether a word is being built (an empty quoted word counts).
    let mut in_word = false;
    let mut i = 0;
    let flush = |word: &mut String, in_word: &mut bool, tokens: &mut Vec<Token>| {
        if *in_word {
            tokens.push(Token::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => {
                flush(&mut word, &mut in_word, &mut tokens);
                i += 1;
            }
            '\n' | ';' => {
                if c == ';' && chars.get(i + 1) == Some(&';') {
                    return Err("`;;` belongs to a case statement".into());
                }
                flush(&mut word, &mut in_word, &mut tokens);
                tokens.push(Token::Separator);
                i += 1;
            }
            '#' if !in_word => {
                // A comment to the end of the line.
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '&' | '|' => {
                // `&>` and `&>>` redirect both streams.
                if c == '&' && chars.get(i + 1) == Some(&'>') {
                    flush(&mut word, &mut in_word, &mut tokens);
                    let op = if chars.get(i + 2) == Some(&'>') {
                        "&>>"
                    } else {
                        "&>"
                    };
                    i += op.len();
                    tokens.push(Token::Redirect(op.into()));
                    continue;
                }
                flush(&mut word, &mut in_word, &mut tokens);
                let next = chars.get(i + 1);
                i += if next == Some(&c) || (c == '|' && next == Some(&'&')) {
                    2
                } else {
                    1
                };
                tokens.push(Token::Separator);
            }
            '<' | '>' => {
                // A descriptor number right before it belongs to the operator.
                let mut op = String::new();
                if in_word && !word.is_empty() && word.chars().all(|d| d.is_ascii_digit()) {
                    op.push_str(&std::mem::take(&mut word));
                    in_word = false;
                } else {
                    flush(&mut word, &mut in_word, &mut tokens);
                }
                if c == '<' && chars.get(i + 1) == Some(&'<') {
                    return Err("here-documents are not parsed".into());
                }
                if chars.get(i + 1) == Some(&'(') {
                    return Err("process substitution computes a word at run time".into());
                }
                op.push(c);
                i += 1;
                match chars.get(i) {
                    Some('>') if c == '>' => {
                        op.push('>');
                        i += 1;
                    }
                    Some('|') if c == '>' => {
                        op.push('|');
                        i += 1;
                    }
                    Some('&') => {
                        op.push('&');
                        i += 1;
                    }
                    Some('>') if c == '<' => {
                        op.push('>');
                        i += 1;
                    }
                    _ => {}
                }
                tokens.push(Token::Redirect(op));
            }
            '(' | ')' => return Err("subshells and groups are not parsed".into()),
            '`' => {
                return Err("command substitution (backquotes) computes words at run time".into());
            }
            '$' => return Err(dollar(&chars, i)),
            '\\' => {
                in_word = true;
                match chars.get(i + 1) {
                    // A line continuation.
                    Some('\n') => {}
                    Some(&next) => word.push(next),
                    None => return Err("a trailing backslash".into()),
                }
                i += 2;
            }
            '\'' => {
                in_word = true;
                let end = chars[i + 1..]
                    .iter()
                    .position(|&q| q == '\'')
                    .ok_or("an unterminated single quote")?;
                word.extend(&chars[i + 1..i + 1 + end]);
                i += end + 2;
            }
            '"' => {
                in_word = true;
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err("an unterminated double quote".into()),
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('$') => return Err(dollar(&chars, i)),
                        Some('`') => {
                            return Err(
                                "command substitution (backquotes) computes words at run time"
                                    .into(),
                            );
                        }
                        Some('\\') => {
                            match chars.get(i + 1) {
                                Some(&next @ ('"' | '\\' | '$' | '`')) => word.push(next),
                                Some('\n') => {}
                                Some(&next) => {
                                    word.push('\\');
                                    word.push(next);
                                }
                                None => return Err("an unterminated double quote".into()),
                            }
                            i += 2;
                        }
                        Some(&other) => {
                            word.push(other);
                            i += 1;
                        }
                    }
                }
            }
            _ => {
                in_word = true;
                word.push(c);
                i += 1;
            }
        }
    }
    flush(&mut word, &mut in_word, &mut tokens);
    Ok(tokens)
}

fn dollar(chars: &[char], at: usize) -> String {
    match chars.get(at + 1) {
        Some('(') => "command substitution `$(...)` computes words at run time".into(),
        Some('{') => "parameter expansion `${...}` computes words at run time".into(),
        Some('\'') => "`$'...'` quoting is not parsed".into(),
        _ => "parameter expansion `$...` computes words at run time".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argvs(line: &str) -> Vec<Vec<String>> {
        match parse(line) {
            Parsed::Simple(commands) => commands.into_iter().map(|c| c.argv).collect(),
            Parsed::Unsure(why) => panic!("{line}: unsure: {why}"),
        }
    }

    fn unsure(line: &str) -> bool {
        matches!(parse(line), Parsed::Unsure(_))
    }

    #[test]
    fn lists_pipes_quotes_and_wrappers() {
        let v = |s: &[&str]| s.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        assert_eq!(argvs("ls -la"), [v(&["ls", "-la"])]);
        assert_eq!(
            argvs("git status && rm -rf x; echo 'a b' | grep \"a\" || true &"),
            [
                v(&["git", "status"]),
                v(&["rm", "-rf", "x"]),
                v(&["echo", "a b"]),
                v(&["grep", "a"]),
                v(&["true"])
            ]
        );
        assert_eq!(argvs("l's' \\-la \"\""), [v(&["ls", "-la", ""])]);
        assert_eq!(
            argvs("X=1 env -i Y=2 nice -n 5 command rm x"),
            [v(&["rm", "x"])]
        );
        assert_eq!(
            argvs("sh -c 'ls; rm -rf /' "),
            [v(&["ls"]), v(&["rm", "-rf", "/"])]
        );
        assert_eq!(
            argvs("bash -ec \"echo hi && sh -c 'rm y'\""),
            [v(&["echo", "hi"]), v(&["rm", "y"])]
        );
        assert_eq!(argvs("ls # rm -rf /"), [v(&["ls"])]);
        assert_eq!(argvs("   "), Vec::<Vec<String>>::new());
    }

    #[test]
    fn redirections_are_kept() {
        let Parsed::Simple(commands) = parse("echo hi > out.txt 2>&1 < in.txt") else {
            panic!()
        };
        let ops: Vec<_> = commands[0]
            .redirects
            .iter()
            .map(|r| (r.op.as_str(), r.target.as_str()))
            .collect();
        assert_eq!(ops, [(">", "out.txt"), ("2>&", ""), ("<", "in.txt")]);
        assert!(commands[0].redirects[0].writes_file());
        assert!(!commands[0].redirects[1].writes_file());
        let Parsed::Simple(commands) = parse("ls &>/dev/null") else {
            panic!()
        };
        assert!(!commands[0].redirects[0].writes_file());
    }

    #[test]
    fn what_the_shell_computes_is_unsure() {
        for line in [
            "echo $(rm -rf /)",
            "echo `rm x`",
            "echo \"$(rm x)\"",
            "$CMD x",
            "echo ${HOME}",
            "(rm x)",
            "{ rm x; }",
            "if true; then rm x; fi",
            "for f in a; do rm $f; done",
            "cat <<EOF",
            "diff <(ls) <(ls)",
            "r* x",
            "sh script.sh",
            "bash",
            "env -S 'rm x'",
            "echo 'unterminated",
            "echo \"unterminated",
            "echo $'\\x72m'",
            "case x in a) ;; esac",
        ] {
            assert!(unsure(line), "{line} should be unsure: {:?}", parse(line));
        }
    }
}
