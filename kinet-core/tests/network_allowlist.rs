//! A sandbox with a network allowlist: through kinet's proxy in the
//! sandbox's network namespace, the allowed server answers (plain HTTP and
//! a CONNECT tunnel), the other gets 403 naming the allowlist, direct
//! connections fail, malformed requests are refused, and the proxy and its
//! connections end with the command.
#![cfg(target_os = "linux")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use kinet_core::sandbox::{Launch, PROXY_URL, SandboxError, SandboxPolicy, support};

/// A small HTTP server on the host's loopback: answers `200` with its
/// name, the request line and the Host header it got; `/hold` keeps the
/// connection open without answering.
fn server(name: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer(name, stream));
        }
    });
    port
}

fn answer(name: &str, mut stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    let _ = reader.read_line(&mut request_line);
    let mut host = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if line.to_ascii_lowercase().starts_with("host:") {
            host = line.trim().to_owned();
        }
    }
    if request_line.contains("/hold") {
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let body = format!("server {name}; {}; {host}\n", request_line.trim());
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Runs `script` with bash in a sandbox with this policy.
fn run(policy: &SandboxPolicy, script: &str) -> (bool, String) {
    let dir = std::env::temp_dir();
    let mut command = Command::new("/bin/bash");
    command.args(["-c", script]);
    Launch::new()
        .sandbox(policy.clone(), vec![dir])
        .prepare(&mut command)
        .unwrap();
    let output = command.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// Threads of this process that belong to a sandbox's proxy.
fn proxy_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.starts_with("kinet-sandbox"))
        })
        .count()
}

