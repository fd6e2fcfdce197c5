//! Starting programs for tools: contained, so every process a command
//! starts ends with its call, and optionally sandboxed, so the kernel keeps
//! its writes inside the workspace and its network off.
//!
//! Used by the shell tool; anything else that runs programs for the model
//! (an MCP stdio server, a browser) can use the same [`Launch`]. A command
//! another program starts (an editor's terminal) gets the same [`Launch`]
//! through [`launcher`]: the editor starts this program in launcher mode.
//!
//! # What the kernel enforces (Linux)
//!
//! - **Containment.** The command runs as PID 1 of a new PID namespace
//!   (through an unprivileged user namespace when not root). When it exits
//!   or is killed, the kernel kills every process left in the namespace:
//!   `setsid` and double-forked daemons included. A small supervisor process
//!   sits between the host and the namespace and dies with the host
//!   (`PR_SET_PDEATHSIG`), taking the namespace with it. Where namespaces are
//!   not allowed, the command gets its own process group instead, which a
//!   `setsid` daemon can leave: [`Containment::ProcessGroup`].
//! - **Writes.** Landlock allows writes only beneath the policy's
//!   directories (the workspace roots, the temp directories, `/dev/null`);
//!   device nodes are never made; reading and running programs stay
//!   allowed everywhere. Each root's `.git` and `.kinet` (the policy's
//!   [`protected_names`](SandboxPolicy::protected_names)) are bind-mounted
//!   read-only in a mount namespace, so nothing written there (a hook, a
//!   config with an fsmonitor, the agent's own session store) runs or
//!   counts later outside the sandbox.
//! - **Privileges.** Always in a new user namespace, so even when the host
//!   runs as root the command holds no capability over the host (no
//!   devices, modules or mounts outside); its own session, so no
//!   controlling terminal.
//! - **Network.** Off by default: a new network namespace with nothing in
//!   it (not even a working loopback; abstract Unix sockets are per network
//!   namespace too), plus Landlock's TCP rules where the kernel has them
//!   (ABI 4+). With a network allowlist
//!   ([`SandboxPolicy::allow_hosts`]) the namespace gets a loopback with
//!   kinet's proxy on it, which reaches the allowed hosts alone (`403` for
//!   the rest); direct connections still fail. Path-named sockets that lead out (the session and system
//!   D-Bus, `/run/user`, Docker, X11, `$SSH_AUTH_SOCK`) are hidden under an
//!   empty tmpfs or `/dev/null`; a socket elsewhere stays reachable.
//! - **Processes.** Contained and sandboxed commands alike get a `/proc`
//!   of their own PID namespace, mounted over the host's in a private
//!   mount namespace: they see their own processes and nothing of the
//!   host's, so they cannot read the agent's environment (API keys) or
//!   command line from `/proc/<pid>/environ`, or signal or trace it, with
//!   or without [`protect_process`], as root or not. Where the kernel
//!   refuses a new `/proc` (a container that masks parts of its own), the
//!   command runs seeing the host's, and [`protect_process`] is what keeps
//!   the agent's files closed to it. A contained command running as root
//!   (no user namespace, so it keeps root's power over files) could
//!   unmount its `/proc`; the sandbox's user namespace and Landlock forbid
//!   that.
//! - **Environment.** [`Launch::env`] passes on only the host variables an
//!   [`EnvPolicy`] allows; the shell tool uses [`EnvPolicy::core`] (the
//!   [`CORE_VARIABLES`]: `PATH`, `HOME`, locale, toolchain homes, no
//!   secrets) unless the host widens it.
//!
//! What a contained but unsandboxed command still can do: read every file
//! its user can (the agent's config and `.env` files included: keep
//! secrets out of the workspace, or sandbox), write where its user can,
//! use the network, and reach sockets on the filesystem (the session bus,
//! the ssh agent). The sandbox is what closes those.
//!
//! Other systems get process-group containment and no sandbox;
//! [`support`] says what this machine has.

mod env;
pub mod launcher;
#[cfg(target_os = "linux")]
mod linux;

use std::path::PathBuf;

pub use crate::command::{PROGRAM_VARIABLES, is_program_variable};
pub use crate::rules::HostPattern;
pub use env::{CORE_VARIABLES, EnvPolicy};

