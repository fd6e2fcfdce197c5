//! Commands another program starts, confined as kinet would start them.
//!
//! An editor that offers its terminal to the agent (ACP's `terminal/*`)
//! starts the command itself, as its own child: kinet's [`Launch`] (PID
//! namespace, Landlock, no network, the environment policy) would not
//! apply. So the editor is asked to start this very program, in launcher
//! mode, with the command and its confinement as arguments
//! ([`Launcher::args`]); the launcher applies the same [`Launch`] and runs
//! the command under it, in the editor's terminal.
//!
//! A program opts in by calling [`launcher`] first thing in `main`: in
//! launcher mode it runs the command and exits with its status (or dies of
//! the same signal); otherwise it returns the [`Launcher`] that tools are
//! given (a value only that call makes, so nothing asks an editor to start
//! a program that would not understand the arguments).
//!
//! ```no_run
//! // First thing in `main`:
//! let launcher = kinet_core::sandbox::launcher::launcher();
//! // ... build the agent; hand `launcher` to the ACP server ...
//! # drop(launcher);
//! ```
//!
//! The working directory is opened by the launcher and checked to lie
//! inside the spec's roots (its symlinks resolved) before anything runs.
//! When the sandbox cannot be applied the launcher runs nothing and exits
//! with status 126, saying why on stderr.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{EnvPolicy, Launch, SandboxPolicy};

/// The first argument that puts a program in launcher mode.
pub const LAUNCH_FLAG: &str = "--kinet-launch";

/// The exit status of a launcher that ran nothing (a bad spec, a directory
/// outside the roots, a sandbox the kernel cannot apply).
pub const REFUSED: i32 = 126;

/// One command for a launcher: what to run, where, and how confined.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// The program (found on `PATH` when it has no `/`); with a
    /// [`plan`](Self::plan), its first program, never started itself.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The directory to run in; must lie inside `roots`.
    pub cwd: PathBuf,
    /// The workspace roots (the sandbox's writable roots).
    pub roots: Vec<PathBuf>,
    /// Run as PID 1 of its own PID namespace (see [`Launch::contain`]).
    pub contain: bool,
    /// Which inherited variables pass (the editor's environment here).
    pub env: EnvPolicy,
    /// Variables set (`Some`) or removed (`None`) after `env` applied.
    pub set_env: BTreeMap<String, Option<String>>,
    /// The sandbox, if any.
    pub sandbox: Option<SandboxPolicy>,
    /// A process (the agent's) whose end ends the command too: the
    /// terminal is the editor's child, so the agent's own death would not
    /// reach it otherwise.
    pub watch: Option<u32>,
    /// A planned line run instead of `program` (see [`Launch::plan`]).
    #[serde(default)]
    pub plan: Option<crate::command::Plan>,
}

impl LaunchSpec {
    /// How to start the command: in `dir` (the opened [`cwd`](Self::cwd)),
    /// contained, with the environment policy and the sandbox over the
    /// roots, as the spec says. The same for the launcher and for a
    /// program that starts the spec itself.
    pub fn launch(&self, dir: std::fs::File) -> Launch {
        let mut launch = Launch::new()
            .cwd(dir, &self.cwd)
            .contain(self.contain)
            .env(self.env.clone());
        if let Some(plan) = &self.plan {
            launch = launch.plan(plan.clone());
        }
        match &self.sandbox {
            Some(policy) => launch.sandbox(policy.clone(), self.roots.clone()),
            None => launch,
        }
    }

    /// The command itself: the program, its arguments and the variables
    /// set or removed (the rest is [`launch`](Self::launch)'s).
    pub fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.program);
        command.args(&self.args);
        for (name, value) in &self.set_env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        command
    }
}

/// A program that runs [`LaunchSpec`]s: this executable, which called
/// [`launcher`] at the start of `main`.
#[derive(Debug, Clone)]
pub struct Launcher {
    program: PathBuf,
}

