//! The planner against the shells that would run the line: 10,000
//! generated lines (quotes, escapes, globs over hostile file names, `~`,
//! assignments, wrappers with their options in every spelling, `exec`,
//! `command`, nested `sh -c` / `bash -c`, pipes, lists, redirections,
//! comments, and the constructs the two shells read differently), each
//! run under dash, under bash, and by kinet's own
//! executor, with a `PATH` whose programs are recorders that log their
//! name, arguments and `K_*` variables.
//!
//! For every line the planner calls plannable:
//! - every program that ran in either shell is one the plan lists, with
//!   the same arguments and variables (nothing runs that was not checked);
//! - dash, bash and kinet ran the same programs with the same arguments,
//!   printed the same output and left the same files;
//! - kinet's exit status is the shells' (where the two agree).
//!
//! `KINET_DIFF_LINES` and `KINET_DIFF_SEED` change the count and the seed.
#![cfg(target_os = "linux")]
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::panic
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kinet_core::command::{Context, Plan, Planned, plan};
use kinet_core::sandbox::Launch;

const RECORDER: &str = r#"
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
extern char **environ;
static char buf[1 << 16];
static size_t n;
static void put(const char *s) {
    size_t len = strlen(s);
    if (n + len < sizeof buf) { memcpy(buf + n, s, len); n += len; }
}
int main(int argc, char **argv) {
    /* A reader that left early must not change what runs next (xargs
       stops at a child killed by SIGPIPE): no timing in the outcome. */
    signal(SIGPIPE, SIG_IGN);
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    put(base);
    for (int i = 1; i < argc; i++) { put("\x1f"); put(argv[i]); }
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "K_", 2) == 0) { put("\x1d"); put(*e); }
    }
    put("\x1e");
    const char *log = getenv("REC_LOG");
    if (log) {
        int fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
        if (fd >= 0) { write(fd, buf, n); close(fd); }
    }
    printf("%s", base);
    for (int i = 1; i < argc; i++) printf(" [%s]", argv[i]);
    printf("\n");
    fflush(stdout);
    /* Read the input to its end, as a filter would: a writer before it
       in a pipeline never meets a reader that has gone. */
    char sink[4096];
    while (read(0, sink, sizeof sink) > 0) {}
    return strncmp(base, "fail", 4) == 0 ? 1 : 0;
}
"#;

/// Programs in the recorders' directory: names no system directory has,
/// so a line whose `PATH` is gone (`env -i`) runs nothing of the system's.
const PROGRAMS: &[&str] = &[
    "kls", "kcat", "kgit", "kgrep", "krg", "kfind", "ksort", "fail", "failtoo",
];

/// A small random generator (xorshift), seeded for repeatable lines.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const ARGS: &[&str] = &[
    "-l",
    "x",
    "--output=y",
    "'a b'",
    "\"c d\"",
    "e\\ f",
    "'*'.txt",
    "\\*",
    "~/q",
    "a=b",
    "{}",
    "{a}",
    "x#y",
    "--",
    "-n",
    "'\\'",
    "-",
    "\"\"",
    "'$x'",
    "\"a'b\"",
];

/// Glob words, in the line's first item only (a glob after a command
/// that could change what it matches is unsure).
const GLOBS: &[&str] = &[
    "*.txt", "*", "s*/*.txt", "[ab].txt", "[!a].txt", "?.txt", "nomatch*", "*/",
];

const ASSIGNMENTS: &[&str] = &["K_A=1", "K_B='x y'", "K_C=", "K_D=~/h", "K_E=a=b"];

const WRAPPERS: &[&str] = &[
    "env",
    "env -i",
    "env -u K_A",
    "env -uK_A",
    "env --unset=K_B",
    "env K_E=2",
    "env -- K_F=3",
    "env -iu K_A K_G=1",
    "env -",
    "nice",
    "nice -n 3",
    "nice -n3",
    "nice -5",
    "nice --adjustment=2",
    "nice --adj 2",
    "timeout 5",
    "timeout -k 1 5",
    "timeout -k1 5",
    "timeout --signal=TERM 5",
    "timeout --sig TERM 5",
    "timeout -v 5",
    "stdbuf -oL",
    "stdbuf --output=L",
    "stdbuf -i0 -e0",
    "nohup",
    "nohup --",
    "xargs",
    "xargs -r",
    "xargs -n1",
    "xargs -0",
    "xargs -I{}",
    "xargs -i",
    "xargs --max-args=2",
    "command",
    "command --",
];

