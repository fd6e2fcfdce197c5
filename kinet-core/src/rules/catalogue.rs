//! Dangerous arguments of programs a rule may allow: the built-in
//! catalogue (`dangerous.toml`) and a rules file's `[[dangerous]]`
//! entries, consulted after the rules (an allowed program with one asks).

use serde::Deserialize;

use crate::command::Target;

/// One catalogue entry: arguments that make `programs` write, run or
/// connect (see `dangerous.toml` for the fields' meaning).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DangerousRule {
    /// The programs, by name.
    pub programs: Vec<String>,
    /// Applies only when the first operand is this (`git grep`).
    #[serde(default)]
    pub subcommand: Option<String>,
    /// Options that count before the first operand only (git's own).
    #[serde(default)]
    pub before_subcommand: Vec<String>,
    /// Options that count anywhere (after the subcommand, if named).
    #[serde(default)]
    pub options: Vec<String>,
    /// Arguments starting with one of these.
    #[serde(default)]
    pub prefixes: Vec<String>,
    /// More operands than this.
    #[serde(default)]
    pub operands: Option<usize>,
    /// Short options whose value is the next argument (not an operand,
    /// and not scanned as options).
    #[serde(default)]
    pub short_values: Vec<String>,
    /// The program text kinet checks: `sed` or `awk`.
    #[serde(default)]
    pub script: Option<String>,
    /// The first argument, without a dash, is a cluster of options.
    #[serde(default)]
    pub first_cluster: bool,
    /// Why, for messages.
    pub why: String,
}

#[derive(Deserialize)]
struct File {
    dangerous: Vec<DangerousRule>,
}

/// The built-in catalogue.
pub(crate) fn builtin() -> &'static [DangerousRule] {
    static BUILTIN: std::sync::OnceLock<Vec<DangerousRule>> = std::sync::OnceLock::new();
    BUILTIN.get_or_init(|| {
        toml::from_str::<File>(include_str!("dangerous.toml"))
            .map(|file| file.dangerous)
            .unwrap_or_default()
    })
}

impl DangerousRule {
    /// Checks the entry's own shape (a script kind kinet knows).
    pub(crate) fn check(&self) -> Result<(), String> {
        match self.script.as_deref() {
            None | Some("sed" | "awk") => Ok(()),
            Some(other) => Err(format!("unknown script kind `{other}` (sed or awk)")),
        }
    }

    /// Why `target`'s arguments are dangerous, if they are.
    pub(crate) fn flags(&self, target: &Target) -> Option<String> {
        if !self.programs.iter().any(|p| p == target.name()) {
            return None;
        }
        let args = self.arguments(&target.args);
        let (before, operands, after) = split(&args, &self.short_values);
        if let Some(subcommand) = &self.subcommand
            && operands.first().map(String::as_str) != Some(subcommand.as_str())
        {
            return None;
        }
        let short_values = &self.short_values;
        let hit = |arg: &str, list: &'_ [String]| -> Option<String> {
            list.iter()
                .find(|o| option_matches(o, arg, short_values))
                .cloned()
        };
        let scanned = if self.subcommand.is_some() {
            after.as_slice()
        } else {
            args.as_slice()
        };
        let mut found = None;
        for arg in options_of(scanned) {
            if let Some(option) = hit(arg, &self.options) {
                found = Some(format!("`{arg}` ({option})"));
                break;
            }
            if let Some(prefix) = self.prefixes.iter().find(|p| arg.starts_with(p.as_str())) {
                found = Some(format!("`{arg}` (starts with `{prefix}`)"));
                break;
            }
        }
        if found.is_none() {
            for arg in options_of(&before) {
                if let Some(option) = hit(arg, &self.before_subcommand) {
                    found = Some(format!("`{arg}` ({option})"));
                    break;
                }
            }
        }
        if found.is_none()
            && let Some(max) = self.operands
            && operands.len() > max
        {
            found = Some(format!("{} operands", operands.len()));
        }
        if found.is_none() {
            found = match self.script.as_deref() {
                Some("sed") => sed(&target.args),
                Some("awk") => awk(&target.args),
                _ => None,
            };
        }
        found.map(|what| format!("{what}: {}", self.why))
    }

    /// The arguments, tar's old-style first cluster given its dash.
    fn arguments(&self, args: &[String]) -> Vec<String> {
        let mut args = args.to_vec();
        if self.first_cluster
            && let Some(first) = args.first_mut()
            && !first.starts_with('-')
        {
            first.insert(0, '-');
        }
        args
    }
}

