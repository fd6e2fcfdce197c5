//! Namespaces through raw system calls, and the child's setup (Landlock's
//! ruleset is in [`landlock`]).
//!
//! The code run between `fork` and `exec` (the `pre_exec` closure) may only
//! make system calls: everything it needs (the ruleset, the uid map text,
//! the directory) is prepared in the parent, and the closure only reads it.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

mod interp;
mod landlock;
mod proxy;

use super::{Containment, Launch, SandboxError, SandboxPolicy, Support};
use landlock::{FS_TRUNCATE, FS_WRITE_FILE, landlock_abi, ruleset};

pub(super) fn support() -> Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    *SUPPORT.get_or_init(|| Support {
        landlock_abi: landlock_abi(),
        namespaces: probe(containment_flags(), vec![Mount::private_root()]),
        isolation: probe(isolation_flags(), vec![Mount::private_root()]),
    })
}

/// Whether a command really starts with these namespaces here: they can be
/// refused by sysctls, seccomp or security modules, so try one.
fn probe(namespaces: libc::c_int, mounts: Vec<Mount>) -> bool {
    let mut command = std::process::Command::new("/bin/sh");
    command
        .args(["-c", "exit 0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let setup = Setup {
        fds: Vec::new(),
        cwd: None,
        namespaces,
        maps: Maps::new(),
        mounts,
        ruleset: None,
        host: std::process::id(),
        fresh_proc: namespaces & libc::CLONE_NEWNS != 0,
        proc_writes: 0,
        proxy: None,
        loopback: false,
        plan: None,
    };
    // SAFETY: see `Setup::run`.
    unsafe { command.pre_exec(move || setup.run()) };
    command.status().is_ok_and(|status| status.success())
}

/// A PID namespace and a mount namespace (for a `/proc` of its own),
/// through a user namespace when not root (root keeps its own view of
/// files owned by other users).
fn containment_flags() -> libc::c_int {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWUSER
    } else {
        libc::CLONE_NEWPID | libc::CLONE_NEWNS
    }
}

/// The sandbox's namespaces: always a user namespace (so even root keeps
/// no capability over the host: no devices, no modules, no mounts outside),
/// a mount namespace for the read-only and hidden paths, a PID namespace
/// and a network namespace.
fn isolation_flags() -> libc::c_int {
    libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWNET
}

/// One mount made in the sandbox's mount namespace, prepared in the parent.
enum Mount {
    /// Stops mounts from propagating back to the host.
    PrivateRoot,
    /// Makes `path` read-only; `keep` are its mount's flags that a user
    /// namespace may not drop.
    ReadOnly { path: CString, keep: libc::c_ulong },
    /// Hides a directory under an empty tmpfs.
    HideDir(CString),
    /// Hides a file (a socket) under `/dev/null`.
    HideFile(CString),
}

impl Mount {
    fn private_root() -> Self {
        Mount::PrivateRoot
    }

    /// Runs in the child: system calls only.
    fn apply(&self) -> io::Result<()> {
        let none = std::ptr::null::<libc::c_char>();
        // SAFETY: NUL-terminated strings or null pointers, as mount(2) takes.
        let result = unsafe {
            match self {
                Mount::PrivateRoot => libc::mount(
                    none,
                    c"/".as_ptr(),
                    none,
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ),
                Mount::ReadOnly { path, keep } => {
                    let bound = libc::mount(
                        path.as_ptr(),
                        path.as_ptr(),
                        none,
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    );
                    if bound != 0 {
                        bound
                    } else {
                        libc::mount(
                            none,
                            path.as_ptr(),
                            none,
                            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | keep,
                            std::ptr::null(),
                        )
                    }
                }
                Mount::HideDir(path) => libc::mount(
                    c"tmpfs".as_ptr(),
                    path.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ),
                Mount::HideFile(path) => libc::mount(
                    c"/dev/null".as_ptr(),
                    path.as_ptr(),
                    none,
                    libc::MS_BIND,
                    std::ptr::null(),
                ),
            }
        };
        check(result)
    }
}

/// The flags of the mount `path` is on that a remount in a user namespace
/// must keep.
fn locked_flags(path: &Path) -> libc::c_ulong {
    use rustix::fs::StatVfsMountFlags as F;
    let Ok(stat) = rustix::fs::statvfs(path) else {
        return 0;
    };
    let mut keep = 0;
    for (have, ms) in [
        (F::NOSUID, libc::MS_NOSUID),
        (F::NODEV, libc::MS_NODEV),
        (F::NOEXEC, libc::MS_NOEXEC),
        (F::NOATIME, libc::MS_NOATIME),
        (F::NODIRATIME, libc::MS_NODIRATIME),
        (F::RELATIME, libc::MS_RELATIME),
    ] {
        if stat.f_flag.contains(have) {
            keep |= ms;
        }
    }
    keep
}

