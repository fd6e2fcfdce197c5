//! The dedicated Chrome opens no port and writes nowhere but its profile,
//! its downloads directory and temp:
//!
//! - while a session runs, no socket of Chrome's process tree listens on
//!   TCP or TCP6, and the one Unix socket Chrome always listens on (its
//!   process singleton's) cannot be reached from outside Chrome's sandbox
//!   (read from `/proc/<pid>/net` of Chrome's network namespace);
//! - a download lands in the downloads directory, and one sent elsewhere
//!   (the page's download directory changed over DevTools) does not land,
//!   while without the confinement the same download does (so the check
//!   is live).
#![cfg(all(feature = "browser", target_os = "linux"))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use chromiumoxide::cdp::browser_protocol::browser::{
    SetDownloadBehaviorBehavior, SetDownloadBehaviorParams,
};
use kinet_computer::browser::{BrowserConfig, BrowserSession};
use serde_json::json;

mod support;
use support::{browser_with, text};

/// Every process whose ancestry reaches `top` (`top` included).
fn tree_of(top: u32) -> Vec<u32> {
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let after = stat.rsplit_once(") ")?.1;
        after.split_whitespace().nth(1)?.parse().ok()
    };
    let all: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    all.into_iter()
        .filter(|&pid| {
            let mut at = pid;
            for _ in 0..64 {
                if at == top {
                    return true;
                }
                match parent_of(at) {
                    Some(parent) if parent > 1 => at = parent,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

/// The socket inodes `pid` holds.
fn sockets_of(pid: u32) -> HashSet<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    fds.filter_map(|fd| {
        let link = std::fs::read_link(fd.ok()?.path()).ok()?;
        let link = link.to_str()?;
        link.strip_prefix("socket:[")?
            .strip_suffix(']')?
            .parse()
            .ok()
    })
    .collect()
}

/// Listening sockets in the network namespace of `pid`: TCP and TCP6
/// inodes, and Unix inodes with their paths (`@name` for abstract ones).
fn listening(pid: u32) -> (HashSet<u64>, Vec<(u64, String)>) {
    let mut tcp = HashSet::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // st (column 4) 0A is LISTEN; inode is column 10.
            if fields.get(3) == Some(&"0A") {
                tcp.extend(fields.get(9).and_then(|i| i.parse::<u64>().ok()));
            }
        }
    }
    let mut unix = Vec::new();
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap();
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Flags (column 4) with __SO_ACCEPTCON (0x10000) set: listening.
        let flags = fields
            .get(3)
            .and_then(|f| u64::from_str_radix(f, 16).ok())
            .unwrap_or(0);
        if flags & 0x10000 != 0
            && let Some(inode) = fields.get(6).and_then(|i| i.parse::<u64>().ok())
        {
            unix.push((inode, fields.get(7).unwrap_or(&"").to_string()));
        }
    }
    (tcp, unix)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_socket_of_chromes_tree_can_be_connected_to() {
    let Some((tools, session)) = browser_with(BrowserConfig::default()) else {
        return;
    };
    // A page loaded, a second tab, a snapshot: the browser is fully up.
    text(
        &tools,
        "browser_navigate",
        json!({"url": "data:text/html,<title>up</title><p>hello"}),
    )
    .await;
    text(&tools, "browser_snapshot", json!({})).await;
    let top = session.pid().await.unwrap();
    let tree = tree_of(top);
    assert!(tree.len() >= 3, "Chrome's tree: {tree:?}");
    let mut held = HashSet::new();
    for &pid in &tree {
        held.extend(sockets_of(pid));
    }
    let (tcp, unix) = listening(top);
    let tcp: Vec<_> = held.intersection(&tcp).collect();
    assert!(tcp.is_empty(), "Chrome listens on TCP sockets {tcp:?}");
    // Chrome's process singleton always listens on a Unix socket; it must
    // be out of every other process's reach: a path inside Chrome's own
    // mount namespace, which does not exist out here. No abstract socket
    // (reachable by name from the whole network namespace) may listen.
    for (inode, path) in &unix {
        if !held.contains(inode) {
            continue;
        }
        assert!(
            path.starts_with('/'),
            "Chrome listens on an abstract or unnamed socket {path:?}"
        );
        assert!(
            std::os::unix::net::UnixStream::connect(path).is_err(),
            "Chrome's socket {path} can be reached from outside"
        );
    }
    session.shutdown().await;
}

/// A page whose link downloads `name` (a data URL), clicked from script.
fn downloader(name: &str) -> String {
    format!(
        "data:text/html,<title>dl</title><a id=a download=\"{name}\" href=\"data:text/plain,payload-{name}\">get</a>\
         <script>document.getElementById('a').click()</script>"
    )
}

async fn wait_for(path: &Path, limit: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if path.exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Downloads `name` once into the configured directory and once into
/// `elsewhere`; returns whether each landed.
async fn download_twice(
    session: &BrowserSession,
    tools: &kinet_core::Toolset,
    downloads: &Path,
    elsewhere: &Path,
) -> (bool, bool) {
    text(
        tools,
        "browser_navigate",
        json!({"url": downloader("inside.txt")}),
    )
    .await;
    let inside = wait_for(&downloads.join("inside.txt"), Duration::from_secs(10)).await;
    let page = session.active_page().await.unwrap();
    page.execute(
        SetDownloadBehaviorParams::builder()
            .behavior(SetDownloadBehaviorBehavior::Allow)
            .download_path(elsewhere.display().to_string())
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    text(
        tools,
        "browser_navigate",
        json!({"url": downloader("outside.txt")}),
    )
    .await;
    let outside = wait_for(&elsewhere.join("outside.txt"), Duration::from_secs(5)).await;
    (inside, outside)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chrome_writes_only_its_profile_downloads_and_temp() {
    let place = tempfile::tempdir().unwrap();
    let downloads = place.path().join("downloads");
    let elsewhere = place.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let config = BrowserConfig {
        downloads_dir: Some(downloads.clone()),
        ..BrowserConfig::default()
    };
    let support = kinet_core::sandbox::support();
    if support.landlock_abi.is_none() || !support.isolation {
        eprintln!(
            "SKIPPED: this kernel cannot confine Chrome's writes (no Landlock or user namespaces)"
        );
        return;
    }
    let Some((tools, session)) = browser_with(config.clone()) else {
        return;
    };
    let (inside, outside) = download_twice(&session, &tools, &downloads, &elsewhere).await;
    session.shutdown().await;
    assert!(
        inside,
        "the download into the downloads directory did not land"
    );
    assert!(
        !outside,
        "a download landed outside the profile and downloads"
    );

    // Without the confinement the same download lands: the check is live.
    let free = tempfile::tempdir().unwrap();
    let (free_downloads, free_elsewhere) = (free.path().join("d"), free.path().join("e"));
    std::fs::create_dir_all(&free_elsewhere).unwrap();
    let Some((tools, session)) = browser_with(BrowserConfig {
        downloads_dir: Some(free_downloads.clone()),
        confine_writes: false,
        ..BrowserConfig::default()
    }) else {
        return;
    };
    let (inside, outside) =
        download_twice(&session, &tools, &free_downloads, &free_elsewhere).await;
    session.shutdown().await;
    assert!(
        inside && outside,
        "unconfined downloads: inside {inside}, outside {outside}"
    );
}

/// As an ordinary user Chrome keeps its own sandbox (no `--no-sandbox`)
/// inside kinet's: the two tests above pass again as `nobody` (run when
/// the tests run as root).
#[test]
fn the_same_holds_for_an_ordinary_user_with_chromes_own_sandbox() {
    if !kinet_core::sandbox::running_as_root() || std::env::var_os("KINET_AS_NOBODY").is_some() {
        return;
    }
    if support::browser_with(BrowserConfig::default()).is_none() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(home.path(), Some(65534), Some(65534)).unwrap();
    use std::os::unix::process::CommandExt;
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--test-threads=1", "chrome_", "no_socket_"])
        .env("KINET_AS_NOBODY", "1")
        .env("HOME", home.path())
        .env("TMPDIR", home.path())
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "as nobody: {said}");
    assert!(said.contains("2 passed"), "as nobody: {said}");
}