/// The arguments before the first operand, the operands, and the
/// arguments after the first operand. `--` ends the options; a short
/// option's separate value (`short_values`) is not an operand.
fn split(args: &[String], short_values: &[String]) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut operands = Vec::new();
    let mut first = None;
    let mut ended = false;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if !ended && arg == "--" {
            ended = true;
        } else if ended || arg == "-" || !arg.starts_with('-') {
            operands.push(arg.clone());
            first.get_or_insert(i);
        } else if short_values.iter().any(|s| s == arg) {
            i += 1;
        }
        i += 1;
    }
    let at = first.unwrap_or(args.len());
    let after = args
        .get(at + 1..)
        .map(<[String]>::to_vec)
        .unwrap_or_default();
    (args[..at].to_vec(), operands, after)
}

/// The arguments that may be options: up to `--`.
fn options_of(args: &[String]) -> impl Iterator<Item = &str> {
    args.iter().map(String::as_str).take_while(|a| *a != "--")
}

/// Whether `arg` is (or contains, in a cluster) the option `option`.
fn option_matches(option: &str, arg: &str, short_values: &[String]) -> bool {
    if let Some(long) = option.strip_prefix("--") {
        let Some(given) = arg.strip_prefix("--") else {
            return false;
        };
        let name = given.split_once('=').map_or(given, |(name, _)| name);
        return !name.is_empty() && long.starts_with(name);
    }
    let Some(short) = option.strip_prefix('-') else {
        return arg == option;
    };
    if short.chars().count() != 1 {
        // A word option (`-exec`): exactly.
        return arg == option;
    }
    let Some(cluster) = arg.strip_prefix('-').filter(|c| !c.starts_with('-')) else {
        return false;
    };
    for letter in cluster.chars() {
        if short.starts_with(letter) {
            return true;
        }
        // The rest of the cluster is this option's value.
        if short_values
            .iter()
            .any(|v| v.strip_prefix('-').is_some_and(|v| v.starts_with(letter)))
        {
            return false;
        }
    }
    false
}

/// Why a sed invocation's scripts are dangerous: a script from a file, or
/// a command that writes (`w`, `W`, `s///w`) or runs (`e`, `s///e`), or
/// anything kinet cannot read.
fn sed(args: &[String]) -> Option<String> {
    let mut scripts = Vec::new();
    let mut explicit = false;
    let mut i = 0;
    let mut first_operand = None;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            if !explicit {
                first_operand = first_operand.or(args.get(i).cloned());
            }
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, value) = long
                .split_once('=')
                .map_or((long, None), |(n, v)| (n, Some(v.to_owned())));
            if !name.is_empty() && "expression".starts_with(name) && name.len() >= 2 {
                explicit = true;
                scripts.extend(value.or_else(|| {
                    i += 1;
                    args.get(i - 1).cloned()
                }));
            }
            continue;
        }
        if let Some(cluster) = arg.strip_prefix('-').filter(|c| !c.is_empty()) {
            for (at, letter) in cluster.char_indices() {
                if letter == 'e' {
                    explicit = true;
                    let rest = &cluster[at + 1..];
                    scripts.extend(if rest.is_empty() {
                        i += 1;
                        args.get(i - 1).cloned()
                    } else {
                        Some(rest.to_owned())
                    });
                    break;
                }
                if letter == 'l' {
                    if cluster[at + 1..].is_empty() {
                        i += 1;
                    }
                    break;
                }
            }
            continue;
        }
        if first_operand.is_none() {
            first_operand = Some(arg.clone());
        }
    }
    if !explicit {
        scripts.extend(first_operand);
    }
    scripts.iter().find_map(|script| sed_script(script).err())
}