/// The allowlist proxy's port, written once for both constants below.
macro_rules! proxy_port {
    () => {
        3128
    };
}

/// Where a sandbox with a network allowlist finds its proxy: the value of
/// `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` (and their lowercase forms)
/// in the command's environment.
pub const PROXY_URL: &str = concat!("http://127.0.0.1:", proxy_port!());

/// The proxy's port on the sandbox's loopback.
#[cfg(target_os = "linux")]
const PROXY_PORT: u16 = proxy_port!();

/// What a sandboxed command may do. Reading is always allowed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxPolicy {
    writable_roots: bool,
    writable: Vec<PathBuf>,
    hidden: Vec<PathBuf>,
    reachable: Vec<PathBuf>,
    temp: bool,
    network: bool,
    hosts: Vec<String>,
    forbidden_hosts: Vec<String>,
    own_proc: bool,
    #[serde(default)]
    loopback_servers: bool,
    protected: Vec<String>,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        Self::workspace_write()
    }
}

impl SandboxPolicy {
    /// Writes allowed in the call's workspace roots (its cwd when there are
    /// none) and the temp directories; network off.
    pub fn workspace_write() -> Self {
        Self {
            writable_roots: true,
            writable: Vec::new(),
            hidden: Vec::new(),
            reachable: Vec::new(),
            temp: true,
            network: false,
            hosts: Vec::new(),
            forbidden_hosts: Vec::new(),
            own_proc: false,
            loopback_servers: false,
            protected: crate::confine::PROTECTED.map(String::from).to_vec(),
        }
    }

    /// Writes allowed nowhere but `/dev/null`; network off.
    pub fn read_only() -> Self {
        Self {
            writable_roots: false,
            writable: Vec::new(),
            hidden: Vec::new(),
            reachable: Vec::new(),
            temp: false,
            network: false,
            hosts: Vec::new(),
            forbidden_hosts: Vec::new(),
            own_proc: false,
            loopback_servers: false,
            protected: crate::confine::PROTECTED.map(String::from).to_vec(),
        }
    }

    /// Also allows writes beneath `dir` (a cache, a build directory).
    pub fn writable(mut self, dir: impl Into<PathBuf>) -> Self {
        self.writable.push(dir.into());
        self
    }

    /// Whether writes are allowed in the temp directories (`$TMPDIR`,
    /// `/tmp`, `/var/tmp`, `/dev/shm`); default: yes for
    /// [`workspace_write`](Self::workspace_write).
    pub fn temp_dirs(mut self, allow: bool) -> Self {
        self.temp = allow;
        self
    }

    /// Also hides `path` from the command (an empty directory or
    /// `/dev/null` in its place), beside the sockets hidden by default.
    pub fn hidden(mut self, path: impl Into<PathBuf>) -> Self {
        self.hidden.push(path.into());
        self
    }

    /// The paths hidden besides the default sockets.
    pub fn hidden_paths(&self) -> &[PathBuf] {
        &self.hidden
    }

    /// The directories kept read-only at the top of each workspace root,
    /// by name (a bind mount made read-only in the sandbox's mount
    /// namespace). Default `.git` and `.kinet`: a hook or config planted
    /// there would run later outside the sandbox. An empty list protects
    /// nothing.
    ///
    /// Only names that exist when the command starts are protected: in a
    /// root that has no `.git`, a command may make one (git then treats
    /// the root as a repository of the command's making; its hooks run
    /// only for git commands run there later). Give such a root an empty
    /// `.git` directory, or sandbox those commands too.
    pub fn protected_names(mut self, names: Vec<String>) -> Self {
        self.protected = names;
        self
    }

