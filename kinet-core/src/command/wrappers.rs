//! The programs that run their arguments as a command (`env`, `nice`,
//! `nohup`, `timeout`, `stdbuf`, `xargs`), read by their real grammar:
//! GNU `getopt_long` with parsing stopped at the first operand, short
//! options clustered with attached or separate values, long options
//! abbreviated to any unique prefix, `--`. An option kinet does not know,
//! or one that changes what runs (`env -S`, `env -C`, `xargs
//! --process-slot-var`), makes the line unsure.

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takes {
    Nothing,
    Value,
    /// Only attached (`-i{}`, `--replace={}`).
    Optional,
}

/// One option: its short letter (if any), long name (if any), what it
/// takes, and why it is refused (if it is).
struct Opt {
    short: Option<char>,
    long: Option<&'static str>,
    takes: Takes,
    refuse: Option<&'static str>,
}

const fn opt(short: char, long: &'static str, takes: Takes) -> Opt {
    Opt {
        short: if short == ' ' { None } else { Some(short) },
        long: if long.is_empty() { None } else { Some(long) },
        takes,
        refuse: None,
    }
}

const fn refused(short: char, long: &'static str, takes: Takes, why: &'static str) -> Opt {
    let mut o = opt(short, long, takes);
    o.refuse = Some(why);
    o
}

const HELP: Opt = refused(
    ' ',
    "help",
    Takes::Nothing,
    "prints help instead of running a command",
);
const VERSION: Opt = refused(
    ' ',
    "version",
    Takes::Nothing,
    "prints its version instead of running a command",
);

const ENV: &[Opt] = &[
    opt('i', "ignore-environment", Takes::Nothing),
    opt('u', "unset", Takes::Value),
    refused(
        'C',
        "chdir",
        Takes::Value,
        "changes the directory the command runs in",
    ),
    refused(
        'S',
        "split-string",
        Takes::Value,
        "splits a string into the command to run",
    ),
    opt('v', "debug", Takes::Nothing),
    opt('0', "null", Takes::Nothing),
    opt(' ', "block-signal", Takes::Optional),
    opt(' ', "default-signal", Takes::Optional),
    opt(' ', "ignore-signal", Takes::Optional),
    refused(
        ' ',
        "list-signal-handling",
        Takes::Nothing,
        "prints instead of running a command",
    ),
    HELP,
    VERSION,
];

const NICE: &[Opt] = &[opt('n', "adjustment", Takes::Value), HELP, VERSION];

const TIMEOUT: &[Opt] = &[
    opt('f', "foreground", Takes::Nothing),
    opt('k', "kill-after", Takes::Value),
    opt('p', "preserve-status", Takes::Nothing),
    opt('s', "signal", Takes::Value),
    opt('v', "verbose", Takes::Nothing),
    HELP,
    VERSION,
];

const STDBUF: &[Opt] = &[
    opt('i', "input", Takes::Value),
    opt('o', "output", Takes::Value),
    opt('e', "error", Takes::Value),
    HELP,
    VERSION,
];

const XARGS: &[Opt] = &[
    opt('0', "null", Takes::Nothing),
    opt('a', "arg-file", Takes::Value),
    opt('d', "delimiter", Takes::Value),
    opt('E', "", Takes::Value),
    opt('e', "eof", Takes::Optional),
    opt('I', "", Takes::Value),
    opt('i', "replace", Takes::Optional),
    opt('L', "", Takes::Value),
    opt('l', "max-lines", Takes::Optional),
    opt('n', "max-args", Takes::Value),
    opt('P', "max-procs", Takes::Value),
    opt('r', "no-run-if-empty", Takes::Nothing),
    opt('s', "max-chars", Takes::Value),
    opt('t', "verbose", Takes::Nothing),
    opt('x', "exit", Takes::Nothing),
    refused('o', "open-tty", Takes::Nothing, "reads the terminal"),
    refused('p', "interactive", Takes::Nothing, "asks on the terminal"),
    refused(
        ' ',
        "process-slot-var",
        Takes::Value,
        "sets a variable of the command's choosing",
    ),
    refused(' ', "show-limits", Takes::Nothing, "prints its limits"),
    HELP,
    VERSION,
];

/// The wrappers kinet reads, by program name.
pub(crate) fn is_wrapper(name: &str) -> bool {
    matches!(
        name,
        "env" | "nice" | "nohup" | "timeout" | "stdbuf" | "xargs"
    )
}