const REDIRECTS: &[&str] = &[
    "> out1",
    ">> out2",
    "2>&1",
    "2>/dev/null",
    "< in.txt",
    ">/dev/null",
    "0<in.txt",
    "2> err",
    ">| out3",
    "< missing.txt",
    "1>&2",
    ">'o u t'",
];

/// Lines the two shells read differently or that need a shell: never
/// plannable.
const UNSURE: &[&str] = &[
    "kls &> out",
    "kls |& kcat",
    "kcat {a,b}",
    "kcat {1..3}",
    "kcat $HOME",
    "kcat $(kls)",
    "kcat `kls`",
    "time kls",
    "cd / && kls",
    "export K_A=1; kls",
    "kls > *.txt",
    "kcat < /dev/tcp/127.0.0.1/9",
    "exec -a x kls",
    "kls 3>x",
    "kcat a=~/x",
    "(kls)",
    "{ kls; }",
    "if kls; then kcat; fi",
    "env -S kls",
    "env --sp=kls",
    "kls >&out",
    "kls; kcat *",
    "kcat <<EOF",
    "kls 2>&-",
    "xargs --process-slot-var=K kls",
    "kls & kcat",
    "exec kls < in.txt",
];

fn command(rng: &mut Rng, depth: usize, first: bool) -> String {
    let mut parts: Vec<String> = Vec::new();
    if rng.chance(25) {
        for _ in 0..=rng.below(2) {
            parts.push(rng.pick(ASSIGNMENTS).into());
        }
    }
    if depth < 2 && rng.chance(6) {
        let inner = line(rng, depth + 1, 2, first);
        let shell = rng.pick(&["sh", "bash", "dash"]);
        parts.push(format!("{shell} -c '{}'", inner.replace('\'', "'\\''")));
    } else {
        if rng.chance(4) && parts.is_empty() {
            parts.push("exec".into());
        }
        for _ in 0..rng.below(3) {
            if rng.chance(40) {
                parts.push(rng.pick(WRAPPERS).into());
            }
        }
        let program = rng.pick(PROGRAMS);
        parts.push(match rng.below(10) {
            0 => format!("'{program}'"),
            1 => format!("\\{program}"),
            _ => program.into(),
        });
        for _ in 0..rng.below(5) {
            if first && rng.chance(30) {
                parts.push(rng.pick(GLOBS).into());
            } else {
                parts.push(rng.pick(ARGS).into());
            }
        }
    }
    if rng.chance(30) {
        for _ in 0..=rng.below(2) {
            parts.push(rng.pick(REDIRECTS).into());
        }
    }
    parts.join(" ")
}

fn line(rng: &mut Rng, depth: usize, max_items: usize, first: bool) -> String {
    let mut text = String::new();
    for n in 0..=rng.below(max_items) {
        if n > 0 {
            text.push_str(rng.pick(&["; ", " && ", " || ", "\n"]));
        }
        for m in 0..=rng.below(3) {
            if m > 0 {
                text.push_str(" | ");
            }
            text.push_str(&command(rng, depth, first && n == 0));
        }
    }
    if rng.chance(3) {
        text.push_str(" # a comment; rm -rf /");
    }
    text
}

/// What a run did: the programs' records (sorted), output lines (sorted),
/// the files it left, its status.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    records: Vec<Record>,
    output: Vec<String>,
    files: BTreeMap<String, String>,
    status: Option<i32>,
}

/// One program run: name, arguments, `K_*` variables (sorted).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Record {
    name: String,
    args: Vec<String>,
    env: Vec<String>,
}