    /// Gives the command a private, empty, writable directory at `dir`
    /// (an existing directory): a tmpfs mounted there in the sandbox alone,
    /// so what the command makes there (files, listening sockets) cannot
    /// be reached from outside, and is gone when the command ends. Writes
    /// there are allowed when `dir` is beneath a writable directory.
    pub fn private_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.hidden.push(dir.into());
        self
    }

    /// Keeps one of the sockets hidden by default reachable (the X11
    /// directory `/tmp/.X11-unix` for a program with a window, say).
    pub fn reachable(mut self, path: impl Into<PathBuf>) -> Self {
        self.reachable.push(path.into());
        self
    }

    /// Lets the command write the `/proc` files of its own processes
    /// (`uid_map`, `oom_score_adj`: a browser's own sandbox writes them);
    /// default: no. Only the sandbox's own `/proc` is writable, never the
    /// host's: where a `/proc` of its own cannot be mounted, nothing in
    /// `/proc` is.
    pub fn own_proc_writable(mut self, allow: bool) -> Self {
        self.own_proc = allow;
        self
    }

    /// Lets the command listen on TCP ports of its own loopback and
    /// connect to them (a program that runs a server for itself, as some
    /// coding agents do); default: no. Its network namespace stays its
    /// own, so nothing outside can reach those ports and no connection
    /// leaves through them; only Landlock's port rules, kinet's second
    /// line, are lifted. Where no network namespace can be made, a
    /// command with this setting does not start.
    pub fn loopback_servers(mut self, allow: bool) -> Self {
        self.loopback_servers = allow;
        self
    }

    /// Allows the whole network (default: off). Then the allowlist of
    /// [`allow_hosts`](Self::allow_hosts) does not apply.
    pub fn allow_network(mut self, allow: bool) -> Self {
        self.network = allow;
        self
    }

    /// Whether the whole network is allowed.
    pub fn network(&self) -> bool {
        self.network
    }

    /// Lets the command reach these hosts, and no others, through a proxy
    /// kinet runs for it (default: none, so no network at all). Each entry
    /// is a [`HostPattern`]: `crates.io`, `*.crates.io` (subdomains),
    /// `localhost:8080`, an IP address. Checked when the command is
    /// prepared: a bad entry fails it, naming the entry.
    ///
    /// The command keeps its network namespace of its own, now with a
    /// loopback on which the proxy listens at [`PROXY_URL`]; its
    /// environment says so (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and
    /// the lowercase forms; `NO_PROXY` removed), which curl, git, pip,
    /// npm and cargo follow. The proxy serves `CONNECT host:port`
    /// tunnels (HTTPS) and plain HTTP requests, one per connection; any
    /// other destination gets `403 Forbidden` with the allowlist in its
    /// text. A direct connection to any address fails, as without the
    /// allowlist (no route, and Landlock allows connecting to the proxy's
    /// port alone where the kernel has its network rules).
    ///
    /// The proxy checks the name the command asks for; what travels
    /// inside a `CONNECT` tunnel (TLS to another name served by the same
    /// address, as some CDNs allow) it cannot see.
    pub fn allow_hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.hosts.extend(hosts.into_iter().map(Into::into));
        self
    }

    /// Keeps these hosts out even where [`allow_hosts`](Self::allow_hosts)
    /// lets them in (`gist.github.com` beside `*.github.com`).
    pub fn deny_hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.forbidden_hosts
            .extend(hosts.into_iter().map(Into::into));
        self
    }

    /// The network allowlist's entries.
    pub fn allowed_hosts(&self) -> &[String] {
        &self.hosts
    }

    /// Adds a rules file's host rules ([`crate::rules`]): its `allow`
    /// hosts to the network allowlist, its `deny` hosts to those kept
    /// out.
    pub fn with_host_rules(self, rules: &crate::rules::Rules) -> Self {
        let of = |decision: crate::rules::Decision| {
            rules
                .hosts
                .iter()
                .filter(move |rule| rule.decision == decision)
                .map(|rule| rule.name.clone())
        };
        self.allow_hosts(of(crate::rules::Decision::Allow))
            .deny_hosts(of(crate::rules::Decision::Deny))
    }

    /// Whether the command gets the allowlist's proxy.
    fn proxied(&self) -> bool {
        !self.network && !self.hosts.is_empty()
    }

    /// The directories writes are allowed beneath, for a call with these
    /// workspace roots.
    pub fn writable_dirs(&self, roots: &[PathBuf]) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if self.writable_roots {
            dirs.extend(roots.iter().cloned());
        }
        if self.temp {
            dirs.extend(crate::confine::temp_dirs());
        }
        dirs.extend(self.writable.iter().cloned());
        dirs.sort();
        dirs.dedup();
        dirs
    }
}

