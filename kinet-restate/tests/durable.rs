//! Durable runs against a real Restate server (npm
//! `@restatedev/restate-server`): kinet service processes killed at
//! random points, approvals across restarts, one reply per conversation,
//! and a three-node cluster that loses a node.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use kinet_core::deferred::Decisions;
use kinet_core::{Agent, ApprovalPolicy, Message};
use kinet_restate::{AgentObject, Client, Reply};
use support::{Counting, Effect, Node, Service, Stage, free_port, lines, register, restate_server};

/// The kinet service, in a process of its own (started by the tests).
#[test]
#[ignore = "run by the tests below, in processes of their own"]
fn service_stage() {
    let Ok(port) = std::env::var("KINET_RESTATE_STAGE_PORT") else {
        return;
    };
    let port: u16 = port.parse().unwrap();
    let dir = std::path::PathBuf::from(std::env::var("KINET_RESTATE_STAGE_DIR").unwrap());
    let calls = std::env::var("KINET_RESTATE_STAGE_CALLS")
        .unwrap()
        .parse()
        .unwrap();
    let pause: u64 = std::env::var("KINET_RESTATE_STAGE_PAUSE_MS")
        .unwrap()
        .parse()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let object = AgentObject::new(Counting { calls }, move |model| {
            let effect = |mutating| Effect {
                dir: dir.clone(),
                pause: Duration::from_millis(pause),
                mutating,
            };
            Agent::builder(model)
                .tool(effect(false))
                .tool(effect(true))
                .policy(ApprovalPolicy::ask())
        });
        object
            .serve_on(listener, std::future::pending::<()>())
            .await;
    });
}

/// A single-node server and a service process, registered.
async fn single(dir: &Path, stage: Stage) -> Option<(Node, Service, Client)> {
    let binary = restate_server()?;
    let base = dir.join("restate");
    std::fs::create_dir_all(&base).unwrap();
    let mut node = Node::new(&binary, &base, 0, &[]);
    node.spawn();
    node.ready().await;
    let service = Service::start(free_port(), dir, stage);
    register(&node.admin, &service.uri()).await;
    let client = Client::new(&node.ingress);
    Some((node, service, client))
}

/// The messages of a conversation, as JSON.
async fn transcript(client: &Client, key: &str) -> Vec<serde_json::Value> {
    let session = client.session(key).await.unwrap().unwrap();
    session
        .conversation
        .messages
        .iter()
        .map(|m: &Message| serde_json::to_value(m).unwrap())
        .collect()
}

/// The reply of a sent run; when it does not come, the end of the Restate
/// node's log (a journal mismatch, a failing handler) in the panic.
async fn attach(client: &Client, invocation: &str, node: &Node) -> Reply {
    match tokio::time::timeout(Duration::from_secs(180), client.attach(invocation)).await {
        Ok(reply) => reply.unwrap(),
        Err(_) => panic!(
            "invocation {invocation} did not finish; the Restate node's log ends:\n{}",
            node.log_tail(6000)
        ),
    }
}

