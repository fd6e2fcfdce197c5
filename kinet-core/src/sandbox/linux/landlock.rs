//! Landlock through raw system calls: the ABI's constants, the ruleset
//! built in the parent, and the one call the child may also make.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use super::super::SandboxPolicy;

// Landlock's ABI (linux/landlock.h); the libc crate does not carry it.
const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;
const RULE_NET_PORT: libc::c_int = 2;

const FS_EXECUTE: u64 = 1 << 0;
pub(super) const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
const FS_REMOVE_DIR: u64 = 1 << 4;
const FS_REMOVE_FILE: u64 = 1 << 5;
const FS_MAKE_CHAR: u64 = 1 << 6;
const FS_MAKE_DIR: u64 = 1 << 7;
const FS_MAKE_REG: u64 = 1 << 8;
const FS_MAKE_SOCK: u64 = 1 << 9;
const FS_MAKE_FIFO: u64 = 1 << 10;
const FS_MAKE_BLOCK: u64 = 1 << 11;
const FS_MAKE_SYM: u64 = 1 << 12;
const FS_REFER: u64 = 1 << 13;
pub(super) const FS_TRUNCATE: u64 = 1 << 14;
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
}

#[repr(C, packed)]
struct NetPortAttr {
    allowed_access: u64,
    port: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version, or `None` when Landlock is off or absent.
pub(super) fn landlock_abi() -> Option<u32> {
    // SAFETY: the documented version query: no attribute, size 0.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(abi).ok().filter(|&abi| abi >= 1)
}

/// The write rights this ABI knows: all of them are handled (denied unless
/// a rule allows them); reading and executing are not handled.
fn write_rights(abi: u32) -> u64 {
    let mut rights = FS_WRITE_FILE
        | FS_REMOVE_DIR
        | FS_REMOVE_FILE
        | FS_MAKE_CHAR
        | FS_MAKE_DIR
        | FS_MAKE_REG
        | FS_MAKE_SOCK
        | FS_MAKE_FIFO
        | FS_MAKE_BLOCK
        | FS_MAKE_SYM;
    if abi >= 2 {
        rights |= FS_REFER;
    }
    if abi >= 3 {
        rights |= FS_TRUNCATE;
    }
    rights
}

/// Builds the ruleset in the parent; the child only applies it.
pub(super) fn ruleset(policy: &SandboxPolicy, roots: &[PathBuf], abi: u32) -> io::Result<OwnedFd> {
    let handled_fs = write_rights(abi);
    // With servers on its own loopback, the network namespace alone
    // keeps the command in.
    let handled_net = if !policy.network && !policy.loopback_servers && abi >= 4 {
        NET_BIND_TCP | NET_CONNECT_TCP
    } else {
        0
    };
    let attr = RulesetAttr {
        handled_access_fs: handled_fs,
        handled_access_net: handled_net,
    };
    let size = if abi >= 4 {
        std::mem::size_of::<RulesetAttr>()
    } else {
        std::mem::size_of::<u64>()
    };
    // SAFETY: `attr` is a valid ruleset attribute of at least `size` bytes.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0u32,
        )
    };
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("bad ruleset descriptor"))?;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd) };
    let file_rights = FS_WRITE_FILE | if abi >= 3 { FS_TRUNCATE } else { 0 };
    // Device nodes are never made, even in writable directories.
    let dir_rights = handled_fs & !(FS_MAKE_CHAR | FS_MAKE_BLOCK);
    let devices = ["/dev/null", "/dev/zero", "/dev/full"].map(PathBuf::from);
    for path in policy.writable_dirs(roots).iter().chain(&devices) {
        // Missing directories (no /dev/shm, say) are skipped.
        let Ok(target) = std::fs::File::open(path) else {
            continue;
        };
        let Ok(metadata) = target.metadata() else {
            continue;
        };
        let allowed = if metadata.is_dir() {
            dir_rights
        } else {
            file_rights
        };
        add_path_rule(&ruleset, target.as_raw_fd(), allowed)?;
    }
    if handled_net != 0 && policy.proxied() {
        // The allowlist's proxy is the one port a command may connect to.
        let rule = NetPortAttr {
            allowed_access: NET_CONNECT_TCP,
            port: u64::from(super::super::PROXY_PORT),
        };
        add_rule(&ruleset, RULE_NET_PORT, &rule)?;
    }
    let _ = (FS_EXECUTE, FS_READ_FILE, FS_READ_DIR);
    Ok(ruleset)
}

/// Allows `access` beneath the directory open at `fd`. System calls only
/// (also used between fork and exec).
pub(super) fn add_path_rule(ruleset: &OwnedFd, fd: libc::c_int, access: u64) -> io::Result<()> {
    let rule = PathBeneathAttr {
        allowed_access: access,
        parent_fd: fd,
    };
    add_rule(ruleset, RULE_PATH_BENEATH, &rule)
}

/// Adds one rule of `kind` (its attribute structure is `rule`). A system
/// call only.
fn add_rule<T>(ruleset: &OwnedFd, kind: libc::c_int, rule: &T) -> io::Result<()> {
    // SAFETY: callers pass the attribute structure that `kind` takes
    // (`PathBeneathAttr` with an open descriptor, `NetPortAttr`).
    let added = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            kind,
            rule as *const T,
            0u32,
        )
    };
    if added != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