/// Reads one sed script; `Err` names what writes, runs, or is not read.
fn sed_script(script: &str) -> Result<(), String> {
    let chars: Vec<char> = script.chars().collect();
    let mut i = 0;
    let unreadable = || {
        Err(format!(
            "the sed script `{script}` is not one kinet can read"
        ))
    };
    loop {
        while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ';') {
            i += 1;
        }
        if i >= chars.len() {
            return Ok(());
        }
        // Addresses.
        for _ in 0..2 {
            i = match sed_address(&chars, i) {
                Some(next) => next,
                None => return unreadable(),
            };
            if chars.get(i) == Some(&',') {
                i += 1;
                if matches!(chars.get(i), Some('+' | '~')) {
                    i += 1;
                }
            } else {
                break;
            }
        }
        while chars.get(i).is_some_and(|c| *c == ' ' || *c == '!') {
            i += 1;
        }
        let Some(&command) = chars.get(i) else {
            return unreadable();
        };
        i += 1;
        match command {
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x'
            | 'z' | 'F' => {}
            'q' | 'Q' | 'l' | 'L' => {
                while chars
                    .get(i)
                    .is_some_and(|c| c.is_ascii_digit() || *c == ' ')
                {
                    i += 1;
                }
            }
            '#' | ':' | 'b' | 't' | 'T' | 'v' | 'a' | 'i' | 'c' | 'r' | 'R' => {
                // A label, comment, text or file name: to the end of the
                // line (labels and names also end at `;` for b/t/T).
                let stops_at_semicolon = matches!(command, 'b' | 't' | 'T' | 'v');
                while let Some(&c) = chars.get(i) {
                    if c == '\n' || (stops_at_semicolon && c == ';') {
                        break;
                    }
                    i += 1;
                }
            }
            'w' | 'W' => return Err(format!("the sed command `{command}` writes a file")),
            'e' => return Err("the sed command `e` runs a program".into()),
            's' | 'y' => {
                let Some(&delim) = chars.get(i) else {
                    return unreadable();
                };
                if delim == '\n' || delim == '\\' {
                    return unreadable();
                }
                i += 1;
                let Some(next) = sed_part(&chars, i, delim, command == 's') else {
                    return unreadable();
                };
                let Some(next) = sed_part(&chars, next, delim, false) else {
                    return unreadable();
                };
                i = next;
                if command == 's' {
                    while let Some(&flag) = chars.get(i) {
                        match flag {
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' | '0'..='9' => i += 1,
                            'w' => return Err("the sed flag `s///w` writes a file".into()),
                            'e' => return Err("the sed flag `s///e` runs a program".into()),
                            c if c.is_whitespace() || c == ';' || c == '}' => break,
                            _ => return unreadable(),
                        }
                    }
                }
            }
            _ => return unreadable(),
        }
    }
}

/// Skips one address at `i` (none is fine); `None` when malformed.
fn sed_address(chars: &[char], mut i: usize) -> Option<usize> {
    match chars.get(i) {
        Some(c) if c.is_ascii_digit() => {
            while chars
                .get(i)
                .is_some_and(|c| c.is_ascii_digit() || *c == '~')
            {
                i += 1;
            }
            Some(i)
        }
        Some('$') => Some(i + 1),
        Some('/') => {
            let next = sed_part(chars, i + 1, '/', true)?;
            Some(skip_address_flags(chars, next))
        }
        Some('\\') => {
            let delim = *chars.get(i + 1)?;
            let next = sed_part(chars, i + 2, delim, true)?;
            Some(skip_address_flags(chars, next))
        }
        _ => Some(i),
    }
}

fn skip_address_flags(chars: &[char], mut i: usize) -> usize {
    while matches!(chars.get(i), Some('I' | 'M')) {
        i += 1;
    }
    i
}