/// What a wrapper's arguments say.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Wrapped {
    /// Where the command it runs starts in the argv (`None`: it runs none).
    pub(crate) command: Option<usize>,
    /// `env`: variables set, removed, and whether the environment is
    /// cleared first.
    pub(crate) set: Vec<(String, String)>,
    pub(crate) unset: Vec<String>,
    pub(crate) clear: bool,
    /// `xargs`: the command gets arguments read from input; with `-I`,
    /// the string they replace.
    pub(crate) appends: bool,
    pub(crate) replace: Option<String>,
}

/// Reads the wrapper `name`'s arguments (`argv[0]` is the wrapper).
pub(crate) fn read(name: &str, argv: &[String]) -> Result<Wrapped, String> {
    let refuse = |why: String| Err(format!("`{name}` {why}"));
    let mut wrapped = Wrapped::default();
    let mut at = 1;
    if name == "nice" {
        // nice reads its old `-N` form (also `--N`, `-+N`) before getopt,
        // word by word.
        loop {
            match argv.get(at) {
                Some(word) if old_adjustment(word) => at += 1,
                Some(word) if word.starts_with('-') && word != "--" && word != "-" => {
                    let one =
                        getopt(NICE, &argv[..(at + 2).min(argv.len())], at).and_then(|found| {
                            match found.found.first() {
                                Some((option, _)) if option.refuse.is_some() => {
                                    Err(option.refuse.unwrap_or_default().to_owned())
                                }
                                _ => Ok(found.next),
                            }
                        });
                    match one {
                        // Only the word (and its value) just read.
                        Ok(next) if next > at => at = next,
                        Ok(_) => break,
                        Err(why) => return refuse(why),
                    }
                }
                _ => break,
            }
        }
    }
    let spec = match name {
        "env" => ENV,
        "nice" => NICE,
        "timeout" => TIMEOUT,
        "stdbuf" => STDBUF,
        "xargs" => XARGS,
        // nohup knows no options but --help and --version.
        _ => &[HELP, VERSION],
    };
    let options = match getopt(spec, argv, at) {
        Ok(options) => options,
        Err(why) => return refuse(why),
    };
    at = options.next;
    for (option, value) in &options.found {
        if let Some(why) = option.refuse {
            return refuse(why.to_owned());
        }
        match (name, option.short, option.long) {
            ("env", Some('i'), _) => wrapped.clear = true,
            ("env", Some('u'), _) => wrapped.unset.push(value.clone().unwrap_or_default()),
            ("xargs", Some('I'), _) => wrapped.replace = value.clone(),
            ("xargs", Some('i'), _) => {
                wrapped.replace = Some(value.clone().unwrap_or_else(|| "{}".into()))
            }
            _ => {}
        }
    }
    match name {
        "env" => {
            if argv.get(at).is_some_and(|a| a == "-") {
                wrapped.clear = true;
                at += 1;
            }
            while let Some(word) = argv.get(at)
                && let Some((variable, value)) = word.split_once('=')
            {
                if !valid_name(variable) {
                    return refuse(format!("sets a variable named `{variable}`"));
                }
                wrapped.set.push((variable.to_owned(), value.to_owned()));
                at += 1;
            }
        }
        "timeout" => {
            if argv.get(at).is_none() {
                return refuse("is given no duration".into());
            }
            at += 1;
            if argv.get(at).is_none() {
                return refuse("is given no command".into());
            }
        }
        "stdbuf" if argv.get(at).is_none() => return refuse("is given no command".into()),
        "xargs" => wrapped.appends = true,
        _ => {}
    }
    wrapped.command = (at < argv.len()).then_some(at);
    Ok(wrapped)
}

/// nice's old adjustment form: `-N`, `--N`, `-+N`.
fn old_adjustment(word: &str) -> bool {
    let rest = word
        .strip_prefix("--")
        .or_else(|| word.strip_prefix("-+"))
        .or_else(|| word.strip_prefix('-'));
    rest.is_some_and(|digits| !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()))
}

/// A valid variable name.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

struct Found<'a> {
    found: Vec<(&'a Opt, Option<String>)>,
    /// The first operand (or the end).
    next: usize,
}

