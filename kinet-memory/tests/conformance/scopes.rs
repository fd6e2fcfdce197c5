//! Conformance cases for scopes: what one scope writes, no other reads
//! (facts, blocks, records through every recall path, triples), shared
//! blocks reach the scopes inside theirs, and a property test over random
//! interleavings of four scopes' writes and reads.

use kinet_core::builder::Calls;
use std::collections::BTreeMap;
use std::sync::Arc;

use kinet_core::Agent;
use kinet_core::testing::{Expectation, ScriptedProvider, ScriptedTurn};
use kinet_memory::model::{NewRecord, NewTriple, TripleQuery};
use kinet_memory::{BlockSpec, HashEmbedder, MemoryPack, RecallQuery, Scope, SharedMemory};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::json;

use super::Fixture;

fn alice() -> Scope {
    Scope::user("alice").with_agent("support")
}

fn bob() -> Scope {
    Scope::user("bob").with_agent("support")
}

pub(crate) async fn scopes_keep_facts_records_triples_and_blocks_apart(f: &impl Fixture) {
    let store = f
        .open(&f.fresh().await, Some(Arc::new(HashEmbedder::new(256))))
        .await;
    let alice_sales = Scope::user("alice").with_agent("sales");
    let scopes = [alice(), bob(), alice_sales.clone(), Scope::EMPTY];
    for (n, scope) in scopes.iter().enumerate() {
        let marker = format!("marker{n}");
        store.set_fact(scope, "s", "db", &marker).await.unwrap();
        store
            .add_records(
                scope,
                &[
                    NewRecord::new(
                        "s",
                        "user",
                        format!("We deploy the invoice service {marker}"),
                    ),
                    NewRecord::new(
                        "s",
                        "assistant",
                        format!("Deployments run nightly {marker}"),
                    ),
                ],
            )
            .await
            .unwrap();
        store
            .add_triple(scope, NewTriple::new("invoice", "owned_by", &marker))
            .await
            .unwrap();
        store
            .block_append(scope, "user_profile", &marker)
            .await
            .unwrap();
    }
    for (n, scope) in scopes.iter().enumerate() {
        let marker = format!("marker{n}");
        assert_eq!(
            store.fact(scope, "s", "db").await.unwrap().as_deref(),
            Some(marker.as_str())
        );
        assert_eq!(store.facts(scope, "s").await.unwrap().len(), 1);
        assert_eq!(store.record_count(scope).await.unwrap(), 2);
        // Hybrid, and full text alone (a handle without an embedder).
        let recall = store
            .recall(scope, &RecallQuery::new("deploy invoice nightly").limit(20))
            .await
            .unwrap();
        assert_eq!(recall.hits.len(), 2, "{scope:?}: {:?}", recall.hits);
        assert!(recall.hits.iter().all(|h| h.text.ends_with(&marker)));
        // Supersession stayed inside each scope: one current owner each.
        assert_eq!(recall.triples.len(), 1, "{:?}", recall.triples);
        assert_eq!(recall.triples[0].object, marker);
        let triples = store
            .query_triples(
                scope,
                TripleQuery {
                    subject: Some("invoice".into()),
                    include_history: true,
                    ..TripleQuery::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(triples.len(), 1, "{triples:?}");
        let blocks = store.blocks(scope).await.unwrap();
        let profile = blocks.iter().find(|b| b.label == "user_profile").unwrap();
        assert_eq!(profile.value, marker);
    }
    // Another scope's triple cannot be ended by id.
    let theirs = store
        .query_triples(
            &bob(),
            TripleQuery {
                subject: Some("invoice".into()),
                ..TripleQuery::default()
            },
        )
        .await
        .unwrap();
    assert!(
        !store
            .invalidate_triple(&alice(), theirs[0].id)
            .await
            .unwrap()
    );
    assert!(store.invalidate_triple(&bob(), theirs[0].id).await.unwrap());
    // A scope that wrote nothing sees nothing, and templates empty.
    let carol = Scope::user("carol").with_agent("support");
    let recall = store
        .recall(&carol, &RecallQuery::new("deploy invoice nightly marker0"))
        .await
        .unwrap();
    assert!(
        recall.hits.is_empty() && recall.triples.is_empty(),
        "{recall:?}"
    );
    assert!(store.facts(&carol, "s").await.unwrap().is_empty());
    assert!(
        store
            .blocks(&carol)
            .await
            .unwrap()
            .iter()
            .all(|b| b.value.is_empty())
    );
}

pub(crate) async fn shared_blocks_reach_the_scopes_inside_theirs(f: &impl Fixture) {
    let store = f.open(&f.fresh().await, None).await;
    store
        .define_block(
            &Scope::agent("support"),
            BlockSpec::new("persona", 500, "how the agent speaks")
                .initial("Be brief and kind.")
                .read_only()
                .shared(),
        )
        .await
        .unwrap();
    store
        .define_block(
            &Scope::agent("support"),
            BlockSpec::new("team_notes", 500, "notes every user's session shares").shared(),
        )
        .await
        .unwrap();
    store
        .define_block(
            &Scope::agent("support"),
            BlockSpec::new("private", 500, "the agent's own, not shared"),
        )
        .await
        .unwrap();
    let labels = |blocks: Vec<kinet_memory::model::Block>| -> BTreeMap<String, String> {
        blocks.into_iter().map(|b| (b.label, b.value)).collect()
    };
    let seen = labels(store.blocks(&alice()).await.unwrap());
    assert_eq!(seen["persona"], "Be brief and kind.");
    assert!(seen.contains_key("team_notes") && !seen.contains_key("private"));
    assert!(seen.contains_key("user_profile"), "templates: {seen:?}");
    // Read-only for the model, wherever it is seen from.
    let error = store
        .block_append(&alice(), "persona", "Be rude.")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("read-only"), "{error}");
    // A writable shared block is one block for all who see it.
    store
        .block_append(&alice(), "team_notes", "release frozen")
        .await
        .unwrap();
    assert_eq!(
        labels(store.blocks(&bob()).await.unwrap())["team_notes"],
        "release frozen"
    );
    // Other agents' users and the empty scope do not see them.
    let other = labels(
        store
            .blocks(&Scope::user("alice").with_agent("sales"))
            .await
            .unwrap(),
    );
    assert!(!other.contains_key("persona") && !other.contains_key("team_notes"));
    assert!(!labels(store.blocks(&Scope::EMPTY).await.unwrap()).contains_key("persona"));
    let error = store
        .block_append(&Scope::user("alice").with_agent("sales"), "persona", "x")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("no block `persona`"), "{error}");
    // A block of the reader's own scope hides the shared one.
    store
        .define_block(
            &alice(),
            BlockSpec::new("persona", 500, "alice's").initial("Alice likes detail."),
        )
        .await
        .unwrap();
    assert_eq!(
        labels(store.blocks(&alice()).await.unwrap())["persona"],
        "Alice likes detail."
    );
    assert_eq!(
        labels(store.blocks(&bob()).await.unwrap())["persona"],
        "Be brief and kind."
    );
    // Templates: each scope's own copy.
    store
        .block_append(&alice(), "user_profile", "Alice, on call")
        .await
        .unwrap();
    assert_eq!(
        labels(store.blocks(&bob()).await.unwrap())["user_profile"],
        ""
    );
}