impl Launcher {
    /// The program to start.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The arguments that make it run `spec`: the flag and the spec in
    /// hexadecimal, so an editor that passes them through a shell (quoted
    /// well or not) cannot run any of the command before the launcher
    /// does. `None` when the spec is too long for one argument (128 KiB on
    /// Linux).
    pub fn args(&self, spec: &LaunchSpec) -> Option<Vec<String>> {
        const MAX_ARGUMENT: usize = 128 * 1024 - 1;
        let json = serde_json::to_vec(spec).ok()?;
        if json.len() * 2 > MAX_ARGUMENT {
            return None;
        }
        let mut hex = String::with_capacity(json.len() * 2);
        for byte in json {
            hex.push(char::from(HEX[usize::from(byte >> 4)]));
            hex.push(char::from(HEX[usize::from(byte & 0xF)]));
        }
        Some(vec![LAUNCH_FLAG.to_owned(), hex])
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The spec's JSON back from its hexadecimal form.
fn unhex(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// Call first thing in `main`. Started in launcher mode (first argument
/// [`LAUNCH_FLAG`]), runs the command and never returns; otherwise returns
/// this program as a [`Launcher`] (`None` when the path of the running
/// executable cannot be known).
pub fn launcher() -> Option<Launcher> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(std::ffi::OsStr::new(LAUNCH_FLAG)) {
        let spec = args.next().unwrap_or_default();
        std::process::exit(run(&spec.to_string_lossy()));
    }
    std::env::current_exe()
        .ok()
        .map(|program| Launcher { program })
}

/// Runs the spec's command; the exit status to leave with.
fn run(spec: &str) -> i32 {
    let refuse = |why: String| {
        // The terminal's output: what the tool reports.
        #[allow(clippy::print_stderr)]
        {
            eprintln!("kinet: the command was not started: {why}");
        }
        REFUSED
    };
    // Nothing the command starts may read this process's memory or
    // environment (the editor's, whole) through /proc.
    if let Err(error) = super::protect_process() {
        return refuse(format!("the launcher could not protect itself ({error})"));
    }
    // Whoever started this launcher (the editor, or a shell of its) ending
    // or being killed ends it, and with it the command's namespace.
    if let Err(error) = die_with_parent() {
        return refuse(format!(
            "the launcher could not tie itself to its parent ({error})"
        ));
    }
    let spec: LaunchSpec = match unhex(spec).and_then(|json| serde_json::from_slice(&json).ok()) {
        Some(spec) => spec,
        None => return refuse("the launch spec is not valid".into()),
    };
    let dir = match open_inside(&spec.cwd, &spec.roots) {
        Ok(dir) => dir,
        Err(why) => return refuse(why),
    };
    let mut command = spec.command();
    match spec.launch(dir).prepare(&mut command) {
        Ok(super::Containment::ProcessGroup) if spec.contain => {
            // Killing this launcher would not end what the command
            // starts: better not to start it.
            return refuse(
                "no PID namespace could be made here, so the command's processes could outlive it"
                    .into(),
            );
        }
        Ok(_) => {}
        Err(error) => return refuse(error.to_string()),
    }
    if let Some(pid) = spec.watch
        && let Err(error) = watch(pid)
    {
        return refuse(format!("the agent (process {pid}) is gone ({error})"));
    }
    let status = match command.status() {
        Ok(status) => status,
        Err(error) => return refuse(format!("`{}` could not start: {error}", spec.program)),
    };
    if let Some(code) = status.code() {
        return code;
    }
    die_like(&status)
}

/// Asks the kernel to kill this process when its parent ends; fails when
/// the parent is already gone.
#[cfg(target_os = "linux")]
fn die_with_parent() -> std::io::Result<()> {
    use rustix::process::{Signal, getppid, set_parent_process_death_signal};
    let parent = getppid();
    set_parent_process_death_signal(Some(Signal::KILL))?;
    if getppid() != parent {
        return Err(std::io::Error::other("its parent has ended"));
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent() -> std::io::Result<()> {
    Ok(())
}

/// Ends this launcher, and with it the command's namespace (its
/// supervisor dies with the thread that started it), when process `pid`
/// ends. Fails when `pid` is already gone.
#[cfg(target_os = "linux")]
fn watch(pid: u32) -> std::io::Result<()> {
    use rustix::event::{PollFd, PollFlags, poll};
    use rustix::process::{Pid, PidfdFlags, pidfd_open};
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let pidfd = pidfd_open(pid, PidfdFlags::empty())?;
    std::thread::spawn(move || {
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
        while poll(&mut fds, None).is_err() {}
        std::process::exit(128 + 9);
    });
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn watch(_pid: u32) -> std::io::Result<()> {
    Ok(())
}

/// The directory `cwd`, opened, when it lies inside one of `roots` (both
/// with their symlinks resolved).
fn open_inside(cwd: &Path, roots: &[PathBuf]) -> Result<std::fs::File, String> {
    let shown = cwd.display();
    let dir = std::fs::File::open(cwd).map_err(|e| format!("`{shown}` cannot be opened: {e}"))?;
    let is_dir = dir.metadata().map(|m| m.is_dir()).unwrap_or(false);
    if !is_dir {
        return Err(format!("`{shown}` is not a directory"));
    }
    #[cfg(target_os = "linux")]
    let real =
        super::opened_path(&dir).map_err(|e| format!("`{shown}` cannot be resolved: {e}"))?;
    #[cfg(not(target_os = "linux"))]
    let real =
        std::fs::canonicalize(cwd).map_err(|e| format!("`{shown}` cannot be resolved: {e}"))?;
    let inside = roots
        .iter()
        .any(|root| std::fs::canonicalize(root).is_ok_and(|root| real.starts_with(root)));
    if roots.is_empty() || !inside {
        return Err(format!("`{shown}` is not inside the workspace"));
    }
    Ok(dir)
}

/// Leaves the way the command did: killed by the same signal (so whoever
/// waits on the launcher sees it), or 128 + the signal number.
#[cfg(unix)]
fn die_like(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    let Some(signal) = status.signal() else {
        return 1;
    };
    #[cfg(target_os = "linux")]
    super::linux::raise_default(signal);
    128 + signal
}

#[cfg(not(unix))]
fn die_like(_status: &std::process::ExitStatus) -> i32 {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever the command and its environment hold, the argument is
        /// plain hexadecimal and gives back the same spec.
        #[test]
        fn any_spec_survives_its_argument(
            line in ".{0,200}",
            name in "[A-Z_]{1,8}",
            value in proptest::option::of(".{0,40}"),
            cwd in "/[a-z/ ]{0,30}",
        ) {
            let spec = LaunchSpec {
                program: "sh".into(),
                args: vec!["-c".into(), line],
                cwd: cwd.clone().into(),
                roots: vec![cwd.into()],
                contain: true,
                env: EnvPolicy::core(),
                set_env: BTreeMap::from([(name, value)]),
                sandbox: None,
                watch: None,
                plan: None,
            };
            let launcher = Launcher { program: "/bin/x".into() };
            let args = launcher.args(&spec).unwrap();
            proptest::prop_assert!(args[1].bytes().all(|b| b.is_ascii_hexdigit()));
            let back: LaunchSpec = serde_json::from_slice(&unhex(&args[1]).unwrap()).unwrap();
            proptest::prop_assert_eq!(back, spec);
        }
    }

    #[test]
    fn a_directory_outside_the_roots_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let roots = vec![root.path().to_path_buf()];
        assert!(open_inside(root.path(), &roots).is_ok());
        std::fs::create_dir(root.path().join("sub")).unwrap();
        assert!(open_inside(&root.path().join("sub"), &roots).is_ok());
        let err = open_inside(other.path(), &roots).unwrap_err();
        assert!(err.contains("not inside the workspace"), "{err}");
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(other.path(), root.path().join("out")).unwrap();
            assert!(open_inside(&root.path().join("out"), &roots).is_err());
        }
        assert!(open_inside(root.path(), &[]).is_err());
    }

    #[test]
    fn a_spec_survives_its_arguments() {
        let spec = LaunchSpec {
            program: "sh".into(),
            args: vec!["-c".into(), "echo 'a \"b\"' $HOME\n".into()],
            cwd: "/w".into(),
            roots: vec!["/w".into()],
            contain: true,
            env: EnvPolicy::core().allow("EXTRA"),
            set_env: BTreeMap::from([("A".into(), Some("1".into())), ("B".into(), None)]),
            sandbox: Some(SandboxPolicy::workspace_write().allow_hosts(["example.org"])),
            watch: Some(1),
            plan: match crate::command::plan(
                "ls -l 'a b' 2>/dev/null | wc -l && sh -c 'cat x'",
                &crate::command::Context::examples(),
            ) {
                crate::command::Planned::Plan(plan) => Some(plan),
                crate::command::Planned::Unsure(why) => panic!("{why}"),
            },
        };
        let launcher = Launcher {
            program: "/bin/x".into(),
        };
        let args = launcher.args(&spec).unwrap();
        assert_eq!(args[0], LAUNCH_FLAG);
        // Nothing a shell acts on, whatever the command holds.
        assert!(args[1].bytes().all(|b| b.is_ascii_hexdigit()));
        let back: LaunchSpec = serde_json::from_slice(&unhex(&args[1]).unwrap()).unwrap();
        assert_eq!(back, spec);
        assert!(unhex("abc").is_none() && unhex("zz").is_none());
        // Too long for one argument: no arguments, the caller runs it itself.
        let long = LaunchSpec {
            args: vec!["-c".into(), "x".repeat(70 * 1024)],
            ..spec
        };
        assert!(launcher.args(&long).is_none());
    }
}