/// Skips a regex or replacement up to its unescaped delimiter (a regex's
/// bracket expressions may hold it); the index after it.
fn sed_part(chars: &[char], mut i: usize, delim: char, regex: bool) -> Option<usize> {
    while let Some(&c) = chars.get(i) {
        if c == '\\' {
            i += 2;
            continue;
        }
        if regex && c == '[' {
            i += 1;
            if chars.get(i) == Some(&'^') {
                i += 1;
            }
            if chars.get(i) == Some(&']') {
                i += 1;
            }
            loop {
                match chars.get(i)? {
                    '[' if matches!(chars.get(i + 1), Some(':' | '.' | '=')) => {
                        let close = *chars.get(i + 1)?;
                        i += 2;
                        while !(chars.get(i)? == &close && chars.get(i + 1) == Some(&']')) {
                            i += 1;
                        }
                        i += 2;
                    }
                    ']' => {
                        i += 1;
                        break;
                    }
                    _ => i += 1,
                }
            }
            continue;
        }
        if c == delim {
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

/// Why an awk invocation is dangerous: its program (any argument) runs a
/// program, writes or reads through a pipe or a redirection, or opens a
/// network connection.
fn awk(args: &[String]) -> Option<String> {
    const WORDS: &[&str] = &["system", "|", ">", "getline", "/inet", "@load", "@include"];
    args.iter().find_map(|arg| {
        WORDS
            .iter()
            .find(|w| arg.contains(**w))
            .map(|w| format!("the awk program uses `{w}`"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Context, Planned, plan};

    fn flagged(line: &str) -> Option<String> {
        let Planned::Plan(plan) = plan(line, &Context::examples()) else {
            panic!("{line} is unsure")
        };
        let target = &plan.invocations().next().unwrap().target;
        builtin().iter().find_map(|rule| rule.flags(target))
    }

    #[test]
    fn the_builtin_catalogue_loads() {
        assert!(builtin().len() > 20);
        assert!(builtin().iter().all(|rule| rule.check().is_ok()));
    }

    #[test]
    fn dangerous_arguments_in_every_spelling() {
        for line in [
            "git -c core.pager=sh log",
            "git -C /tmp status",
            "git --git-dir=/tmp/x status",
            "git diff --output=x",
            "git diff --output x",
            "git diff --out=x",
            "git log --ext-diff",
            "git -p status",
            "git grep -Ocat x",
            "git grep --open-files-in-pager=cat x",
            "git archive -o x.tar HEAD",
            "find . -name x -exec rm {} ;",
            "find . -delete",
            "find . -fprint out",
            "sed -i s/a/b/ f",
            "sed -ni p f",
            "sed --in-place s/a/b/ f",
            "sed 's/a/b/w out' f",
            "sed -n 'w out' f",
            "sed '1e id' f",
            "sed -e p -e 's/x/y/e' f",
            "sed --expression='w x' f",
            "sed -f script f",
            "sed 'x;w y' f",
            "sed '/a/,/b/!W out' f",
            "awk '{system(\"id\")}' f",
            "awk '{print > \"out\"}' f",
            "awk -f prog f",
            "gawk -l ext f",
            "sort -o out f",
            "sort -ro out f",
            "sort --out=x f",
            "sort --compress-program=sh f",
            "uniq in out",
            "uniq -c in out",
            "tee f",
            "tar xf a.tar",
            "tar -czf a.tgz .",
            "tar --to-command=sh -tf a.tar",
            "rg --pre=sh x",
            "rg -iz x",
            "fd -x rm",
            "less +!id f",
            "less -o log f",
            "date -s now",
        ] {
            assert!(flagged(line).is_some(), "{line} should be flagged");
        }
    }

    #[test]
    fn harmless_arguments_pass() {
        for line in [
            "git status",
            "git log -c",
            "git log -p --stat",
            "git diff --stat",
            "git diff -- --output=x",
            "git grep -n x",
            "git archive --list",
            "find . -name '*.rs' -print",
            "sed -n 's/a/b/p' f",
            "sed 's/[/]/x/g' f",
            "sed -e 's/hello/world/' f",
            "sed '$!N;P;D' f",
            "sed ':a;s/x/y/;ta' f",
            "sed 's/a/b/;#w x' f",
            "awk -F: '{print $1}' f",
            "awk -vfoo=1 '{print foo}' f",
            "sort -k2 -t, f",
            "sort -u f",
            "uniq -c f",
            "uniq -f 1 f",
            "tar -tvf a.tar",
            "tar tf a.tar",
            "rg --pre-glob '*.x' x",
            "rg -i x",
            "less f",
            "date +%s",
            "ls -la",
        ] {
            assert_eq!(flagged(line), None, "{line}");
        }
    }
}