fn records(log: &Path) -> Vec<Record> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut all: Vec<Record> = text
        .split('\x1e')
        .filter(|r| !r.is_empty())
        .map(|r| {
            let mut env: Vec<String> = r.split('\x1d').skip(1).map(str::to_owned).collect();
            env.sort();
            let argv: Vec<String> = r
                .split('\x1d')
                .next()
                .unwrap()
                .split('\x1f')
                .map(str::to_owned)
                .collect();
            Record {
                name: argv[0].clone(),
                args: argv[1..].to_vec(),
                env,
            }
        })
        .collect();
    all.sort();
    all
}

/// A fresh working directory with the fixture's files.
fn fixture(dir: &Path) {
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for name in [
        "a.txt",
        "b.txt",
        "--output=x",
        "-n",
        "sp ace.txt",
        "sub/c.txt",
    ] {
        std::fs::write(dir.join(name), "").unwrap();
    }
    std::fs::write(dir.join("in.txt"), "input words\n").unwrap();
}

fn files(dir: &Path) -> BTreeMap<String, String> {
    let mut all = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(dir.join(&rel)).unwrap().flatten() {
            let name = rel.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                stack.push(name);
            } else {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                all.insert(name.display().to_string(), text);
            }
        }
    }
    all
}

struct Setup {
    recorders: PathBuf,
    scratch: PathBuf,
}

impl Setup {
    fn env(&self, dir: &Path, log: &Path) -> Vec<(String, String)> {
        vec![
            (
                "PATH".into(),
                format!("{}:/usr/bin:/bin", self.recorders.display()),
            ),
            ("HOME".into(), dir.display().to_string()),
            ("LC_ALL".into(), "C".into()),
            ("REC_LOG".into(), log.display().to_string()),
        ]
    }

    /// A fresh directory with the fixture, for one run of one line (a
    /// background job of an earlier run cannot write into it).
    fn fresh(&self, index: usize, tag: &str) -> PathBuf {
        let dir = self.scratch.join(format!("{index}-{tag}"));
        fixture(&dir.join("w"));
        dir
    }

    /// Runs `line` one way in `dir` (from [`fresh`](Self::fresh)); the
    /// directory's path is written `<W>` in what it did.
    fn run(&self, dir: &Path, line: &str, how: How<'_>) -> Outcome {
        let work = dir.join("w");
        let log = dir.join("log");
        let env = self.env(&work, &log);
        let mut command = match how {
            How::Shell(shell) => {
                let mut command = Command::new(shell);
                command.arg("-c").arg(line);
                command
            }
            How::Kinet(..) => Command::new("/bin/true"),
        };
        command
            .env_clear()
            .envs(env.iter().cloned())
            .current_dir(&work)
            .stdin(Stdio::null());
        if let How::Kinet(plan, contain) = how {
            Launch::new()
                .contain(contain)
                .plan(plan.clone())
                .prepare(&mut command)
                .unwrap();
        }
        let output = command.output().unwrap();
        reap_all();
        let place = work.display().to_string();
        let neutral = |text: &str| unpathed(&text.replace(&place, "<W>"));
        let mut lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(neutral)
            .collect();
        lines.sort();
        let mut records = records(&log);
        for record in &mut records {
            for text in record.args.iter_mut().chain(record.env.iter_mut()) {
                *text = text.replace(&place, "<W>");
                // A shell's own message (a redirection that failed) read
                // by xargs as arguments: each shell words it its own way.
                if text.contains("missing.txt") {
                    *text = "<message>".into();
                }
            }
        }
        records.sort();
        let files = files(&work)
            .into_iter()
            .map(|(name, text)| (name, text.lines().map(|l| neutral(l) + "\n").collect()))
            .collect();
        Outcome {
            records,
            output: lines,
            files,
            status: output.status.code(),
        }
    }
}