/// Paths of sockets that lead out of the sandbox whatever its network
/// namespace: the user's session bus and runtime directory, the system
/// bus, Docker, X11, the ssh agent.
fn socket_paths(policy: &SandboxPolicy) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = [
        "/run/user",
        "/run/dbus",
        "/var/run/dbus",
        "/run/docker.sock",
        "/var/run/docker.sock",
        "/tmp/.X11-unix",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    paths.extend(std::env::var_os("SSH_AUTH_SOCK").map(PathBuf::from));
    paths.retain(|path| !policy.reachable.contains(path));
    paths.extend(policy.hidden_paths().iter().cloned());
    paths
}

/// The mounts of a sandbox for these roots: the protected directories
/// (`.git`, `.kinet`) of each root read-only
/// (so nothing the sandbox writes there runs later, outside it: hooks,
/// config), and the sockets of [`socket_paths`] hidden.
fn sandbox_mounts(policy: &SandboxPolicy, roots: &[PathBuf]) -> io::Result<Vec<Mount>> {
    let cstring = |path: &Path| {
        CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
    };
    let mut mounts = vec![Mount::PrivateRoot];
    let mut seen = std::collections::BTreeSet::new();
    for protected in roots
        .iter()
        .flat_map(|root| policy.protected.iter().map(move |name| root.join(name)))
    {
        let Ok(real) = std::fs::canonicalize(&protected) else {
            continue;
        };
        if seen.insert(real.clone()) {
            let keep = locked_flags(&real);
            mounts.push(Mount::ReadOnly {
                path: cstring(&real)?,
                keep,
            });
        }
    }
    for path in socket_paths(policy) {
        let Ok(real) = std::fs::canonicalize(&path) else {
            continue;
        };
        let Ok(metadata) = std::fs::metadata(&real) else {
            continue;
        };
        if !seen.insert(real.clone()) {
            continue;
        }
        mounts.push(if metadata.is_dir() {
            Mount::HideDir(cstring(&real)?)
        } else {
            Mount::HideFile(cstring(&real)?)
        });
    }
    Ok(mounts)
}

/// The uid and gid map lines, formatted before the fork.
struct Maps {
    uid: Vec<u8>,
    gid: Vec<u8>,
}

