//! A throwaway PostgreSQL cluster on a loopback port for tests and
//! benchmarks: `initdb` into a temp dir (as `nobody` when running as root,
//! which PostgreSQL refuses), the server started behind a small shell that
//! stops it and removes the directory when this process's end of its stdin
//! closes, so the server never outlives the test process.
//!
//! Binaries: `$KINET_PG_BIN`, else the `pgserver` wheel `.ci/setup`
//! unpacks into `/var/tmp/kinet-pgserver`, else `pg_config --bindir`. They
//! must have pgvector. With `KINET_REQUIRE_POSTGRES` set (as `.ci/setup`
//! does) a missing server fails the tests instead of skipping them.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr
)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A running cluster; the server stops when the process exits.
pub struct PgServer {
    pub port: u16,
    pub bin: PathBuf,
    _guard: std::sync::Mutex<Child>,
}

impl PgServer {
    /// A URL for database `db` as the superuser `postgres`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

/// Where PostgreSQL's binaries are, if anywhere.
pub fn find_bin() -> Option<PathBuf> {
    let has = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os("KINET_PG_BIN").map(PathBuf::from) {
        return has(&dir).then_some(dir);
    }
    let wheel = PathBuf::from("/var/tmp/kinet-pgserver/pgserver/pginstall/bin");
    if has(&wheel) {
        return Some(wheel);
    }
    // The system's PostgreSQL, when it has pgvector (Debian's own
    // packages do not).
    let ask = |what: &str| {
        let output = Command::new("pg_config").arg(what).output().ok()?;
        Some(PathBuf::from(
            String::from_utf8_lossy(&output.stdout).trim(),
        ))
    };
    let dir = ask("--bindir")?;
    let vector = ask("--sharedir")?.join("extension/vector.control");
    (has(&dir) && vector.is_file()).then_some(dir)
}

/// The process-wide server, started on first use; `None` (said loudly)
/// when there are no binaries or it cannot start.
pub fn server() -> Option<&'static PgServer> {
    static SERVER: OnceLock<Option<PgServer>> = OnceLock::new();
    SERVER
        .get_or_init(|| match start() {
            Ok(server) => Some(server),
            Err(why) => {
                assert!(
                    std::env::var_os("KINET_REQUIRE_POSTGRES").is_none(),
                    "PostgreSQL is required here (KINET_REQUIRE_POSTGRES) but: {why}"
                );
                eprintln!(
                    "\n!!! SKIPPED: PostgreSQL tests: {why}. Run .ci/setup (it installs PostgreSQL 16 \
                     with pgvector from PyPI's pgserver wheel) or set KINET_PG_BIN to a bin directory \
                     with initdb and postgres. !!!\n"
                );
                None
            }
        })
        .as_ref()
}

fn start() -> Result<PgServer, String> {
    let bin = find_bin().ok_or("no PostgreSQL binaries with pgvector found")?;
    start_with(bin, &[], "")
}

/// PostgreSQL binaries built with TLS (the pgserver wheel's are not):
/// `$KINET_PG_TLS_BIN`, else Debian's newest under `/usr/lib/postgresql`
/// (`.ci/setup` installs the `postgresql` package).
pub fn find_tls_bin() -> Option<PathBuf> {
    let has = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os("KINET_PG_TLS_BIN").map(PathBuf::from) {
        return has(&dir).then_some(dir);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
        .filter(|dir| has(dir))
        .collect();
    versions.sort();
    versions.pop()
}

/// A cluster of `bin` with `files` written into its data directory (owned
/// by the server's user, mode 0600, e.g. a certificate and its key) and
/// `conf` appended to its `postgresql.conf` and `hba` replacing its
/// `pg_hba.conf` when not empty. Stops when the process exits.
pub fn start_tls(
    bin: PathBuf,
    files: &[(&str, &[u8])],
    conf: &str,
    hba: &str,
) -> Result<PgServer, String> {
    let mut files: Vec<(&str, &[u8])> = files.to_vec();
    if !hba.is_empty() {
        files.push(("pg_hba.conf", hba.as_bytes()));
    }
    start_with(bin, &files, conf)
}

fn start_with(bin: PathBuf, files: &[(&str, &[u8])], conf: &str) -> Result<PgServer, String> {
    let dir = tempfile::Builder::new()
        .prefix("kinet-pg")
        .tempdir()
        .map_err(|e| e.to_string())?
        .keep();
    // The effective uid, second on the `Uid:` line.
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?.to_owned();
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false);
    if root {
        // PostgreSQL will not run as root: the cluster belongs to nobody.
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).map_err(|e| e.to_string())?;
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| e.to_string())?;
    let as_owner = |command: &mut Command| {
        if root {
            command.uid(65534).gid(65534);
        }
    };
    let data = dir.join("data");
    let mut initdb = Command::new(bin.join("initdb"));
    initdb
        .args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
            "-D",
        ])
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    as_owner(&mut initdb);
    let output = initdb.output().map_err(|e| format!("initdb: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    for (name, bytes) in files {
        let path = data.join(name);
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| e.to_string())?;
        if root {
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).map_err(|e| e.to_string())?;
        }
    }
    if !conf.is_empty() {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .map_err(|e| e.to_string())?;
        writeln!(file, "\n{conf}").map_err(|e| e.to_string())?;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    // The shell starts the server, waits for its stdin to close (this
    // process exiting, however it exits), then stops the server and
    // removes the cluster.
    let mut watchdog = Command::new("sh");
    watchdog
        .arg("-c")
        .arg(
            r#""$0" -D "$1/data" -p "$2" -k "$1" -c listen_addresses=127.0.0.1 -c fsync=off \
               -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 \
               -c shared_buffers=256MB -c maintenance_work_mem=512MB >"$1/log" 2>&1 &
               pid=$!
               read _ignored
               kill -INT "$pid"; wait "$pid"; rm -rf "$1""#,
        )
        .arg(bin.join("postgres"))
        .arg(&dir)
        .arg(port.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    as_owner(&mut watchdog);
    let child = watchdog
        .spawn()
        .map_err(|e| format!("starting postgres: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = Command::new(bin.join("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ready {
            break;
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
            return Err(format!("postgres did not start within 30 s: {log}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(PgServer {
        port,
        bin,
        _guard: std::sync::Mutex::new(child),
    })
}

/// Creates a new, empty database and returns its name.
pub async fn fresh_database(server: &PgServer) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "kinet_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let (client, connection) =
        tokio_postgres::connect(&server.url("postgres"), tokio_postgres::NoTls)
            .await
            .expect("connect to the test cluster");
    let task = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create a database");
    drop(client);
    let _ = task.await;
    name
}