#[derive(Clone, Copy)]
enum How<'a> {
    Shell(&'a str),
    Kinet(&'a Plan, bool),
}

/// A line with the `/bin/` or `/usr/bin/` dropped that kinet writes before
/// the name of a program a wrapper runs: kinet puts the resolved path in
/// the wrapper's arguments, so the program's own messages name it by it.
fn unpathed(line: &str) -> String {
    line.replace("/usr/bin/", "").replace("/bin/", "")
}

/// Whether every record is a program the plan lists, with its arguments
/// and variables; `Err` names the first that is not.
fn covered(records: &[Record], plan: &Plan, work: &Path) -> Result<(), String> {
    let place = work.display().to_string();
    let neutral = |text: &str| text.replace(&place, "<W>");
    let mut planned: Vec<(String, Vec<String>, Vec<String>, bool)> = plan
        .invocations()
        .map(|i| {
            let mut env: Vec<String> = i
                .target
                .env
                .iter()
                .filter(|(n, _)| n.starts_with("K_"))
                .map(|(n, v)| neutral(&format!("{n}={v}")))
                .collect();
            env.sort();
            (
                i.target.name().to_owned(),
                i.target.args.iter().map(|a| neutral(a)).collect(),
                env,
                i.target.open_args,
            )
        })
        .collect();
    for record in records {
        let found = planned.iter().position(|(name, args, env, open)| {
            *name == record.name && *env == record.env && (*open || *args == record.args)
        });
        match found {
            // A program that gets arguments at run time may run more than
            // once (`xargs -n1`).
            Some(at) if planned[at].3 => {}
            Some(at) => {
                planned.remove(at);
            }
            None => return Err(format!("ran {record:?}, which the plan does not list")),
        }
    }
    Ok(())
}

/// Set in a worker process: the file of lines it checks.
const WORKER: &str = "KINET_DIFF_WORKER";

/// A worker: checks its lines, reaping every process each run started,
/// and writes (planned, unsure, failures).
fn worker(input: &str) {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).unwrap();
    let var = |name: &str| std::env::var(name).unwrap();
    let lines: Vec<(usize, String)> =
        serde_json::from_slice(&std::fs::read(input).unwrap()).unwrap();
    let setup = Setup {
        recorders: var("KINET_DIFF_RECORDERS").into(),
        scratch: var("KINET_DIFF_SCRATCH").into(),
    };
    let shells = var("KINET_DIFF_SHELLS");
    let (dash, bash) = shells.split_once(':').unwrap();
    let result = check_lines(&setup, &lines, dash, bash);
    std::fs::write(var("KINET_DIFF_OUT"), serde_json::to_vec(&result).unwrap()).unwrap();
}

/// Waits for every descendant left (orphans come to this subreaper).
fn reap_all() {
    while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::empty()) {}
}