impl Maps {
    fn new() -> Self {
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Self {
            uid: format!("{uid} {uid} 1\n").into_bytes(),
            gid: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }
}

/// Everything the child needs, prepared in the parent.
struct Setup {
    /// Descriptors to give the command at these numbers.
    fds: Vec<(OwnedFd, i32)>,
    cwd: Option<std::fs::File>,
    namespaces: libc::c_int,
    maps: Maps,
    mounts: Vec<Mount>,
    ruleset: Option<OwnedFd>,
    host: u32,
    /// Mount a `/proc` of the new PID namespace (whenever there is a
    /// mount namespace: sandboxed and contained commands), so the host's
    /// processes, its own included, and their environments and command
    /// lines are out of sight.
    fresh_proc: bool,
    /// Allow writes beneath that fresh `/proc` (only once it is mounted).
    proc_writes: u64,
    /// The network allowlist's listener, made in the new network
    /// namespace and sent to the host's proxy.
    proxy: Option<ProxyListener>,
    /// Bring the namespace's loopback up (for servers of the command's
    /// own) when no proxy does.
    loopback: bool,
    /// A plan the first process runs itself instead of returning to
    /// `exec` the command's program.
    plan: Option<interp::Compiled>,
}

/// Brings the new network namespace's `lo` up. System calls only (runs
/// between fork and exec).
fn loopback_up() -> io::Result<()> {
    // SAFETY: plain system calls on a descriptor made here; the request
    // is built here (it holds a pointer, so it cannot be prepared in the
    // parent and moved in).
    unsafe {
        let mut loopback: libc::ifreq = std::mem::zeroed();
        loopback.ifr_name[0] = b'l' as libc::c_char;
        loopback.ifr_name[1] = b'o' as libc::c_char;
        loopback.ifr_ifru.ifru_flags =
            (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as libc::c_short;
        let control = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        check(control)?;
        let up = libc::ioctl(control, libc::SIOCSIFFLAGS, &loopback as *const libc::ifreq);
        libc::close(control);
        check(up)
    }
}

/// What the sandbox's first process needs to give the host's proxy a
/// listener inside the sandbox's network namespace, prepared in the parent.
struct ProxyListener {
    /// The sandbox's end of the socket pair (close-on-exec: the command
    /// never holds it; the supervisor keeps it until it exits).
    channel: OwnedFd,
    /// `127.0.0.1:3128`.
    address: libc::sockaddr_in,
}

impl ProxyListener {
    fn new(channel: OwnedFd) -> Self {
        // SAFETY: all-zero is a valid sockaddr_in.
        let mut address: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        address.sin_family = libc::AF_INET as libc::sa_family_t;
        address.sin_port = super::PROXY_PORT.to_be();
        address.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        Self { channel, address }
    }

    /// Runs in the child, in the new network namespace: system calls
    /// only. Brings the loopback up, listens on the proxy's address and
    /// sends the listener and this process's pid to the host.
    fn listen(&self) -> io::Result<()> {
        // SAFETY: plain system calls on descriptors made here, with
        // structures prepared in the parent; the message's buffers live on
        // this stack frame.
        unsafe {
            loopback_up()?;
            let listener = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            check(listener)?;
            let bound = libc::bind(
                listener,
                (&self.address as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            );
            if bound != 0 || libc::listen(listener, 128) != 0 {
                let error = io::Error::last_os_error();
                libc::close(listener);
                return Err(error);
            }
            let mut pid = libc::getpid();
            let mut iov = libc::iovec {
                iov_base: (&mut pid as *mut libc::pid_t).cast(),
                iov_len: std::mem::size_of::<libc::pid_t>(),
            };
            let mut space = [0u64; 8];
            let mut message: libc::msghdr = std::mem::zeroed();
            message.msg_iov = &mut iov;
            message.msg_iovlen = 1;
            message.msg_control = space.as_mut_ptr().cast();
            message.msg_controllen =
                libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as _;
            let header = libc::CMSG_FIRSTHDR(&message);
            if header.is_null() {
                libc::close(listener);
                return Err(io::Error::other("no room for the listener"));
            }
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>(), listener);
            let sent = libc::sendmsg(self.channel.as_raw_fd(), &message, libc::MSG_NOSIGNAL);
            let error = io::Error::last_os_error();
            libc::close(listener);
            if sent < 0 {
                return Err(error);
            }
        }
        Ok(())
    }
}

/// A fork-like `clone` (no shared memory or stack): unlike `fork`, it
/// takes none of the C library's locks, which another thread of the host
/// may hold. System calls only.
fn fork() -> libc::pid_t {
    // SAFETY: a fork-like clone with no shared memory or stack.
    unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            0 as libc::c_long,
            0 as libc::c_long,
            0 as libc::c_long,
            0 as libc::c_long,
        ) as libc::pid_t
    }
}

