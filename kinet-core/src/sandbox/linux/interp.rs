//! Running a [`Plan`] without a shell: the plan is compiled in the parent
//! (paths, arguments and environments as C strings and pointer arrays,
//! redirections as open flags), and the command's first process — PID 1
//! of its namespace, or the process-group leader — interprets it with
//! system calls alone: `clone` for each program, `pipe2` and `dup2` for
//! pipes and redirections, `execve` of each program's resolved path,
//! `waitpid` for `&&`, `||` and `;`. Nothing allocates after the fork.

use std::ffi::{CString, c_char};
use std::io;

use super::fork;
use crate::command::{Command, Connector, Plan, RedirectKind};

/// The shell that runs a script without a `#!` line, as shells do.
const SH: &std::ffi::CStr = c"/bin/sh";

/// The most commands one pipeline may hold.
const MAX_PIPELINE: usize = 64;

/// Null-terminated pointers into strings owned next to them (or by the
/// [`Compiled`] plan they belong to), as `execve` takes them.
struct Pointers {
    ptrs: Vec<*const c_char>,
}

// SAFETY: the pointers point into `CString`s owned by the same `Compiled`
// plan, which is never mutated after it is built and outlives them.
unsafe impl Send for Pointers {}
// SAFETY: as above; only read.
unsafe impl Sync for Pointers {}

/// A plan ready to run after a fork.
pub(super) struct Compiled {
    /// Keeps the base environment's strings alive for the pointers.
    _env: Vec<CString>,
    items: Vec<CItem>,
}

struct CItem {
    first: CPipeline,
    rest: Vec<(Connector, CPipeline)>,
}

struct CPipeline {
    commands: Vec<CCommand>,
}

enum CCommand {
    Exec(CExec),
    Group(Vec<CItem>, Vec<CRedirect>),
}

struct CExec {
    path: CString,
    _strings: Vec<CString>,
    argv: Pointers,
    /// `/bin/sh path args...`: what a shell does with a file that is not
    /// a binary and has no `#!` line (`ENOEXEC`).
    script_argv: Pointers,
    envp: Pointers,
    redirects: Vec<CRedirect>,
    exec: bool,
}

enum CRedirect {
    Open {
        fd: libc::c_int,
        path: CString,
        flags: libc::c_int,
    },
    Dup {
        fd: libc::c_int,
        from: libc::c_int,
    },
}

fn cstring(text: &str) -> io::Result<CString> {
    CString::new(text)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command"))
}

/// Compiles `plan` for running with `env` as the base environment.
pub(super) fn compile(plan: &Plan, env: &[(String, String)]) -> io::Result<Compiled> {
    let base: Vec<CString> = env
        .iter()
        .map(|(name, value)| cstring(&format!("{name}={value}")))
        .collect::<io::Result<_>>()?;
    let items = compile_items(plan, env, &base)?;
    Ok(Compiled { _env: base, items })
}

fn compile_items(
    plan: &Plan,
    env: &[(String, String)],
    base: &[CString],
) -> io::Result<Vec<CItem>> {
    let pipeline = |p: &crate::command::Pipeline| -> io::Result<CPipeline> {
        if p.commands.len() > MAX_PIPELINE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a pipeline of more than {MAX_PIPELINE} commands"),
            ));
        }
        let commands = p
            .commands
            .iter()
            .map(|command| compile_command(command, env, base))
            .collect::<io::Result<_>>()?;
        Ok(CPipeline { commands })
    };
    plan.items
        .iter()
        .map(|item| {
            Ok(CItem {
                first: pipeline(&item.first)?,
                rest: item
                    .rest
                    .iter()
                    .map(|(c, p)| Ok((*c, pipeline(p)?)))
                    .collect::<io::Result<_>>()?,
            })
        })
        .collect()
}