/// Two users' agents, each with a pack in its own scope, on one store: the
/// second recalls and reads blocks, and gets only its own.
pub(crate) async fn scoped_packs_give_each_user_only_their_memory(f: &impl Fixture) {
    let at = f.fresh().await;
    let store = f.open(&at, Some(Arc::new(HashEmbedder::new(256)))).await;
    let run = |store: SharedMemory, scope: Scope, turns: Vec<ScriptedTurn>, ask: &'static str| {
        let pack = MemoryPack::new(store, "conversation").scope(scope);
        let provider = Arc::new(ScriptedProvider::new(turns));
        let agent = Agent::builder(Arc::clone(&provider) as Arc<dyn kinet_core::Provider>)
            .tools(pack.toolset())
            .calls(
                Calls::new()
                    .hook(pack.blocks_hook())
                    .hook(pack.history_hook()),
            )
            .build();
        async move { (agent.run_to_completion(ask).await, provider) }
    };
    let (outcome, _) = run(
        Arc::clone(&store),
        alice(),
        vec![
            ScriptedTurn::new().tool_call(
                "p",
                "memory_append",
                json!({"label": "user_profile", "text": "Alice's secret project: heron"}),
            ),
            ScriptedTurn::text("Noted."),
        ],
        "My secret project is heron.",
    )
    .await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let (outcome, provider) = run(
        Arc::clone(&store),
        bob(),
        vec![
            ScriptedTurn::new().tool_call(
                "r",
                "recall_memory",
                json!({"query": "secret project heron"}),
            ),
            ScriptedTurn::text("I know nothing of it.").expect(Expectation::ToolResultContains {
                call_id: "r".into(),
                text: "No matching memories.".into(),
            }),
        ],
        "What is the secret project?",
    )
    .await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    // Bob's blocks were rendered, and none of Alice's text with them.
    let first = provider.requests()[0]
        .last_message
        .as_ref()
        .map(|m| m.text())
        .unwrap_or_default();
    assert!(first.contains("<user_profile"), "{first}");
    assert!(!first.contains("heron"), "{first}");
    // Alice's own agent sees her block.
    let (outcome, provider) = run(
        Arc::clone(&store),
        alice(),
        vec![ScriptedTurn::text("heron, as you said.")],
        "What is my secret project?",
    )
    .await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let first = provider.requests()[0]
        .last_message
        .as_ref()
        .map(|m| m.text())
        .unwrap_or_default();
    assert!(first.contains("Alice's secret project: heron"), "{first}");
}