fn check(result: libc::c_int) -> io::Result<()> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Writes `data` to `path` with plain system calls.
fn write_proc(path: &CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; the fd is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    check(fd)?;
    // SAFETY: `data` is valid for `data.len()` bytes.
    let written = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
    if written < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Setup {
    /// Runs in the forked child before `exec`: system calls only.
    fn run(&self) -> io::Result<()> {
        // A session of its own: one group to kill, and no controlling
        // terminal to type into (TIOCSTI) or read from.
        // SAFETY: plain system call.
        check(unsafe { libc::setsid() })?;
        if let Some(dir) = &self.cwd {
            // SAFETY: an open directory descriptor.
            check(unsafe { libc::fchdir(dir.as_raw_fd()) })?;
        }
        if self.namespaces != 0 {
            // SAFETY: plain system call.
            check(unsafe { libc::unshare(self.namespaces) })?;
            if self.namespaces & libc::CLONE_NEWUSER != 0 {
                // A host made non-dumpable (`protect_process`) passes that on
                // to this fork, and a non-dumpable process's /proc/self files
                // belong to the global root, which has no mapping here: the
                // maps could not be written. Dumpable just for the writes;
                // the supervisor, a copy of the host's memory, stays not.
                // SAFETY: plain system calls on this process's own flag.
                let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
                if dumpable == 0 {
                    check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) })?;
                }
                write_proc(c"/proc/self/setgroups", b"deny")?;
                write_proc(c"/proc/self/uid_map", &self.maps.uid)?;
                write_proc(c"/proc/self/gid_map", &self.maps.gid)?;
                if dumpable == 0 {
                    // SAFETY: as above.
                    check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) })?;
                }
            }
            for mount in &self.mounts {
                mount.apply()?;
            }
            if let Some(proxy) = &self.proxy {
                proxy.listen()?;
            } else if self.loopback {
                loopback_up()?;
            }
            // This process becomes the supervisor: it dies with the host
            // (set after unshare, which clears the setting).
            // SAFETY: plain system calls.
            unsafe {
                check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
                if libc::getppid() != self.host as libc::pid_t {
                    libc::_exit(137);
                }
            }
            let pid = fork();
            if pid < 0 {
                return Err(io::Error::last_os_error());
            }
            if pid > 0 {
                let keep = self.proxy.as_ref().map_or(-1, |p| p.channel.as_raw_fd());
                supervise(pid as libc::pid_t, keep);
            }
            // PID 1 of the new namespace: it dies with the supervisor, and
            // when it ends the kernel ends every process in the namespace.
            // SAFETY: plain system call.
            check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
            if self.fresh_proc {
                // Where the kernel refuses (a container that masks parts of
                // its /proc), the command still runs, seeing the old one.
                // SAFETY: NUL-terminated strings, as mount(2) takes.
                let mounted = unsafe {
                    libc::mount(
                        c"proc".as_ptr(),
                        c"/proc".as_ptr(),
                        c"proc".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        std::ptr::null(),
                    )
                } == 0;
                if mounted && self.proc_writes != 0 {
                    self.allow_own_proc();
                }
            }
        }
        if let Some(ruleset) = &self.ruleset {
            // SAFETY: plain system calls on a ruleset descriptor we own.
            unsafe {
                check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
                let restricted =
                    libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32);
                if restricted != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        // Last, once the descriptors used above (the ruleset, the
        // directory) are done with: one of them may have the number a
        // passed descriptor goes to.
        for (fd, target) in &self.fds {
            // The source is a close-on-exec copy above 63; the copy at
            // `target` is not close-on-exec, so the command keeps it.
            // SAFETY: plain system call on descriptors we own.
            check(unsafe { libc::dup2(fd.as_raw_fd(), *target) })?;
        }
        if let Some(plan) = &self.plan {
            interp::run(plan);
        }
        Ok(())
    }
}

impl Setup {
    /// Adds a Landlock rule allowing writes beneath the `/proc` just
    /// mounted (this namespace's processes only). System calls only; a
    /// refusal leaves `/proc` read-only.
    fn allow_own_proc(&self) {
        let Some(ruleset) = &self.ruleset else {
            return;
        };
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let fd = unsafe {
            libc::open(
                c"/proc".as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return;
        }
        let _ = landlock::add_path_rule(ruleset, fd, self.proc_writes);
        // SAFETY: our own descriptor, opened above.
        unsafe { libc::close(fd) };
    }
}

/// The supervisor: closes every descriptor but `keep` (the proxy's
/// channel, whose end tells the host's proxy to stop; -1 for none), so the
/// output pipe and the spawn's error pipe belong to the command alone;
/// waits for PID 1 and exits the way it did.
fn supervise(pid: libc::pid_t, keep: libc::c_int) -> ! {
    // SAFETY: system calls only; `_exit` never returns.
    unsafe {
        // Never dumps core: it is a copy of the host's memory.
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        let closed = if keep < 0 {
            libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32)
        } else {
            let below = if keep > 0 {
                libc::syscall(libc::SYS_close_range, 0u32, (keep - 1) as u32, 0u32)
            } else {
                0
            };
            below | libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32)
        };
        if closed != 0 {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                limit.rlim_cur.min(1 << 20) as libc::c_int
            } else {
                65_536
            };
            for fd in (0..top).filter(|&fd| fd != keep) {
                libc::close(fd);
            }
        }
        let mut status: libc::c_int = 0;
        loop {
            let waited = libc::waitpid(pid, &mut status, 0);
            if waited == pid {
                break;
            }
            if waited < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        let signal = libc::WTERMSIG(status);
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
        libc::_exit(128 + signal);
    }
}