fn compile_command(
    command: &Command,
    env: &[(String, String)],
    base: &[CString],
) -> io::Result<CCommand> {
    match command {
        Command::Program(invocation) => {
            let mut strings: Vec<CString> = invocation
                .argv
                .iter()
                .map(|arg| cstring(arg))
                .collect::<io::Result<_>>()?;
            let argc = strings.len();
            for (name, value) in &invocation.env {
                strings.push(cstring(&format!("{name}={value}"))?);
            }
            let mut argv: Vec<*const c_char> = strings[..argc].iter().map(|s| s.as_ptr()).collect();
            argv.push(std::ptr::null());
            let path = invocation.path.to_str().ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a program path that is not UTF-8",
                )
            })?;
            let path = cstring(path)?;
            let mut script_argv: Vec<*const c_char> = vec![SH.as_ptr(), path.as_ptr()];
            script_argv.extend(strings[1..argc].iter().map(|s| s.as_ptr()));
            script_argv.push(std::ptr::null());
            // The base environment without what the assignments replace,
            // then the assignments.
            let mut envp: Vec<*const c_char> = env
                .iter()
                .zip(base)
                .filter(|((name, _), _)| !invocation.env.iter().any(|(n, _)| n == name))
                .map(|(_, s)| s.as_ptr())
                .collect();
            envp.extend(strings[argc..].iter().map(|s| s.as_ptr()));
            envp.push(std::ptr::null());
            Ok(CCommand::Exec(CExec {
                path,
                _strings: strings,
                argv: Pointers { ptrs: argv },
                script_argv: Pointers { ptrs: script_argv },
                envp: Pointers { ptrs: envp },
                redirects: compile_redirects(&invocation.redirects)?,
                exec: invocation.exec,
            }))
        }
        Command::Shell(nested) => Ok(CCommand::Group(
            compile_items(&nested.plan, env, base)?,
            compile_redirects(&nested.redirects)?,
        )),
    }
}

fn compile_redirects(redirects: &[crate::command::Redirect]) -> io::Result<Vec<CRedirect>> {
    redirects
        .iter()
        .map(|redirect| {
            let fd = libc::c_int::from(redirect.fd);
            let (path, flags) = match &redirect.kind {
                RedirectKind::Read(file) => (&file.path, libc::O_RDONLY),
                RedirectKind::Write(file) => {
                    (&file.path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)
                }
                RedirectKind::Append(file) => {
                    (&file.path, libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND)
                }
                RedirectKind::Dup(from) => {
                    return Ok(CRedirect::Dup {
                        fd,
                        from: libc::c_int::from(*from),
                    });
                }
            };
            Ok(CRedirect::Open {
                fd,
                path: cstring(path)?,
                flags: flags | libc::O_CLOEXEC | libc::O_NOCTTY,
            })
        })
        .collect()
}

/// Runs the plan in this (forked) process and exits with its status.
/// System calls only.
pub(super) fn run(plan: &Compiled) -> ! {
    // SAFETY: system calls only, on this process's own state.
    unsafe {
        // Handlers of the host (its runtime's) must not run here: their
        // descriptors are gone, or reused by the pipes made below.
        for signal in 1..=64 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        // The spawn's error pipe and every other inherited descriptor:
        // the programs get 0, 1 and 2 alone, and the host's spawn returns
        // now rather than when the plan ends.
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            for fd in 3..65_536 {
                libc::close(fd);
            }
        }
        libc::_exit(run_items(&plan.items))
    }
}

fn run_items(items: &[CItem]) -> libc::c_int {
    let mut status = 0;
    for item in items {
        status = run_and_or(item);
    }
    status
}

fn run_and_or(item: &CItem) -> libc::c_int {
    let mut status = run_pipeline(&item.first);
    for (connector, pipeline) in &item.rest {
        let runs = match connector {
            Connector::And => status == 0,
            Connector::Or => status != 0,
        };
        if runs {
            status = run_pipeline(pipeline);
        }
    }
    status
}

fn run_pipeline(pipeline: &CPipeline) -> libc::c_int {
    let count = pipeline.commands.len();
    let mut pids = [0 as libc::pid_t; MAX_PIPELINE];
    let mut previous = -1;
    for (i, command) in pipeline.commands.iter().enumerate() {
        let mut ends = [-1 as libc::c_int; 2];
        if i + 1 < count {
            // SAFETY: a two-element array, as pipe2 takes.
            if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                say(&[b"kinet: cannot make a pipe\n"]);
                ends = [-1, -1];
            }
        }
        pids[i] = spawn(command, previous, ends[1], ends[0]);
        // SAFETY: descriptors this process made and no longer needs.
        unsafe {
            if previous >= 0 {
                libc::close(previous);
            }
            if ends[1] >= 0 {
                libc::close(ends[1]);
            }
        }
        previous = ends[0];
    }
    let mut status = 1;
    for pid in &pids[..count] {
        status = wait_for(*pid);
    }
    if let [CCommand::Exec(only)] = &pipeline.commands[..]
        && only.exec
    {
        // SAFETY: ends this process, as `exec` ends the shell.
        unsafe { libc::_exit(status) }
    }
    status
}