/// What this machine can enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Support {
    /// The Landlock ABI version, when the kernel has Landlock enabled.
    pub landlock_abi: Option<u32>,
    /// Whether a PID namespace can be made for containment (as root, or
    /// through an unprivileged user namespace).
    pub namespaces: bool,
    /// Whether the sandbox's user, mount, PID and network namespaces can
    /// be made together.
    pub isolation: bool,
}

impl Support {
    /// Why a sandbox cannot be enforced here, when it cannot.
    pub fn sandbox_unavailable(&self, policy: &SandboxPolicy) -> Option<String> {
        if self.landlock_abi.is_none() {
            return Some(
                "this kernel has no Landlock (Linux 5.13+ with Landlock enabled), so writes cannot be confined"
                    .into(),
            );
        }
        if !self.isolation {
            let _ = policy;
            return Some(
                "this system refuses unprivileged user, mount and network namespaces, so the network cannot be turned off and `.git` cannot be kept read-only"
                    .into(),
            );
        }
        None
    }
}

/// Keeps this process's secrets from other processes of the same user:
/// commands the model runs without the sandbox, MCP servers, anything else
/// the user runs. The process is marked non-dumpable (`PR_SET_DUMPABLE` 0),
/// so the kernel refuses them its `/proc/<pid>/environ` (API keys in the
/// environment), `/proc/<pid>/mem` and `ptrace`.
///
/// Call it once, early, in a host that hands a model a shell. It is
/// process-wide and lasts for the process's life: no core dumps, and a
/// debugger of the same user cannot attach. Commands are unaffected (the
/// mark resets when they start a program), and the sandbox and containment
/// work as before (they lift it only while writing a new user namespace's
/// maps). Processes of root, holding
/// `CAP_SYS_PTRACE`, can still read a root agent. Returns whether it was
/// applied: `false` on systems other than Linux.
pub fn protect_process() -> std::io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        linux::set_undumpable()?;
        Ok(true)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(false)
    }
}

pub use crate::confine::opened_path;