fn wait_for_no_proxy() {
    let deadline = Instant::now() + Duration::from_secs(5);
    while proxy_threads() > 0 {
        assert!(
            Instant::now() < deadline,
            "{} proxy threads outlived their command",
            proxy_threads()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends raw bytes to the proxy from inside the sandbox and prints the
/// answer.
fn raw(request: &str) -> String {
    format!("exec 3<>/dev/tcp/127.0.0.1/3128 || exit 9; printf '{request}' >&3; timeout 10 cat <&3")
}

#[test]
fn the_allowlist_lets_one_server_in_and_keeps_the_rest_out() {
    let support = support();
    if support.landlock_abi.is_none() || !support.isolation {
        eprintln!(
            "SKIPPED: this machine cannot sandbox (Landlock {:?}, namespaces {}); the network allowlist test did not run",
            support.landlock_abi, support.isolation
        );
        return;
    }
    let allowed = server("A");
    let other = server("B");
    let policy = SandboxPolicy::workspace_write().allow_hosts([format!("localhost:{allowed}")]);

    // Plain HTTP in absolute form: forwarded in origin form, Host set from
    // the address (not from the Host header the command sent).
    let (ok, text) = run(
        &policy,
        &raw(&format!(
            "GET http://localhost:{allowed}/hello?x=1 HTTP/1.1\\r\\nHost: evil.example\\r\\nProxy-Authorization: x\\r\\n\\r\\n"
        )),
    );
    assert!(ok, "{text}");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains(&format!(
            "server A; GET /hello?x=1 HTTP/1.1; Host: localhost:{allowed}"
        )),
        "{text}"
    );

    // The other server: 403, naming the allowlist.
    let (_, text) = run(
        &policy,
        &raw(&format!(
            "GET http://localhost:{other}/ HTTP/1.1\\r\\nHost: localhost:{other}\\r\\n\\r\\n"
        )),
    );
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(text.contains(&format!("localhost:{allowed}")), "{text}");
    assert!(!text.contains("server B"), "{text}");

    // A CONNECT tunnel to the allowed one, and to the other.
    let (_, text) = run(
        &policy,
        &raw(&format!(
            "CONNECT localhost:{allowed} HTTP/1.1\\r\\nHost: localhost:{allowed}\\r\\n\\r\\nGET /tunnel HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n"
        )),
    );
    assert!(
        text.starts_with("HTTP/1.1 200 Connection established"),
        "{text}"
    );
    assert!(text.contains("server A; GET /tunnel HTTP/1.1"), "{text}");
    let (_, text) = run(
        &policy,
        &raw(&format!("CONNECT 127.0.0.1:{other} HTTP/1.1\\r\\n\\r\\n")),
    );
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");

    // Direct connections fail: to the servers' address, to an outside
    // address, to the proxy's port on another address.
    for target in [
        format!("127.0.0.1/{allowed}"),
        format!("127.0.0.1/{other}"),
        "192.0.2.1/80".to_owned(),
        "localhost/22".to_owned(),
    ] {
        let (ok, text) = run(
            &policy,
            &format!("timeout 5 bash -c 'exec 3<>/dev/tcp/{target}' && echo CONNECTED"),
        );
        assert!(!ok && !text.contains("CONNECTED"), "{target}: {text}");
    }

    // Malformed and unsupported requests are refused; the proxy keeps
    // serving.
    for (request, status) in [
        ("hello\\r\\n\\r\\n", "400"),
        ("GET /relative HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n", "400"),
        ("GET https://localhost/ HTTP/1.1\\r\\n\\r\\n", "400"),
        ("CONNECT localhost HTTP/1.1\\r\\n\\r\\n", "400"),
        (
            "POST http://localhost:1/ HTTP/1.1\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n",
            "411",
        ),
    ] {
        let (_, text) = run(&policy, &raw(request));
        assert!(
            text.starts_with(&format!("HTTP/1.1 {status}")),
            "{request}: {text}"
        );
    }
    let (_, text) = run(
        &policy,
        "exec 3<>/dev/tcp/127.0.0.1/3128; head -c 70000 /dev/zero | tr '\\0' a >&3; timeout 10 cat <&3",
    );
    assert!(text.starts_with("HTTP/1.1 431"), "{text}");

    // What clients do with the environment the sandbox sets.
    let (_, text) = run(&policy, "echo $HTTPS_PROXY $http_proxy ${NO_PROXY-unset}");
    assert_eq!(text.trim(), format!("{PROXY_URL} {PROXY_URL} unset"));
    if std::path::Path::new("/usr/bin/curl").exists() {
        let (ok, text) = run(
            &policy,
            &format!("curl -sS -m 10 http://localhost:{allowed}/c"),
        );
        assert!(ok && text.contains("server A; GET /c HTTP/1.1"), "{text}");
        let (ok, text) = run(
            &policy,
            &format!("curl -sS -m 10 -p http://localhost:{allowed}/t"),
        );
        assert!(ok && text.contains("server A; GET /t HTTP/1.1"), "{text}");
        let (_, text) = run(
            &policy,
            &format!("curl -sS -m 10 -o /dev/null -w '%{{http_code}}' http://localhost:{other}/"),
        );
        assert_eq!(text.trim(), "403");
    } else {
        eprintln!("SKIPPED: curl is missing; the curl part of the allowlist test did not run");
    }

    // A connection held open by the far side ends with the command.
    let (_, _) = run(
        &policy,
        &raw(&format!(
            "GET http://localhost:{allowed}/hold HTTP/1.1\\r\\n\\r\\n"
        ))
        .replace("timeout 10", "timeout 1"),
    );
    wait_for_no_proxy();

    // Without an allowlist there is no proxy and no network.
    let (ok, text) = run(
        &SandboxPolicy::workspace_write(),
        "exec 3<>/dev/tcp/127.0.0.1/3128 && echo CONNECTED; echo ${HTTP_PROXY-none}",
    );
    assert!(
        !text.contains("CONNECTED") && text.contains("none"),
        "{ok} {text}"
    );

    // A bad entry fails the command before it starts, naming the entry.
    let mut command = Command::new("/bin/true");
    let refused = Launch::new()
        .sandbox(
            SandboxPolicy::workspace_write().allow_hosts(["http://example.com"]),
            vec![std::env::temp_dir()],
        )
        .prepare(&mut command);
    match refused {
        Err(SandboxError::Policy(why)) => assert!(why.contains("`http://example.com`"), "{why}"),
        other => panic!("{other:?}"),
    }
    wait_for_no_proxy();
}

#[test]
fn host_rules_make_the_allowlist() {
    let rules = kinet_core::rules::Rules::from_toml(
        "[[host]]\nname = \"*.crates.io\"\ndecision = \"allow\"\n\n[[host]]\nname = \"crates.io\"\ndecision = \"allow\"\n\n[[host]]\nname = \"evil.crates.io\"\ndecision = \"forbid\"\n",
    )
    .unwrap();
    let policy = SandboxPolicy::workspace_write().with_host_rules(&rules);
    assert_eq!(policy.allowed_hosts(), ["*.crates.io", "crates.io"]);
    assert_ne!(
        policy,
        SandboxPolicy::workspace_write().allow_hosts(["*.crates.io", "crates.io"])
    );
}

/// A server and its client in one sandboxed command, on port `port` of
/// the sandbox's loopback; prints `served` when the client got its
/// answer, else why not.
fn own_server_script(port: u16) -> String {
    format!(
        r#"exec python3 - <<'PY'
import socket, threading
try:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", {port}))
    server.listen(1)
    def serve():
        connection, _ = server.accept()
        connection.sendall(b"served")
        connection.close()
    threading.Thread(target=serve, daemon=True).start()
    client = socket.create_connection(("127.0.0.1", {port}), timeout=5)
    print(client.recv(16).decode())
except OSError as error:
    print("refused:", error)
PY"#
    )
}

#[test]
fn loopback_servers_stay_inside_the_sandbox() {
    let support = support();
    if support.landlock_abi.is_none() || !support.isolation {
        eprintln!("SKIPPED: this machine cannot sandbox; the loopback server test did not run");
        return;
    }
    if Command::new("python3").arg("-V").output().is_err() {
        eprintln!("SKIPPED: no python3; the loopback server test did not run");
        return;
    }
    // A server of the host's on the same port: the command must not
    // reach it, and its own server must not collide with it.
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    host.set_nonblocking(true).unwrap();

    // Without the setting: no server of its own (Landlock's port rules,
    // or no loopback at all in its namespace).
    let (_, text) = run(&SandboxPolicy::read_only(), &own_server_script(port));
    assert!(text.contains("refused"), "{text}");

    // With it, alone and beside the allowlist's proxy: its server answers
    // it, inside its namespace.
    for policy in [
        SandboxPolicy::read_only().loopback_servers(true),
        SandboxPolicy::read_only()
            .loopback_servers(true)
            .allow_hosts(["localhost:1"]),
    ] {
        let (ok, text) = run(&policy, &own_server_script(port));
        assert!(ok && text.trim() == "served", "{policy:?}: {text}");
    }
    assert!(
        host.accept().is_err(),
        "nothing reached the host's server on the same port"
    );
    // And the host's loopback stays out of reach: a connection to the
    // host's server from inside fails.
    let (_, text) = run(
        &SandboxPolicy::read_only().loopback_servers(true),
        &format!(
            "exec python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=3); print(\"reached\")' 2>&1 || true"
        ),
    );
    assert!(!text.contains("reached"), "{text}");
    assert!(host.accept().is_err());
}