/// Starts one command with `input` and `output` (or the inherited ones),
/// closing `other` (the next command's end of its pipe) in the child.
fn spawn(
    command: &CCommand,
    input: libc::c_int,
    output: libc::c_int,
    other: libc::c_int,
) -> libc::pid_t {
    let pid = fork();
    if pid != 0 {
        if pid < 0 {
            say(&[b"kinet: cannot start a process\n"]);
        }
        return pid;
    }
    // SAFETY: system calls on descriptors this process holds; `_exit` and
    // `execve` do not return.
    unsafe {
        if input >= 0 {
            libc::dup2(input, 0);
            libc::close(input);
        }
        if output >= 0 {
            libc::dup2(output, 1);
            libc::close(output);
        }
        if other >= 0 {
            libc::close(other);
        }
        match command {
            CCommand::Exec(exec) => {
                if !redirect(&exec.redirects) {
                    libc::_exit(1);
                }
                libc::execve(
                    exec.path.as_ptr(),
                    exec.argv.ptrs.as_ptr(),
                    exec.envp.ptrs.as_ptr(),
                );
                let mut error = *libc::__errno_location();
                if error == libc::ENOEXEC {
                    libc::execve(
                        SH.as_ptr(),
                        exec.script_argv.ptrs.as_ptr(),
                        exec.envp.ptrs.as_ptr(),
                    );
                    error = *libc::__errno_location();
                }
                say(&[
                    b"kinet: cannot run ",
                    exec.path.as_bytes(),
                    b": ",
                    reason(error),
                    b"\n",
                ]);
                libc::_exit(if error == libc::ENOENT { 127 } else { 126 })
            }
            CCommand::Group(items, redirects) => {
                if !redirect(redirects) {
                    libc::_exit(1);
                }
                libc::_exit(run_items(items))
            }
        }
    }
}

/// Applies redirections in order; `false` (with a message) when a file
/// cannot be opened.
fn redirect(redirects: &[CRedirect]) -> bool {
    for redirect in redirects {
        // SAFETY: NUL-terminated paths; descriptors this process holds.
        unsafe {
            match redirect {
                CRedirect::Open { fd, path, flags } => {
                    let opened = libc::open(path.as_ptr(), *flags, 0o666 as libc::c_uint);
                    if opened < 0 {
                        let error = *libc::__errno_location();
                        say(&[b"kinet: ", path.as_bytes(), b": ", reason(error), b"\n"]);
                        return false;
                    }
                    if opened != *fd {
                        libc::dup2(opened, *fd);
                        libc::close(opened);
                    }
                }
                CRedirect::Dup { fd, from } => {
                    if libc::dup2(*from, *fd) < 0 {
                        say(&[b"kinet: a bad descriptor in a redirection\n"]);
                        return false;
                    }
                }
            }
        }
    }
    true
}

/// Waits for `pid`: its exit status, or 128 + the signal that ended it.
fn wait_for(pid: libc::pid_t) -> libc::c_int {
    if pid <= 0 {
        return 1;
    }
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: a plain system call into a local.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        if waited == pid {
            break;
        }
        // SAFETY: reads this thread's errno.
        if waited < 0 && unsafe { *libc::__errno_location() } != libc::EINTR {
            return 1;
        }
    }
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// Writes `parts` to standard error.
fn say(parts: &[&[u8]]) {
    for part in parts {
        // SAFETY: a plain write of a valid buffer.
        unsafe {
            libc::write(2, part.as_ptr().cast(), part.len());
        }
    }
}

/// The C library's text for an error number (fixed here: the library's
/// own may depend on the locale, which nothing after a fork may load).
fn reason(error: libc::c_int) -> &'static [u8] {
    match error {
        libc::ENOENT => b"No such file or directory",
        libc::EACCES => b"Permission denied",
        libc::EPERM => b"Operation not permitted",
        libc::ENOEXEC => b"Exec format error",
        libc::EISDIR => b"Is a directory",
        libc::ENOTDIR => b"Not a directory",
        libc::E2BIG => b"Argument list too long",
        libc::ELOOP => b"Too many levels of symbolic links",
        libc::EROFS => b"Read-only file system",
        libc::ETXTBSY => b"Text file busy",
        libc::ENOSPC => b"No space left on device",
        libc::EXDEV => b"Invalid cross-device link",
        _ => b"Input/output error or another failure",
    }
}
