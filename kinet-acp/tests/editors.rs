//! A kinet agent driven by the ACP SDKs' own clients (the TypeScript SDK,
//! npm `@agentclientprotocol/sdk`, and the Python SDK, PyPI
//! `agent-client-protocol`), and by hand with malformed and out-of-order
//! messages.
//!
//! No test harness: this binary is also the agent the clients launch
//! (with `KINET_ACP_STAGE` set it serves ACP on stdio, and libtest's
//! output would corrupt the stream).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    clippy::print_stdout
)]

use kinet_core::builder::Workspace;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use kinet_acp::AcpServer;
use kinet_core::sandbox::SandboxPolicy;
use kinet_core::sandbox::launcher::Launcher;
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::{Agent, ApprovalPolicy};
use kinet_tools::shell::ShellTool;
use serde_json::{Value, json};

/// What the shell call runs in the editor's terminal: its PID (1 in its
/// own PID namespace), a write inside the project, a write outside it.
const SHELL_COMMAND: &str = "echo pid=$$; echo inside > made.txt && echo wrote-inside; \
     (echo outside > \"$HOME/.kinet-acp-terminal-escape\") 2>/dev/null \
     && echo wrote-outside || echo outside-refused";

/// A command the client cancels: were it not killed, it would leave
/// `late.txt` behind.
const LATE_COMMAND: &str = "sleep 2; echo late > late.txt # kinet-acp-late-marker";

/// The model of the first process: read, a command, edit (approved), edit
/// (rejected), then a long command that the client cancels.
fn first_script() -> Vec<ScriptedTurn> {
    vec![
        ScriptedTurn::new().tool_call("r1", "read_file", json!({"path": "notes.txt"})),
        ScriptedTurn::new().tool_call("s1", "shell", json!({"command": SHELL_COMMAND})),
        ScriptedTurn::new().tool_call(
            "s2",
            "shell",
            json!({"command": LATE_COMMAND.replace("late.txt", "late2.txt"), "timeout_ms": 300}),
        ),
        ScriptedTurn::text("The notes say hello."),
        ScriptedTurn::new().tool_call(
            "e1",
            "edit_file",
            json!({"path": "notes.txt", "old_string": "hello", "new_string": "goodbye"}),
        ),
        ScriptedTurn::text("Edited."),
        ScriptedTurn::new().tool_call(
            "e2",
            "edit_file",
            json!({"path": "notes.txt", "old_string": "goodbye", "new_string": "farewell"}),
        ),
        ScriptedTurn::text("Left as it is."),
        ScriptedTurn::new().tool_call("w1", "shell", json!({"command": LATE_COMMAND})),
        ScriptedTurn::text("never reached"),
    ]
}

/// Serves ACP on stdio with a scripted model: the agent the clients run.
fn stage(script: &str, store: &Path, launcher: Launcher) {
    let turns = match script {
        "first" => first_script(),
        _ => vec![ScriptedTurn::text("Still here.")],
    };
    let model = Arc::new(ScriptedProvider::new(turns));
    let store = kinet_memory::SqliteSessionStore::open(store).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let shell = ShellTool::default().sandboxed(SandboxPolicy::workspace_write());
        let tools = kinet_tools::default_tools().with(shell);
        AcpServer::new(move |cwd| {
            Agent::builder(model.clone())
                .tools(tools.clone())
                .workspace(Workspace::new().root(cwd).cwd(cwd))
                .policy(ApprovalPolicy::ask())
                .build()
        })
        .store(Arc::new(store))
        .terminals(launcher)
        .serve_stdio()
        .await
        .unwrap();
    });
}

/// A project for the agent: `notes.txt` saying hello.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
    dir
}

/// The command that starts this binary as the agent.
fn agent_command(script: &str, store: &Path) -> Vec<String> {
    vec![
        std::env::current_exe().unwrap().display().to_string(),
        format!("--stage={script}"),
        format!("--store={}", store.display()),
    ]
}

/// Runs a client script (`node client.mjs` or `python client.py`) against
/// this binary; the JSON it prints.
fn run_client(program: &Path, script: &Path, project: &Path, args: &[String]) -> Value {
    let output = Command::new(program)
        .arg(script)
        .arg(project)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{} failed: {text}",
        script.display()
    );
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{} printed no result ({e}): {text}", script.display()))
}