/// One step of the property test.
#[derive(Debug, Clone)]
enum Step {
    Record { scope: usize, word: usize },
    Fact { scope: usize, key: usize },
    Triple { scope: usize, word: usize },
    Block { scope: usize },
    Recall { scope: usize, word: usize },
    Read { scope: usize },
}

const WORDS: [&str; 4] = ["deploy", "invoice", "rollback", "pager"];

fn step() -> impl Strategy<Value = Step> {
    let scope = 0..4usize;
    let word = 0..WORDS.len();
    prop_oneof![
        (scope.clone(), word.clone()).prop_map(|(scope, word)| Step::Record { scope, word }),
        (scope.clone(), 0..3usize).prop_map(|(scope, key)| Step::Fact { scope, key }),
        (scope.clone(), word.clone()).prop_map(|(scope, word)| Step::Triple { scope, word }),
        scope.clone().prop_map(|scope| Step::Block { scope }),
        (scope.clone(), word).prop_map(|(scope, word)| Step::Recall { scope, word }),
        scope.prop_map(|scope| Step::Read { scope }),
    ]
}

/// Two users × two agents, named for the case so cases share one store
/// without sharing scopes.
fn case_scopes(case: usize) -> [Scope; 4] {
    let user = |u: usize| format!("user{u}-case{case}");
    [
        Scope::user(user(0)).with_agent("a0"),
        Scope::user(user(0)).with_agent("a1"),
        Scope::user(user(1)).with_agent("a0"),
        Scope::user(user(1)).with_agent("a1"),
    ]
}

/// Every scope's marker is `m<case>s<scope>`; any text a scope reads that
/// holds another scope's marker is a leak.
fn leaks(case: usize, reader: usize, text: &str) -> Option<usize> {
    (0..4)
        .filter(|s| *s != reader)
        .find(|s| text.contains(&format!("m{case}s{s}x")))
}