#[test]
fn planned_lines_run_exactly_as_dash_and_bash_run_them() {
    if let Ok(input) = std::env::var(WORKER) {
        worker(&input);
        return;
    }
    let Some(bash) = ["/usr/bin/bash", "/bin/bash"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        eprintln!("SKIPPED: bash is not installed (apt-get install bash)");
        return;
    };
    let Some(dash) = ["/usr/bin/dash", "/bin/dash"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        eprintln!("SKIPPED: dash is not installed (apt-get install dash)");
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let recorders = base.path().join("rec");
    std::fs::create_dir(&recorders).unwrap();
    let source = base.path().join("rec.c");
    std::fs::write(&source, RECORDER).unwrap();
    let binary = recorders.join(PROGRAMS[0]);
    let built = Command::new("cc")
        .arg("-O1")
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .status();
    assert!(
        built.is_ok_and(|s| s.success()),
        "a C compiler (cc) is needed to build the recorder"
    );
    for name in &PROGRAMS[1..] {
        std::fs::hard_link(&binary, recorders.join(name)).unwrap();
    }
    let lines: usize = std::env::var("KINET_DIFF_LINES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let seed: u64 = std::env::var("KINET_DIFF_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0x5eed_1e55);
    let mut rng = Rng(seed | 1);
    let mut generated: Vec<String> = (0..lines).map(|_| line(&mut rng, 0, 4, true)).collect();
    // The constructs that need a shell, alone and inside generated lines.
    for (n, unsure) in UNSURE.iter().enumerate() {
        generated.push((*unsure).to_owned());
        let host = generated[n].clone();
        generated.push(format!("{host}\n{unsure}"));
    }
    // Each worker is a process of its own that adopts every orphan (a
    // child subreaper): after each run it reaps all that run started,
    // background jobs included, before reading what they did.
    let workers = 2;
    let mut running = Vec::new();
    for w in 0..workers {
        let chunk: Vec<(usize, String)> = generated
            .iter()
            .cloned()
            .enumerate()
            .filter(|(i, _)| i % workers == w)
            .collect();
        let input = base.path().join(format!("in{w}.json"));
        let output = base.path().join(format!("out{w}.json"));
        std::fs::write(&input, serde_json::to_vec(&chunk).unwrap()).unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .args([
                "planned_lines_run_exactly_as_dash_and_bash_run_them",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WORKER, &input)
            .env("KINET_DIFF_OUT", &output)
            .env("KINET_DIFF_RECORDERS", &recorders)
            .env("KINET_DIFF_SCRATCH", base.path().join(format!("s{w}")))
            .env("KINET_DIFF_SHELLS", format!("{dash}:{bash}"))
            .spawn()
            .unwrap();
        running.push((child, output));
    }
    let results: Vec<(usize, usize, Vec<String>)> = running
        .into_iter()
        .map(|(mut child, output)| {
            assert!(child.wait().unwrap().success(), "a worker failed");
            serde_json::from_slice(&std::fs::read(output).unwrap()).unwrap()
        })
        .collect();
    let planned: usize = results.iter().map(|r| r.0).sum();
    let unsure: usize = results.iter().map(|r| r.1).sum();
    let failures: Vec<&String> = results.iter().flat_map(|r| r.2.iter()).collect();
    eprintln!(
        "{} lines: {planned} planned and run three ways, {unsure} unsure",
        generated.len()
    );
    assert!(
        failures.is_empty(),
        "{} lines differ; the first:\n{}",
        failures.len(),
        failures
            .iter()
            .take(12)
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
    assert!(
        planned * 2 > generated.len(),
        "too few lines planned ({planned} of {}): the test would prove little",
        generated.len()
    );
}

/// The files a command writes through redirections (a nested shell's
/// commands' included).
fn written(command: &kinet_core::command::Command) -> std::collections::BTreeSet<String> {
    use kinet_core::command::Command as C;
    let (redirects, inner) = match command {
        C::Program(i) => (&i.redirects, None),
        C::Shell(n) => (&n.redirects, Some(&n.plan)),
        _ => return Default::default(),
    };
    let mut files: std::collections::BTreeSet<String> = redirects
        .iter()
        .filter_map(|r| r.writes().map(str::to_owned))
        .collect();
    if let Some(plan) = inner {
        for item in &plan.items {
            for pipeline in std::iter::once(&item.first).chain(item.rest.iter().map(|(_, p)| p)) {
                for command in &pipeline.commands {
                    files.extend(written(command));
                }
            }
        }
    }
    files
}

/// Whether two commands that may run at once write one file: two of a
/// pipeline, or a nested shell's own redirection and a command inside it
/// (which another command of the group may be writing beside).
fn concurrent_writes(plan: &Plan) -> bool {
    use kinet_core::command::Command as C;
    plan.items.iter().any(|item| {
        std::iter::once(&item.first)
            .chain(item.rest.iter().map(|(_, p)| p))
            .any(|pipeline| {
                let sets: Vec<_> = pipeline.commands.iter().map(written).collect();
                let shared = sets
                    .iter()
                    .enumerate()
                    .any(|(i, a)| sets[i + 1..].iter().any(|b| !a.is_disjoint(b)));
                shared
                    || pipeline.commands.iter().any(|c| match c {
                        C::Shell(n) => {
                            let own: std::collections::BTreeSet<String> = n
                                .redirects
                                .iter()
                                .filter_map(|r| r.writes().map(str::to_owned))
                                .collect();
                            let inner: std::collections::BTreeSet<String> = n
                                .plan
                                .invocations()
                                .flat_map(|i| i.redirects.iter())
                                .filter_map(|r| r.writes().map(str::to_owned))
                                .collect();
                            !own.is_disjoint(&inner) || concurrent_writes(&n.plan)
                        }
                        _ => false,
                    })
            })
    })
}

/// The records, those of programs given arguments at run time cut to
/// their known arguments, each once.
fn opened(records: &[Record], plan: &Plan) -> Vec<Record> {
    let mut out: Vec<Record> = records
        .iter()
        .map(|record| {
            let known = plan
                .invocations()
                .filter(|i| i.target.open_args && i.target.name() == record.name)
                .map(|i| i.target.args.len())
                .min();
            let mut record = record.clone();
            if let Some(known) = known {
                record.args.truncate(known);
            }
            record
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Checks each line; returns (planned, unsure, failures).
fn check_lines(
    setup: &Setup,
    lines: &[(usize, String)],
    dash: &str,
    bash: &str,
) -> (usize, usize, Vec<String>) {
    let (mut planned_count, mut unsure_count) = (0, 0);
    let mut failures = Vec::new();
    for (index, line) in lines {
        let index = *index;
        let must_be_unsure = UNSURE.iter().any(|u| line.ends_with(u));
        let kinet_dir = setup.fresh(index, "kinet");
        let work = kinet_dir.join("w");
        let env = setup.env(&work, &kinet_dir.join("log"));
        let plan = match plan(line, &Context::new(&work).env(env)) {
            Planned::Plan(plan) => plan,
            Planned::Unsure(_) => {
                unsure_count += 1;
                continue;
            }
            other => panic!("{other:?}"),
        };
        if must_be_unsure {
            failures.push(format!(
                "line {index} `{line}`: planned, but a shell is needed"
            ));
            continue;
        }
        planned_count += 1;
        let in_dash = setup.run(&setup.fresh(index, "dash"), line, How::Shell(dash));
        let in_bash = setup.run(&setup.fresh(index, "bash"), line, How::Shell(bash));
        // Contained (PID 1 of a namespace) for one line in ten.
        let contain = index % 10 == 0;
        let in_kinet = setup.run(&kinet_dir, line, How::Kinet(&plan, contain));
        let mut problems = Vec::new();
        // A redirection that fails prints the shell's own message and exits
        // 2 in dash, 1 in bash and kinet (a nested `sh -c` can make the two
        // shells agree on 2): such lines compare what ran alone, and the
        // programs xargs runs by their name and known arguments (the
        // message, read as arguments, is worded by each its own way).
        let failed_redirect = line.contains("missing.txt");
        let compared = |records: &[Record]| {
            if failed_redirect {
                opened(records, &plan)
            } else {
                records.to_vec()
            }
        };
        for (shell, outcome) in [("dash", &in_dash), ("bash", &in_bash)] {
            if let Err(why) = covered(&outcome.records, &plan, &work) {
                problems.push(format!("{shell} {why}"));
            }
            if compared(&outcome.records) != compared(&in_kinet.records) {
                problems.push(format!(
                    "{shell} ran {:?}\nkinet ran {:?}",
                    outcome.records, in_kinet.records
                ));
            }
        }
        if !failed_redirect && in_dash.output == in_bash.output && in_dash.output != in_kinet.output
        {
            problems.push(format!(
                "the shells printed {:?}\nkinet printed {:?}",
                in_dash.output, in_kinet.output
            ));
        }
        // Files two commands of a pipeline may write at once hold whatever
        // the timing made of them.
        if !failed_redirect
            && !concurrent_writes(&plan)
            && in_dash.files == in_bash.files
            && in_dash.files != in_kinet.files
        {
            problems.push(format!(
                "the shells left {:?}\nkinet left {:?}",
                in_dash.files, in_kinet.files
            ));
        }
        if !failed_redirect && in_dash.status == in_bash.status && in_dash.status != in_kinet.status
        {
            problems.push(format!(
                "the shells exited {:?}, kinet {:?}",
                in_dash.status, in_kinet.status
            ));
        }
        if !problems.is_empty() {
            failures.push(format!(
                "line {index} `{line}`:\n  {}\n  plan: {}",
                problems.join("\n  "),
                plan.display()
            ));
        }
        for tag in ["kinet", "dash", "bash"] {
            let _ = std::fs::remove_dir_all(setup.scratch.join(format!("{index}-{tag}")));
        }
    }
    (planned_count, unsure_count, failures)
}