/// The scenario, as each client reports it.
fn check_scenario(client: &str, project: &Path, first: &Value, second: &Value) {
    eprintln!("{client}: {first}\n{client}: {second}");
    let stops: Vec<&str> = first["stops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(
        stops,
        ["end_turn", "end_turn", "end_turn", "cancelled"],
        "{client}"
    );
    // The file was read through the editor (its buffer, not the disk),
    // by its absolute path, and the result reached the editor.
    assert!(
        first["readResult"]
            .as_str()
            .unwrap()
            .contains("hello from the editor"),
        "{client}: {first}"
    );
    let notes = project.join("notes.txt").canonicalize().unwrap();
    let read_paths: Vec<std::path::PathBuf> = first["reads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Path::new(p.as_str().unwrap()).canonicalize().unwrap())
        .collect();
    // Read by read_file, by the approval's diff of each edit, and by the
    // approved edit for its base text: the editor's copy each time.
    assert_eq!(read_paths, vec![notes.clone(); 4], "{client}: {first}");
    // The command ran in the editor's terminal (shown with the call, then
    // released), started as this program in launcher mode, confined: PID 1
    // of its own namespace, its write inside the project made, the one
    // outside refused.
    let terminals = first["terminals"].as_array().unwrap();
    assert_eq!(terminals.len(), 3, "{client}: {first}");
    assert_eq!(
        Path::new(terminals[0]["command"].as_str().unwrap()),
        std::env::current_exe().unwrap(),
        "{client}"
    );
    assert_eq!(terminals[0]["args"][0], json!("--kinet-launch"), "{client}");
    assert_eq!(
        first["shownTerminals"],
        json!(["term-1", "term-1"]),
        "{client}"
    );
    assert_eq!(
        first["openTerminals"],
        json!(0),
        "{client}: not released: {}",
        first["openIds"]
    );
    let shell = first["shellResult"].as_str().unwrap();
    for expected in ["pid=1", "wrote-inside", "outside-refused", "[exit code: 0]"] {
        assert!(shell.contains(expected), "{client}: {expected}: {shell}");
    }
    assert!(project.join("made.txt").exists(), "{client}");
    let escaped = Path::new(&std::env::var("HOME").unwrap()).join(".kinet-acp-terminal-escape");
    assert!(!escaped.exists(), "{client}: the sandbox let a write out");
    // One approval allowed, one rejected: the file changed once, in the
    // editor's buffer (its unsaved text was the base), not on disk.
    assert_eq!(first["permissions"], json!(["e1", "e2"]), "{client}");
    let writes = first["writes"].as_array().unwrap();
    assert_eq!(writes.len(), 1, "{client}: {first}");
    assert_eq!(
        writes[0]["content"],
        json!("goodbye from the editor\n"),
        "{client}"
    );
    assert_eq!(
        Path::new(writes[0]["path"].as_str().unwrap()),
        notes,
        "{client}: the editor writes the checked, resolved path"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("notes.txt")).unwrap(),
        "hello\n",
        "{client}: the disk is the editor's business"
    );
    assert_eq!(
        first["diff"],
        json!({"oldText": "hello", "newText": "goodbye", "absolute": true}),
        "{client}"
    );
    // The command out of time, the rejected edit and the cancelled call
    // failed; the commands were killed with their terminals and have no
    // later effect.
    assert_eq!(first["failed"], json!(["s2", "e2", "w1"]), "{client}");
    assert!(
        processes_with("kinet-acp-late-marker").is_empty(),
        "{client}: the cancelled command still runs"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(!project.join("late.txt").exists(), "{client}");
    assert!(!project.join("late2.txt").exists(), "{client}");
    assert!(
        first["texts"]
            .as_str()
            .unwrap()
            .contains("The notes say hello.")
    );
    // The second process loaded the session: its history came back as
    // updates (four user messages), and it answers.
    assert_eq!(
        second["replayedUserMessages"],
        json!(4),
        "{client}: {second}"
    );
    assert_eq!(second["stop"], json!("end_turn"), "{client}");
    assert!(second["texts"].as_str().unwrap().contains("Still here."));
}

/// The processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            (pid != std::process::id() && String::from_utf8_lossy(&cmdline).contains(marker))
                .then_some(pid)
        })
        .collect()
}

/// The scenario with one client: a first process, then a second that
/// loads the session the first saved.
fn scenario(client: &str, program: &Path, script: &Path) {
    let project = project();
    let store = project.path().join(".sessions.db");
    let first = run_client(
        program,
        script,
        project.path(),
        &[vec!["first".to_owned()], agent_command("first", &store)].concat(),
    );
    let session = first["sessionId"].as_str().unwrap().to_owned();
    let second = run_client(
        program,
        script,
        project.path(),
        &[
            vec![format!("load:{session}")],
            agent_command("second", &store),
        ]
        .concat(),
    );
    check_scenario(client, project.path(), &first, &second);
}

/// The directory of the client scripts and their packages.
fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