/// A small deterministic random sequence (no clock in the tests' logic).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_finish_after_kills_at_random_points_with_each_effect_once() {
    let dir = tempfile::tempdir().unwrap();
    let stage = Stage {
        calls: 10,
        pause_ms: 30,
    };
    let Some((node, mut service, client)) = single(dir.path(), stage).await else {
        return;
    };
    // The uninterrupted run.
    let reference = client.prompt("reference", "go", None).await.unwrap();
    assert_eq!(reference.stop, "completed", "{reference:?}");
    assert_eq!(reference.text.as_deref(), Some("saw 10 results"));
    let expected = transcript(&client, "reference").await;
    assert_eq!(expected.len(), 22, "{expected:#?}");

    // Runs while the service process is SIGKILLed 60 times, at random
    // moments: between steps, inside a model call's step, inside a tool
    // after its effect.
    let seed = std::env::var("KINET_RESTATE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261206);
    eprintln!("seed {seed} (KINET_RESTATE_SEED)");
    let mut random = Lcg(seed);
    let keys: Vec<String> = (0..6).map(|i| format!("run{i}")).collect();
    let mut invocations = Vec::new();
    let mut kills = 0;
    for (i, key) in keys.iter().enumerate() {
        invocations.push(client.send(key, "go", Some(key)).await.unwrap());
        // Later runs start while earlier ones are being retried.
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(10 + random.below(150))).await;
            service.kill();
            kills += 1;
            service.spawn();
        }
        eprintln!("{} runs started, {kills} kills", i + 1);
    }
    assert!(kills >= 50);
    for (key, invocation) in keys.iter().zip(&invocations) {
        let reply = attach(&client, invocation, &node).await;
        assert_eq!(reply.stop, "completed", "{key}: {reply:?}");
        assert_eq!(transcript(&client, key).await, expected, "{key}");
    }
    // Each effect happened once per call, though some calls ran again.
    let effects = lines(&dir.path().join("effects.log"));
    let attempts = lines(&dir.path().join("attempts.log"));
    for key in keys.iter().chain(std::iter::once(&"reference".to_owned())) {
        let prefix = format!("restate/{key}/");
        let mine: Vec<&String> = effects.iter().filter(|l| l.starts_with(&prefix)).collect();
        assert_eq!(mine.len(), 10, "{key}: {mine:?}");
        let unique: std::collections::BTreeSet<&&String> = mine.iter().collect();
        assert_eq!(unique.len(), 10, "{key}: {mine:?}");
    }
    // Some kills landed inside a tool, after its effect and before its
    // result was recorded: those calls ran again and did nothing twice.
    assert!(
        attempts.len() > effects.len(),
        "no kill landed inside a tool after its effect; try another KINET_RESTATE_SEED"
    );
    eprintln!(
        "{kills} kills; {} effects, {} attempts (the difference: calls run again after a kill, \
         recognised by their idempotency key)",
        effects.len(),
        attempts.len()
    );
}

/// Waits until conversation `key` waits for approvals; the pending calls.
async fn wait_pending(client: &Client, key: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(waiting)) = client.pending(key).await {
            return waiting.pending.iter().map(|p| p.call_id.clone()).collect();
        }
        assert!(Instant::now() < deadline, "{key} never waited for approval");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_approval_survives_restarts_and_ends_when_resolved_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let stage = Stage {
        calls: 2,
        pause_ms: 1,
    };
    let Some((mut node, mut service, client)) = single(dir.path(), stage).await else {
        return;
    };
    let invocation = client.send("ask", "ask first", None).await.unwrap();
    assert_eq!(wait_pending(&client, "ask").await, ["t1c0"]);
    assert!(lines(&dir.path().join("effects.log")).is_empty());

    // The service and the Restate server restart; the run still waits.
    service.kill();
    node.stop();
    node.spawn();
    node.ready().await;
    service.spawn();
    assert_eq!(wait_pending(&client, "ask").await, ["t1c0"]);

    // Another process answers: here, curl against the ingress.
    let waiting = client.pending("ask").await.unwrap().unwrap();
    let status = std::process::Command::new("curl")
        .args(["-sf", "-X", "POST", "-H", "content-type: application/json"])
        .arg("--data")
        .arg(serde_json::to_string(&Decisions::new().allow("t1c0")).unwrap())
        .arg(format!(
            "{}/restate/awakeables/{}/resolve",
            node.ingress, waiting.awakeable
        ))
        .status();
    match status {
        Ok(status) => assert!(status.success(), "curl failed"),
        // No curl here: the same call from this process.
        Err(_) => client
            .decide("ask", &Decisions::new().allow("t1c0"))
            .await
            .unwrap(),
    }
    // The second call asks in turn; it is denied.
    let deadline = Instant::now() + Duration::from_secs(60);
    while wait_pending(&client, "ask").await != ["t1c1"] {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    service.kill();
    service.spawn();
    client
        .decide("ask", &Decisions::new().deny("t1c1", "not now"))
        .await
        .unwrap();
    let reply = attach(&client, &invocation, &node).await;
    assert_eq!(reply.stop, "completed", "{reply:?}");
    assert_eq!(reply.text.as_deref(), Some("saw 2 results"));
    assert_eq!(lines(&dir.path().join("effects.log")), ["restate/ask/t1c0"]);
    assert!(lines(&dir.path().join("attempts.log")).len() == 1);
    assert!(client.pending("ask").await.unwrap().is_none());
    let session = client.session("ask").await.unwrap().unwrap();
    let denied = session.conversation.messages.iter().any(|m| {
        matches!(m, Message::Tool { tool_call_id, is_error: true, .. } if tool_call_id == "t1c1")
            && m.text().contains("not now")
    });
    assert!(denied, "{:#?}", session.conversation.messages);
}