pub(super) fn prepare(
    launch: Launch,
    command: &mut std::process::Command,
) -> Result<Containment, SandboxError> {
    let support = support();
    let proc_writes = match &launch.sandbox {
        Some((policy, _)) if policy.own_proc => {
            let abi = support.landlock_abi.unwrap_or(1);
            FS_WRITE_FILE | if abi >= 3 { FS_TRUNCATE } else { 0 }
        }
        _ => 0,
    };
    let (namespaces, mounts, ruleset) = match &launch.sandbox {
        Some((policy, roots)) => {
            if let Some(why) = support.sandbox_unavailable(policy) {
                return Err(SandboxError::Unavailable(why));
            }
            let abi = support.landlock_abi.unwrap_or(1);
            let mut flags = isolation_flags();
            if policy.network {
                flags &= !libc::CLONE_NEWNET;
            }
            (
                flags,
                sandbox_mounts(policy, roots)?,
                Some(ruleset(policy, roots, abi)?),
            )
        }
        // Contained: a /proc of its own (mounted in a private mount
        // namespace, so the host's mounts are untouched).
        None if launch.contain && support.namespaces => {
            (containment_flags(), vec![Mount::private_root()], None)
        }
        None => (0, Vec::new(), None),
    };
    let proxied = matches!(&launch.sandbox, Some((policy, _)) if policy.proxied());
    if proxied {
        proxy_env(command);
    }
    let plan = match &launch.plan {
        Some(plan) => Some(
            interp::compile(plan, &environment(command, launch.env.as_ref()))
                .map_err(SandboxError::Setup)?,
        ),
        None => None,
    };
    // Last: nothing above can fail once the proxy's thread is started.
    let proxy = match &launch.sandbox {
        Some((policy, _)) if proxied => Some(start_proxy(policy)?),
        _ => None,
    };
    let setup = Setup {
        fds: launch.fds,
        cwd: launch.cwd.map(|(dir, _)| dir),
        namespaces,
        maps: Maps::new(),
        mounts,
        fresh_proc: namespaces & libc::CLONE_NEWNS != 0,
        proc_writes,
        proxy,
        loopback: matches!(&launch.sandbox,
            Some((policy, _)) if policy.loopback_servers && !policy.network),
        ruleset,
        host: std::process::id(),
        plan,
    };
    // SAFETY: `Setup::run` makes system calls only (no allocation, no
    // locks), as code between fork and exec must.
    unsafe { command.pre_exec(move || setup.run()) };
    Ok(if namespaces != 0 {
        Containment::PidNamespace
    } else {
        Containment::ProcessGroup
    })
}

/// Starts the host's side of the allowlist's proxy; returns what the
/// sandbox's first process needs to give the proxy its listener.
fn start_proxy(policy: &SandboxPolicy) -> Result<ProxyListener, SandboxError> {
    let allowlist = crate::rules::hosts::Allowlist::parse(&policy.hosts, &policy.forbidden_hosts)
        .map_err(SandboxError::Policy)?;
    let (host_end, sandbox_end) = std::os::unix::net::UnixStream::pair()?;
    proxy::start(OwnedFd::from(host_end), allowlist)?;
    Ok(ProxyListener::new(OwnedFd::from(sandbox_end)))
}

/// Points the command's environment at the allowlist's proxy.
fn proxy_env(command: &mut std::process::Command) {
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        command.env(name, super::PROXY_URL);
        command.env(name.to_ascii_lowercase(), super::PROXY_URL);
    }
    command.env_remove("NO_PROXY").env_remove("no_proxy");
}

/// The environment `command` would start with: what the policy passes on
/// of the host's, then what was set or removed on it (a value that is
/// not UTF-8 counts as removed).
fn environment(
    command: &std::process::Command,
    policy: Option<&super::EnvPolicy>,
) -> Vec<(String, String)> {
    let explicit: std::collections::BTreeMap<String, Option<String>> = command
        .get_envs()
        .filter_map(|(name, value)| {
            let value = value.and_then(|v| v.to_str()).map(str::to_owned);
            Some((name.to_str()?.to_owned(), value))
        })
        .collect();
    match policy {
        Some(policy) => policy.environment(&explicit),
        None => super::EnvPolicy::inherit_all().environment(&explicit),
    }
}

/// Marks this process non-dumpable (see `protect_process`).
pub(super) fn set_undumpable() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_DUMPABLE takes one integer argument and
    // only changes this process's dumpable flag.
    let done = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Raises `signal` in this process with its default action (which, for
/// the signals that end a process, ends it here).
pub(super) fn raise_default(signal: i32) {
    // SAFETY: resets one signal's action to the default and raises it;
    // no handler of this process's is involved.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}