/// GNU `getopt_long` with `+`: options up to the first operand or `--`.
fn getopt<'a>(spec: &'a [Opt], argv: &[String], mut at: usize) -> Result<Found<'a>, String> {
    let mut found = Vec::new();
    while let Some(arg) = argv.get(at) {
        if arg == "--" {
            at += 1;
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value.to_owned())),
                None => (long, None),
            };
            let option = long_option(spec, name)?;
            at += 1;
            let value = match (option.takes, attached) {
                (Takes::Nothing, Some(_)) => {
                    return Err(format!(
                        "has an option that takes no value given one (`{arg}`)"
                    ));
                }
                (Takes::Nothing, None) | (Takes::Optional, None) => None,
                (_, Some(value)) => Some(value),
                (Takes::Value, None) => {
                    let value = argv
                        .get(at)
                        .ok_or_else(|| format!("has an option without its value (`{arg}`)"))?;
                    at += 1;
                    Some(value.clone())
                }
            };
            found.push((option, value));
            continue;
        }
        let Some(cluster) = arg.strip_prefix('-').filter(|c| !c.is_empty()) else {
            break;
        };
        at += 1;
        let letters: Vec<char> = cluster.chars().collect();
        let mut i = 0;
        while i < letters.len() {
            let letter = letters[i];
            let option = spec
                .iter()
                .find(|o| o.short == Some(letter))
                .ok_or_else(|| format!("has an option kinet does not know (`-{letter}`)"))?;
            i += 1;
            let rest: String = letters[i..].iter().collect();
            let value = match option.takes {
                Takes::Nothing => None,
                Takes::Optional => {
                    i = letters.len();
                    (!rest.is_empty()).then_some(rest)
                }
                Takes::Value => {
                    i = letters.len();
                    if rest.is_empty() {
                        let value = argv.get(at).ok_or_else(|| {
                            format!("has an option without its value (`-{letter}`)")
                        })?;
                        at += 1;
                        Some(value.clone())
                    } else {
                        Some(rest)
                    }
                }
            };
            found.push((option, value));
        }
    }
    Ok(Found { found, next: at })
}

/// The long option `name` names: exactly, or as the unique option it is a
/// prefix of.
fn long_option<'a>(spec: &'a [Opt], name: &str) -> Result<&'a Opt, String> {
    if let Some(exact) = spec.iter().find(|o| o.long == Some(name)) {
        return Ok(exact);
    }
    let mut matches = spec
        .iter()
        .filter(|o| !name.is_empty() && o.long.is_some_and(|l| l.starts_with(name)));
    match (matches.next(), matches.next()) {
        (Some(one), None) => Ok(one),
        (Some(_), Some(_)) => Err(format!("has an ambiguous option (`--{name}`)")),
        (None, _) => Err(format!("has an option kinet does not know (`--{name}`)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_owned).collect()
    }

    fn command(line: &str) -> Result<Option<usize>, String> {
        let argv = argv(line);
        read(&argv[0], &argv).map(|w| w.command)
    }

    #[test]
    fn options_with_values_in_every_spelling() {
        assert_eq!(command("env -u X ls"), Ok(Some(3)));
        assert_eq!(command("env -uX ls"), Ok(Some(2)));
        assert_eq!(command("env --unset=X ls"), Ok(Some(2)));
        assert_eq!(command("env --un X ls"), Ok(Some(3)));
        assert_eq!(command("env -iu X A=1 ls"), Ok(Some(4)));
        assert_eq!(command("env - ls"), Ok(Some(2)));
        assert_eq!(command("env -- A=1 ls"), Ok(Some(3)));
        assert_eq!(command("nice -n 5 ls"), Ok(Some(3)));
        assert_eq!(command("nice -5 ls"), Ok(Some(2)));
        assert_eq!(command("nice --adj=5 ls"), Ok(Some(2)));
        assert_eq!(command("nice -5 -n 3 ls"), Ok(Some(4)));
        assert_eq!(command("nice --5 ls"), Ok(Some(2)));
        assert_eq!(command("nice -+5 -n3 ls"), Ok(Some(3)));
        assert_eq!(command("timeout -k 1 -s KILL 5 ls"), Ok(Some(6)));
        assert_eq!(command("timeout --sig=KILL 5 ls"), Ok(Some(3)));
        assert_eq!(command("stdbuf -oL ls"), Ok(Some(2)));
        assert_eq!(command("xargs -I {} -n1 ls {}"), Ok(Some(4)));
        assert_eq!(command("xargs -i ls"), Ok(Some(2)));
        assert_eq!(command("nohup -- ls"), Ok(Some(2)));
        assert_eq!(command("env"), Ok(None));
    }

    #[test]
    fn options_that_change_what_runs_are_refused() {
        for line in [
            "env -S ls",
            "env -Sls",
            "env --sp=ls",
            "env --split-string ls",
            "env -iS ls",
            "env -C /tmp ls",
            "env --ch=/tmp ls",
            "env -x ls",
            "env --help",
            "env --v ls",
            "xargs --process-slot-var=GIT_DIR git status",
            "xargs --proc=GIT_DIR git status",
            "nohup -p ls",
            "timeout 5",
            "timeout -k",
            "stdbuf",
            "env 1X=2 ls",
        ] {
            assert!(command(line).is_err(), "{line}: {:?}", command(line));
        }
    }
}