fn typescript_client() {
    let dir = clients_dir();
    let node =
        std::env::var_os("KINET_ACP_NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from);
    let installed = dir.join("node_modules/@agentclientprotocol/sdk").is_dir()
        && Command::new(&node).arg("--version").output().is_ok();
    if !installed {
        assert!(
            std::env::var_os("KINET_REQUIRE_ACP").is_none(),
            "the ACP TypeScript SDK is required here (KINET_REQUIRE_ACP) but not installed"
        );
        eprintln!(
            "\n!!! SKIPPED: ACP TypeScript client: run `npm ci --prefix kinet-acp/tests/clients` (.ci/setup does) !!!\n"
        );
        return;
    }
    scenario("typescript", &node, &dir.join("client.mjs"));
}

fn python_client() {
    let python = std::env::var_os("KINET_ACP_PYTHON").map_or_else(
        || PathBuf::from("/var/tmp/kinet-acp-py/bin/python"),
        PathBuf::from,
    );
    let installed = Command::new(&python)
        .args(["-c", "import acp"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        assert!(
            std::env::var_os("KINET_REQUIRE_ACP").is_none(),
            "the ACP Python SDK is required here (KINET_REQUIRE_ACP) but not installed"
        );
        eprintln!(
            "\n!!! SKIPPED: ACP Python client: no `agent-client-protocol` in {} (.ci/setup installs it) !!!\n",
            python.display()
        );
        return;
    }
    scenario("python", &python, &clients_dir().join("client.py"));
}

/// Malformed and out-of-order messages get protocol errors, and the
/// server goes on serving.
fn malformed_messages() {
    let project = project();
    let store = project.path().join(".sessions.db");
    let command = agent_command("second", &store);
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut exchange = |line: &str| -> Value {
        writeln!(input, "{line}").unwrap();
        input.flush().unwrap();
        let mut answer = String::new();
        output.read_line(&mut answer).unwrap();
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
    };
    let cwd = project.path().display().to_string();
    // Not JSON.
    let answer = exchange("{this is not json");
    assert_eq!(answer["error"]["code"], json!(-32700), "{answer}");
    // A prompt before initialize: out of order.
    let answer = exchange(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
                "params": {"sessionId": "nope", "prompt": [{"type": "text", "text": "hi"}]}})
        .to_string(),
    );
    assert_eq!(answer["error"]["code"], json!(-32600), "{answer}");
    // Parameters of the wrong shape.
    let answer = exchange(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"protocolVersion": "one"}})
            .to_string(),
    );
    assert_eq!(answer["error"]["code"], json!(-32602), "{answer}");
    // A relative working directory.
    let answer = exchange(
        &json!({"jsonrpc": "2.0", "id": 4, "method": "initialize",
                "params": {"protocolVersion": 1, "clientCapabilities": {}}})
        .to_string(),
    );
    assert_eq!(answer["result"]["protocolVersion"], json!(1), "{answer}");
    // An unknown method.
    let answer = exchange(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "session/fly", "params": {}}).to_string(),
    );
    assert_eq!(answer["error"]["code"], json!(-32601), "{answer}");
    // A prompt for a session that does not exist.
    let answer = exchange(
        &json!({"jsonrpc": "2.0", "id": 8, "method": "session/prompt",
                "params": {"sessionId": "nope", "prompt": [{"type": "text", "text": "hi"}]}})
        .to_string(),
    );
    assert_eq!(answer["error"]["code"], json!(-32002), "{answer}");
    let answer = exchange(
        &json!({"jsonrpc": "2.0", "id": 5, "method": "session/new",
                "params": {"cwd": "relative/dir", "mcpServers": []}})
        .to_string(),
    );
    assert_eq!(answer["error"]["code"], json!(-32602), "{answer}");
    // Loading a session that does not exist.
    let answer = exchange(
        &json!({"jsonrpc": "2.0", "id": 6, "method": "session/load",
                "params": {"sessionId": "acp-missing", "cwd": cwd, "mcpServers": []}})
        .to_string(),
    );
    assert_eq!(answer["error"]["code"], json!(-32002), "{answer}");
    // And it still serves.
    let answer = exchange(
        &json!({"jsonrpc": "2.0", "id": 7, "method": "session/new",
                "params": {"cwd": cwd, "mcpServers": []}})
        .to_string(),
    );
    assert!(answer["result"]["sessionId"].is_string(), "{answer}");
    drop(input);
    let status = child.wait().unwrap();
    assert!(status.success(), "the server ended with {status}");
}

fn main() {
    // Started by an editor's terminal in launcher mode, this runs the
    // command and exits.
    let launcher = kinet_core::sandbox::launcher::launcher().unwrap();
    let args: Vec<String> = std::env::args().collect();
    if let Some(script) = args.iter().find_map(|a| a.strip_prefix("--stage=")) {
        let store = args
            .iter()
            .find_map(|a| a.strip_prefix("--store="))
            .unwrap();
        stage(script, Path::new(store), launcher);
        return;
    }
    // libtest's filter and flags: run everything.
    for (name, test) in [
        (
            "malformed and out-of-order messages",
            malformed_messages as fn(),
        ),
        ("the TypeScript SDK's client", typescript_client),
        ("the Python SDK's client", python_client),
    ] {
        eprintln!("test {name} ...");
        test();
        eprintln!("test {name} ... ok");
    }
}