/// A store error as a failed case.
fn fail(error: kinet_memory::MemoryError) -> TestCaseError {
    TestCaseError::fail(error.to_string())
}

async fn check_case(
    store: &SharedMemory,
    case: usize,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let scopes = case_scopes(case);
    let marker = |s: usize| format!("m{case}s{s}x");
    let mut written = [0usize; 4];
    for step in steps {
        match *step {
            Step::Record { scope, word } => {
                store
                    .add_record(
                        &scopes[scope],
                        "s",
                        "user",
                        &format!("{} {} note {}", WORDS[word], marker(scope), written[scope]),
                    )
                    .await
                    .map_err(fail)?;
                written[scope] += 1;
            }
            Step::Fact { scope, key } => {
                store
                    .set_fact(&scopes[scope], "s", &format!("k{key}"), &marker(scope))
                    .await
                    .map_err(fail)?;
            }
            Step::Triple { scope, word } => {
                store
                    .add_triple(
                        &scopes[scope],
                        NewTriple::new(WORDS[word], "owned_by", marker(scope)),
                    )
                    .await
                    .map_err(fail)?;
            }
            Step::Block { scope } => {
                store
                    .block_append(&scopes[scope], "active_goals", &marker(scope))
                    .await
                    .map_err(fail)?;
            }
            Step::Recall { scope, word } => {
                // The query names every scope's marker: full text would
                // find them all if the scope did not hold.
                let query = format!(
                    "{} note {}",
                    WORDS[word],
                    (0..4).map(marker).collect::<Vec<_>>().join(" ")
                );
                let recall = store
                    .recall(&scopes[scope], &RecallQuery::new(query).limit(20))
                    .await
                    .map_err(fail)?;
                let seen = serde_json::to_string(&recall).unwrap_or_default();
                prop_assert_eq!(
                    leaks(case, scope, &seen),
                    None,
                    "recall of {}: {}",
                    scope,
                    seen
                );
                prop_assert!(
                    recall.hits.len() == written[scope].min(20),
                    "scope {} wrote {} records and recalled {}",
                    scope,
                    written[scope],
                    recall.hits.len()
                );
            }
            Step::Read { scope } => {
                let scope_ref = &scopes[scope];
                let facts = store.facts(scope_ref, "s").await.map_err(fail)?;
                let blocks = store.blocks(scope_ref).await.map_err(fail)?;
                let triples = store
                    .query_triples(
                        scope_ref,
                        TripleQuery {
                            predicate: Some("owned_by".into()),
                            include_history: true,
                            ..TripleQuery::default()
                        },
                    )
                    .await
                    .map_err(fail)?;
                let count = store.record_count(scope_ref).await.map_err(fail)?;
                let seen = format!("{facts:?} {blocks:?} {triples:?}");
                prop_assert_eq!(
                    leaks(case, scope, &seen),
                    None,
                    "read of {}: {}",
                    scope,
                    seen
                );
                prop_assert_eq!(count, written[scope] as i64);
            }
        }
    }
    Ok(())
}

/// 1,000 random interleavings of two users' and two agents' writes and
/// reads on one store: no scope ever reads another's marker, and each
/// recalls exactly as many records as it wrote (up to the limit).
pub(crate) async fn random_interleavings_never_cross_scopes(f: &impl Fixture) {
    let store = f
        .open(&f.fresh().await, Some(Arc::new(HashEmbedder::new(64))))
        .await;
    let cases: u32 = std::env::var("KINET_SCOPE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicUsize::new(0);
    let handle = tokio::runtime::Handle::current();
    let result = runner.run(&proptest::collection::vec(step(), 1..12), |steps| {
        // Each case (and each shrinking attempt) gets scopes of its own.
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::task::block_in_place(|| handle.block_on(check_case(&store, n, &steps)))
    });
    if let Err(error) = result {
        panic!("{error}");
    }
}