/// Whether this process runs as root (effective user id 0). A contained
/// command of root keeps root's power over files; Chrome's own sandbox
/// refuses root. `false` on systems other than Linux.
pub fn running_as_root() -> bool {
    #[cfg(target_os = "linux")]
    {
        rustix::process::geteuid().is_root()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// What this machine can enforce, probed once.
pub fn support() -> Support {
    #[cfg(target_os = "linux")]
    {
        linux::support()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Support {
            landlock_abi: None,
            namespaces: false,
            isolation: false,
        }
    }
}

/// How a command's processes are held together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Containment {
    /// A PID namespace: every process ends with the call.
    PidNamespace,
    /// A process group: killed together, but a `setsid` daemon can leave.
    ProcessGroup,
}

/// Why a command could not be prepared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The sandbox cannot be enforced on this machine.
    #[error("the sandbox is not available: {0}")]
    Unavailable(String),
    /// Setting up the sandbox failed.
    #[error("cannot set up the sandbox: {0}")]
    Setup(#[from] std::io::Error),
    /// The policy has an entry that means nothing (a bad host pattern).
    #[error("the sandbox policy is not valid: {0}")]
    Policy(String),
}

/// How to start one command: in a directory opened beforehand (so a
/// symlink swapped in after the check cannot move it), contained, and
/// optionally sandboxed.
///
/// The supervisor dies with the thread that spawned it
/// (`PR_SET_PDEATHSIG` follows threads): spawn from a thread that lives as
/// long as the command should (an async task on the runtime's worker is
/// fine; a short-lived `spawn_blocking` thread is not).
#[derive(Debug, Default)]
pub struct Launch {
    cwd: Option<(std::fs::File, PathBuf)>,
    sandbox: Option<(SandboxPolicy, Vec<PathBuf>)>,
    contain: bool,
    env: Option<EnvPolicy>,
    plan: Option<crate::command::Plan>,
    #[cfg(target_os = "linux")]
    fds: Vec<(std::os::fd::OwnedFd, i32)>,
}

impl Launch {
    /// Contained, not sandboxed, in the command's own directory.
    pub fn new() -> Self {
        Self {
            cwd: None,
            sandbox: None,
            contain: true,
            env: None,
            plan: None,
            #[cfg(target_os = "linux")]
            fds: Vec::new(),
        }
    }

    /// Gives the command `fd` as its descriptor number `target` (3 and up;
    /// Chrome's DevTools pipe is 3 and 4). The descriptor is moved out of
    /// the way of the low numbers here, so any two can be passed; the
    /// caller's copy closes when the prepared command is dropped, which
    /// must happen once the command has started (so that the pipe's other
    /// end sees the command's end alone).
    ///
    /// Spawn while the numbers `0..=target` are taken in this process (a
    /// runtime's descriptors usually take them): a free low number could be
    /// given to the spawn's own error pipe, which the command would then
    /// overwrite.
    ///
    /// Implemented on Linux; elsewhere it fails with `Unsupported`.
    #[cfg(unix)]
    pub fn pass_fd(mut self, fd: std::os::fd::OwnedFd, target: i32) -> std::io::Result<Self> {
        if target < 3 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "descriptors 0 to 2 are the command's standard streams",
            ));
        }
        #[cfg(target_os = "linux")]
        {
            let high = rustix::io::fcntl_dupfd_cloexec(&fd, 64)?;
            self.fds.push((high, target));
            Ok(self)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (&mut self, fd);
            Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "passing descriptors to a command is implemented on Linux only",
            ))
        }
    }

    /// Passes on only the host's variables `policy` allows (default: the
    /// whole environment; the shell tool uses [`EnvPolicy::core`]).
    pub fn env(mut self, policy: EnvPolicy) -> Self {
        self.env = Some(policy);
        self
    }

    /// Runs in this directory: on Linux the opened `dir` (for example from
    /// [`WorkspacePath::open_dir`](crate::tool::workspace::WorkspacePath::open_dir)),
    /// entered with `fchdir`; elsewhere `path`.
    pub fn cwd(mut self, dir: std::fs::File, path: impl Into<PathBuf>) -> Self {
        self.cwd = Some((dir, path.into()));
        self
    }

    /// Sandboxes the command; `roots` are the call's workspace roots.
    pub fn sandbox(mut self, policy: SandboxPolicy, roots: Vec<PathBuf>) -> Self {
        self.sandbox = Some((policy, roots));
        self
    }

    /// Whether the command will be sandboxed.
    pub fn is_sandboxed(&self) -> bool {
        self.sandbox.is_some()
    }

    /// Runs `plan` instead of the command's program (default: none): the
    /// command's first process starts each of the plan's programs with
    /// `execve` of its resolved path, wires its pipes, lists and
    /// redirections itself, and exits with the plan's status (a program's,
    /// or 128 + the signal that ended it); nothing is read by a shell. The
    /// command's environment (after [`env`](Self::env) and what was set on
    /// it) is each program's, with its assignments on top. Linux only:
    /// elsewhere [`prepare`](Self::prepare) fails.
    pub fn plan(mut self, plan: crate::command::Plan) -> Self {
        self.plan = Some(plan);
        self
    }

    /// Turns containment off (default: on): the command may leave daemons.
    pub fn contain(mut self, contain: bool) -> Self {
        self.contain = contain;
        self
    }

    /// Sets `command` up to start this way. Kill the process group of the
    /// started child (its pid) to stop everything; with a PID namespace,
    /// killing the child alone is enough.
    pub fn prepare(self, command: &mut std::process::Command) -> Result<Containment, SandboxError> {
        if let Some(env) = &self.env {
            env.apply(command);
        }
        #[cfg(target_os = "linux")]
        {
            linux::prepare(self, command)
        }
        #[cfg(not(target_os = "linux"))]
        {
            if self.plan.is_some() {
                return Err(SandboxError::Unavailable(
                    "kinet runs a planned command line itself on Linux only".into(),
                ));
            }
            if let Some((policy, _)) = &self.sandbox {
                return Err(SandboxError::Unavailable(
                    support()
                        .sandbox_unavailable(policy)
                        .unwrap_or_else(|| "not on this system".into()),
                ));
            }
            if let Some((_, path)) = &self.cwd {
                command.current_dir(path);
            }
            #[cfg(unix)]
            {
                use std::os::unix::process::CommandExt;
                command.process_group(0);
            }
            Ok(Containment::ProcessGroup)
        }
    }
}