/// The (start, end) of each call whose key starts with `prefix`.
fn spans(dir: &Path, prefix: &str) -> Vec<(u128, u128)> {
    lines(&dir.join("spans.log"))
        .iter()
        .filter(|l| l.starts_with(prefix))
        .map(|l| {
            let parts: Vec<&str> = l.split(' ').collect();
            (parts[1].parse().unwrap(), parts[2].parse().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_reply_per_conversation_at_a_time_and_conversations_in_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let stage = Stage {
        calls: 1,
        pause_ms: 400,
    };
    let Some((_node, _service, client)) = single(dir.path(), stage).await else {
        return;
    };
    let (a1, a2, b) = tokio::join!(
        client.prompt("a", "first", None),
        client.prompt("a", "second", None),
        client.prompt("b", "other", None),
    );
    for reply in [a1.unwrap(), a2.unwrap(), b.unwrap()] {
        assert_eq!(reply.stop, "completed", "{reply:?}");
    }
    let a = spans(dir.path(), "restate/a/");
    let b = spans(dir.path(), "restate/b/");
    assert_eq!((a.len(), b.len()), (2, 1));
    let (first, second) = if a[0].0 < a[1].0 {
        (a[0], a[1])
    } else {
        (a[1], a[0])
    };
    assert!(first.1 <= second.0, "a's replies overlapped: {a:?}");
    let overlaps = |x: (u128, u128)| x.0 < b[0].1 && b[0].0 < x.1;
    assert!(
        overlaps(first) || overlaps(second),
        "b waited for a: {a:?} {b:?}"
    );
    // The conversation holds both turns, one after the other.
    let session = client.session("a").await.unwrap().unwrap();
    let users = session
        .conversation
        .messages
        .iter()
        .filter(|m| matches!(m, Message::User { .. }))
        .count();
    assert_eq!((users, session.conversation.messages.len()), (2, 8));

    // The same conversation goes on in plain kinet, from Restate's view
    // of it: the calls keep the conversation's idempotency keys.
    let (mut conversation, _) = session.resume(&[]).unwrap();
    conversation.push_user("third");
    let plain = Agent::builder(Counting { calls: 1 })
        .tool(Effect {
            dir: dir.path().to_owned(),
            pause: Duration::ZERO,
            mutating: false,
        })
        .build()
        .run_to_completion(conversation)
        .await;
    assert!(plain.stop.is_completed(), "{}", plain.stop);
    assert_eq!(plain.conversation.messages.len(), 12);
    assert!(lines(&dir.path().join("effects.log")).contains(&"restate/a/t3c0".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_invocation_ends_as_a_cancelled_run() {
    let dir = tempfile::tempdir().unwrap();
    let stage = Stage {
        calls: 10,
        pause_ms: 200,
    };
    let Some((node, _service, client)) = single(dir.path(), stage).await else {
        return;
    };
    let invocation = client.send("stop", "go", None).await.unwrap();
    let effects = || lines(&dir.path().join("effects.log")).len();
    let deadline = Instant::now() + Duration::from_secs(30);
    while effects() < 2 {
        assert!(Instant::now() < deadline, "the run did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancelled = reqwest::Client::new()
        .patch(format!("{}/invocations/{invocation}/cancel", node.admin))
        .send()
        .await
        .unwrap();
    assert!(cancelled.status().is_success(), "{cancelled:?}");
    let reply = attach(&client, &invocation, &node).await;
    assert_eq!(reply.stop, "cancelled", "{reply:?}");
    let at_end = effects();
    assert!(at_end < 10, "{at_end} effects");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(effects(), at_end, "an effect after the cancel");
    // Every call the model made has a result in the saved conversation.
    let session = client.session("stop").await.unwrap().unwrap();
    let calls = session
        .conversation
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { tool_calls, .. } => Some(tool_calls.len()),
            _ => None,
        })
        .sum::<usize>();
    let results = session
        .conversation
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .count();
    assert_eq!(calls, results, "{:#?}", session.conversation.messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_cluster_loses_nothing_when_a_node_dies() {
    let Some(binary) = restate_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("restate");
    std::fs::create_dir_all(&base).unwrap();
    let cluster = [free_port(), free_port(), free_port()];
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| Node::new(&binary, &base, i, &cluster))
        .collect();
    for node in &mut nodes {
        node.spawn();
    }
    for node in &nodes {
        node.ready().await;
    }
    let mut service = Service::start(
        free_port(),
        dir.path(),
        Stage {
            calls: 10,
            pause_ms: 40,
        },
    );
    register(&nodes[0].admin, &service.uri()).await;
    let client = Client::new(&nodes[0].ingress);
    // Registration reaches every node within a moment.
    let deadline = Instant::now() + Duration::from_secs(30);
    let reference = loop {
        match client.prompt("reference", "go", None).await {
            Ok(reply) => break reply,
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(reference.stop, "completed");
    let expected = transcript(&client, "reference").await;
    let keys: Vec<String> = (0..4).map(|i| format!("c{i}")).collect();
    let mut invocations = Vec::new();
    for key in &keys {
        invocations.push(client.send(key, "go", Some(key)).await.unwrap());
    }
    let waiting = client.send("waiting", "ask", None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    nodes[2].kill();
    for (key, invocation) in keys.iter().zip(&invocations) {
        let reply = attach(&client, invocation, &nodes[0]).await;
        assert_eq!(reply.stop, "completed", "{key}: {reply:?}");
        assert_eq!(transcript(&client, key).await, expected, "{key}");
    }
    // A run waiting for approval outlives a node's restart and the
    // service's, and ends when the approval comes.
    assert_eq!(wait_pending(&client, "waiting").await, ["t1c0"]);
    nodes[2].spawn();
    nodes[2].ready().await;
    nodes[1].kill();
    service.kill();
    service.spawn();
    assert_eq!(wait_pending(&client, "waiting").await, ["t1c0"]);
    // Each call asks in turn; the waiting list changes once the answer is
    // in.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut approved = 0;
    while approved < 10 {
        let ids = wait_pending(&client, "waiting").await;
        if ids == [format!("t1c{approved}")] {
            client
                .decide("waiting", &Decisions::new().allow(&ids[0]))
                .await
                .unwrap();
            approved += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(Instant::now() < deadline, "approvals stalled at {approved}");
    }
    let reply = attach(&client, &waiting, &nodes[0]).await;
    assert_eq!(reply.text.as_deref(), Some("saw 10 results"), "{reply:?}");
    let effects = lines(&dir.path().join("effects.log"));
    for key in &keys {
        let prefix = format!("restate/{key}/");
        assert_eq!(
            effects.iter().filter(|l| l.starts_with(&prefix)).count(),
            10
        );
    }
    drop(service);
    for node in &mut nodes {
        node.stop();
    }
}
