//! One conformance suite for every memory backend: each case takes a
//! [`Fixture`] that opens handles on a fresh store (a SQLite file, a
//! PostgreSQL database) and checks what `MemoryBackend` promises.
//! `conformance_suite!(fixture)` makes one test per case.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use kinet_core::builder::Calls;
use std::sync::Arc;
use std::time::Duration;

use kinet_core::Agent;
use kinet_core::testing::{Expectation, ScriptedProvider, ScriptedTurn};
use kinet_memory::embed::EmbedError;
use kinet_memory::model::{NewRecord, NewTriple, RecallMode, TripleQuery};
use kinet_memory::{
    BlockSpec, BlocksHook, Embedder, HashEmbedder, MemoryError, MemoryPack, RecallQuery, Scope,
    SharedMemory,
};
use serde_json::json;

mod scopes;
pub(crate) use scopes::*;

/// Opens handles on stores of one backend.
#[async_trait::async_trait]
pub(crate) trait Fixture: Send + Sync {
    /// A new, empty store; the string names it for [`Fixture::open`].
    async fn fresh(&self) -> String;
    /// A handle on the store `at` (a second call gives a second handle, as
    /// another process would have), with the default blocks.
    async fn open(&self, at: &str, embedder: Option<Arc<dyn Embedder>>) -> SharedMemory;
}

/// One `#[tokio::test]` per conformance case on the fixture `$make`
/// (an expression giving `Option<impl Fixture>`; `None` skips, and the
/// fixture says why).
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@cases $make;
            blocks_enforce_limits_and_exact_single_replacements,
            facts_are_per_session_and_overwritten,
            full_text_recall_without_an_embedder_says_so_and_finds_word_forms,
            hybrid_recall_finds_meaning_sees_other_handles_and_falls_back,
            newer_triples_supersede_older_ones_and_history_stays,
            recall_leaves_out_the_turn_in_progress,
            an_agent_recalling_never_gets_its_own_question_back,
            an_agent_remembers_across_runs_through_tools_and_hooks,
            concurrent_writers_lose_nothing,
            hostile_text_is_stored_and_searched_as_text,
            frequent_words_stay_cheap_and_still_rank_the_best_matches,
            scopes_keep_facts_records_triples_and_blocks_apart,
            shared_blocks_reach_the_scopes_inside_theirs,
            scoped_packs_give_each_user_only_their_memory,
            random_interleavings_never_cross_scopes,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if let Some(fixture) = $make {
                    conformance::$case(&fixture).await;
                }
            }
        )*
    };
}

pub(crate) async fn blocks_enforce_limits_and_exact_single_replacements(f: &impl Fixture) {
    let store = f.open(&f.fresh().await, None).await;
    store
        .define_block(
            &Scope::EMPTY,
            BlockSpec::new("tiny", 20, "a small block").initial("likes tea"),
        )
        .await
        .unwrap();
    let block = store
        .block_append(&Scope::EMPTY, "tiny", "and cake")
        .await
        .unwrap();
    assert_eq!(block.value, "likes tea\nand cake");
    let error = store
        .block_append(&Scope::EMPTY, "tiny", "and biscuits")
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("would hold 31 characters, over its 20 limit by 11"),
        "{message}"
    );
    assert!(
        message.contains("2 characters of room are left"),
        "{message}"
    );
    assert!(matches!(error, MemoryError::Invalid(_)));

    store
        .block_append(&Scope::EMPTY, "tiny", "a")
        .await
        .unwrap();
    let error = store
        .block_replace(&Scope::EMPTY, "tiny", "a", "x")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("occurs 4 times"), "{error}");
    let error = store
        .block_replace(&Scope::EMPTY, "tiny", "coffee", "x")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("does not occur"), "{error}");
    let error = store
        .block_replace(&Scope::EMPTY, "tiny", "tea", "coffee")
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("0 characters of room are left"),
        "{error}"
    );
    let block = store
        .block_replace(&Scope::EMPTY, "tiny", "tea", "gin")
        .await
        .unwrap();
    assert_eq!(block.value, "likes gin\nand cake\na");
    let error = store
        .block_append(&Scope::EMPTY, "nope", "x")
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("there is no block `nope`; blocks: active_goals"),
        "{error}"
    );

    store
        .define_block(
            &Scope::EMPTY,
            BlockSpec::new("policy", 100, "rules").read_only(),
        )
        .await
        .unwrap();
    let error = store
        .block_append(&Scope::EMPTY, "policy", "x")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("read-only"), "{error}");
    // The host may still set it.
    store
        .set_block(&Scope::EMPTY, "policy", "no deploys on Friday")
        .await
        .unwrap();
    // Re-defining keeps the content.
    store
        .define_block(&Scope::EMPTY, BlockSpec::new("tiny", 40, "bigger"))
        .await
        .unwrap();
    let blocks = store.blocks(&Scope::EMPTY).await.unwrap();
    let tiny = blocks.iter().find(|b| b.label == "tiny").unwrap();
    assert_eq!(
        (tiny.limit, tiny.value.as_str()),
        (40, "likes gin\nand cake\na")
    );
    let policy = blocks.iter().find(|b| b.label == "policy").unwrap();
    assert_eq!(policy.value, "no deploys on Friday");
    assert!(policy.read_only);
}

pub(crate) async fn facts_are_per_session_and_overwritten(f: &impl Fixture) {
    let store = f.open(&f.fresh().await, None).await;
    store
        .set_fact(&Scope::EMPTY, "s1", "db", "sqlite")
        .await
        .unwrap();
    store
        .set_fact(&Scope::EMPTY, "s1", "db", "postgres")
        .await
        .unwrap();
    store
        .set_fact(&Scope::EMPTY, "s1", "ci", "github")
        .await
        .unwrap();
    store
        .set_fact(&Scope::EMPTY, "s2", "db", "mysql")
        .await
        .unwrap();
    assert_eq!(
        store
            .fact(&Scope::EMPTY, "s1", "db")
            .await
            .unwrap()
            .as_deref(),
        Some("postgres")
    );
    assert_eq!(
        store
            .fact(&Scope::EMPTY, "s2", "db")
            .await
            .unwrap()
            .as_deref(),
        Some("mysql")
    );
    assert_eq!(store.fact(&Scope::EMPTY, "s3", "db").await.unwrap(), None);
    assert_eq!(
        store.facts(&Scope::EMPTY, "s1").await.unwrap(),
        [
            ("ci".to_owned(), "github".to_owned()),
            ("db".to_owned(), "postgres".to_owned())
        ]
    );
}

pub(crate) async fn full_text_recall_without_an_embedder_says_so_and_finds_word_forms(
    f: &impl Fixture,
) {
    let store = f.open(&f.fresh().await, None).await;
    store
        .add_record(
            &Scope::EMPTY,
            "s1",
            "user",
            "Our deployment uses blue-green releases on Kubernetes.",
        )
        .await
        .unwrap();
    store
        .add_record(
            &Scope::EMPTY,
            "s1",
            "assistant",
            "The database is PostgreSQL 16.",
        )
        .await
        .unwrap();
    store
        .add_record(&Scope::EMPTY, "s2", "user", "Lunch is at noon.")
        .await
        .unwrap();
    let recall = store
        .recall(&Scope::EMPTY, &RecallQuery::new("how do we deploy?"))
        .await
        .unwrap();
    assert_eq!(
        recall.mode,
        RecallMode::FullTextOnly {
            reason: "no embedder is configured".into()
        }
    );
    assert_eq!(recall.hits.len(), 1, "{:?}", recall.hits);
    assert!(recall.hits[0].text.contains("blue-green"));
    assert!(recall.hits[0].full_text && recall.hits[0].similarity.is_none());
    assert_eq!(recall.hits[0].session, "s1");
    assert_eq!(recall.hits[0].role, "user");
    let none = store
        .recall(&Scope::EMPTY, &RecallQuery::new("zebra"))
        .await
        .unwrap();
    assert!(none.hits.is_empty());
    // `since` filters by time.
    let future = store
        .recall(
            &Scope::EMPTY,
            &RecallQuery::new("deployment").since(Some(i64::MAX / 2)),
        )
        .await
        .unwrap();
    assert!(future.hits.is_empty());
    assert_eq!(store.record_count(&Scope::EMPTY).await.unwrap(), 3);
}

/// Maps words of one concept to one direction: "car" and "automobile" are
/// the same to it, with no shared letters needed.
pub(crate) struct ConceptEmbedder;

#[async_trait::async_trait]
impl Embedder for ConceptEmbedder {
    fn name(&self) -> &str {
        "concepts"
    }
    fn dims(&self) -> usize {
        4
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let t = t.to_lowercase();
                let mut v = vec![0.01f32; 4];
                if t.contains("car") || t.contains("automobile") || t.contains("vehicle") {
                    v[0] = 1.0;
                }
                if t.contains("cat") || t.contains("kitten") {
                    v[1] = 1.0;
                }
                if t.contains("rain") || t.contains("drizzle") {
                    v[2] = 1.0;
                }
                v
            })
            .collect())
    }
}

pub(crate) struct BrokenEmbedder;

#[async_trait::async_trait]
impl Embedder for BrokenEmbedder {
    fn name(&self) -> &str {
        "broken"
    }
    fn dims(&self) -> usize {
        4
    }
    async fn embed(&self, _texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Err(EmbedError("the embedding server is down".into()))
    }
}

pub(crate) async fn hybrid_recall_finds_meaning_sees_other_handles_and_falls_back(
    f: &impl Fixture,
) {
    let at = f.fresh().await;
    let store = f.open(&at, Some(Arc::new(ConceptEmbedder))).await;
    for text in [
        "I parked my car by the station.",
        "The kitten knocked over a glass.",
        "Expect drizzle tomorrow.",
    ] {
        store
            .add_record(&Scope::EMPTY, "s", "user", text)
            .await
            .unwrap();
    }
    let recall = store
        .recall(&Scope::EMPTY, &RecallQuery::new("automobile").limit(2))
        .await
        .unwrap();
    assert_eq!(recall.mode, RecallMode::Hybrid);
    assert!(recall.hits[0].text.contains("car"), "{:?}", recall.hits);
    assert!(!recall.hits[0].full_text, "found by meaning, not by words");
    assert!(recall.hits[0].similarity.unwrap() > 0.9);

    // Another handle's (process's) writes are seen by this one.
    let other = f.open(&at, Some(Arc::new(ConceptEmbedder))).await;
    other
        .add_record(&Scope::EMPTY, "s", "user", "Heavy rain all week.")
        .await
        .unwrap();
    let recall = store
        .recall(&Scope::EMPTY, &RecallQuery::new("drizzle").limit(2))
        .await
        .unwrap();
    assert_eq!(recall.hits.len(), 2, "{:?}", recall.hits);

    let broken = f
        .open(&f.fresh().await, Some(Arc::new(BrokenEmbedder)))
        .await;
    broken
        .add_record(&Scope::EMPTY, "s", "user", "The car is blue.")
        .await
        .unwrap();
    let recall = broken
        .recall(&Scope::EMPTY, &RecallQuery::new("car").limit(3))
        .await
        .unwrap();
    assert_eq!(
        recall.mode,
        RecallMode::FullTextOnly {
            reason: "embedding failed: the embedding server is down".into()
        }
    );
    assert_eq!(recall.hits.len(), 1);
}

pub(crate) async fn newer_triples_supersede_older_ones_and_history_stays(f: &impl Fixture) {
    let store = f.open(&f.fresh().await, None).await;
    store
        .add_triple(
            &Scope::EMPTY,
            NewTriple::new("api", "deployed_on", "ec2").source("ops wiki"),
        )
        .await
        .unwrap();
    store
        .add_triple(&Scope::EMPTY, NewTriple::new("api", "owned_by", "team-a"))
        .await
        .unwrap();
    store
        .add_triple(
            &Scope::EMPTY,
            NewTriple::new("user", "likes", "tea").keep_existing(),
        )
        .await
        .unwrap();
    store
        .add_triple(
            &Scope::EMPTY,
            NewTriple::new("user", "likes", "cake").keep_existing(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (triple, superseded) = store
        .add_triple(
            &Scope::EMPTY,
            NewTriple::new("API", "deployed_on", "kubernetes").source("migration notes"),
        )
        .await
        .unwrap();
    assert_eq!(superseded, ["ec2"], "matched case-insensitively");
    assert_eq!(triple.source, "migration notes");
    // Adding a current triple again adds nothing.
    let (again, superseded) = store
        .add_triple(
            &Scope::EMPTY,
            NewTriple::new("api", "DEPLOYED_ON", "Kubernetes"),
        )
        .await
        .unwrap();
    assert_eq!((again.id, superseded.len()), (triple.id, 0));
    let current = store
        .query_triples(
            &Scope::EMPTY,
            TripleQuery {
                subject: Some("API".into()),
                predicate: Some("deployed_on".into()),
                ..TripleQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(current.len(), 1);
    assert_eq!(current[0].object, "kubernetes");
    let history = store
        .query_triples(
            &Scope::EMPTY,
            TripleQuery {
                subject: Some("api".into()),
                predicate: Some("deployed_on".into()),
                include_history: true,
                ..TripleQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].object, "ec2");
    assert!(history[1].valid_to.is_some());
    let likes = store
        .query_triples(
            &Scope::EMPTY,
            TripleQuery {
                predicate: Some("likes".into()),
                ..TripleQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(likes.len(), 2, "many-valued relations keep every object");
    assert!(
        store
            .invalidate_triple(&Scope::EMPTY, likes[0].id)
            .await
            .unwrap()
    );
    assert!(
        !store
            .invalidate_triple(&Scope::EMPTY, likes[0].id)
            .await
            .unwrap()
    );
    // Recall returns current triples that mention the query.
    store
        .add_record(&Scope::EMPTY, "s", "user", "the api has been flaky")
        .await
        .unwrap();
    let recall = store
        .recall(&Scope::EMPTY, &RecallQuery::new("api outage").limit(3))
        .await
        .unwrap();
    let objects: Vec<&str> = recall.triples.iter().map(|t| t.object.as_str()).collect();
    assert!(
        objects.contains(&"kubernetes") && !objects.contains(&"ec2"),
        "{objects:?}"
    );
}

pub(crate) async fn recall_leaves_out_the_turn_in_progress(f: &impl Fixture) {
    let store = f
        .open(&f.fresh().await, Some(Arc::new(HashEmbedder::new(256))))
        .await;
    store
        .add_records(
            &Scope::EMPTY,
            &[
                NewRecord::new("s", "user", "When do we ship the payments service?").in_turn("t1"),
                NewRecord::new("s", "assistant", "The payments service ships on Friday.")
                    .in_turn("t1"),
                NewRecord::new("s", "user", "When do we ship the payments service?").in_turn("t2"),
                NewRecord::new("s", "tool:grep", "payments service: ship checklist").in_turn("t2"),
            ],
        )
        .await
        .unwrap();
    let query = RecallQuery::new("When do we ship the payments service?").limit(10);
    let all = store.recall(&Scope::EMPTY, &query).await.unwrap();
    assert_eq!(all.hits.len(), 4, "{:?}", all.hits);
    let recall = store
        .recall(
            &Scope::EMPTY,
            &query.clone().exclude_turn(Some("t2".into())),
        )
        .await
        .unwrap();
    let texts: Vec<&str> = recall.hits.iter().map(|h| h.text.as_str()).collect();
    assert_eq!(recall.hits.len(), 2, "{texts:?}");
    assert!(
        texts.contains(&"The payments service ships on Friday."),
        "{texts:?}"
    );
    assert!(
        !texts.contains(&"payments service: ship checklist"),
        "{texts:?}"
    );
}

pub(crate) async fn an_agent_recalling_never_gets_its_own_question_back(f: &impl Fixture) {
    let at = f.fresh().await;
    let question = "When do we ship the payments service?";
    for (run, answer) in [("run-1", "Friday."), ("run-2", "Friday, as decided.")] {
        let store = f.open(&at, Some(Arc::new(HashEmbedder::new(256)))).await;
        let pack = MemoryPack::new(Arc::clone(&store), run);
        let mut turns = vec![ScriptedTurn::new().tool_call(
            "r",
            "recall_memory",
            json!({"query": question, "k": 5}),
        )];
        if run == "run-1" {
            turns.push(ScriptedTurn::text(answer));
        } else {
            // The first run's question is found; this run's own is not.
            turns.push(
                ScriptedTurn::text(answer).expect(Expectation::ToolResultContains {
                    call_id: "r".into(),
                    text: "run-1 user] When do we ship".into(),
                }),
            );
        }
        let agent = Agent::builder(ScriptedProvider::new(turns))
            .tools(pack.toolset())
            .calls(Calls::new().hook(pack.history_hook()))
            .build();
        let outcome = agent.run_to_completion(question).await;
        assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
        let recalled = outcome.conversation.messages[2].text();
        assert!(
            !recalled.contains("run-2 user"),
            "the turn's own question came back: {recalled}"
        );
        if run == "run-1" {
            assert!(recalled.contains("No matching memories"), "{recalled}");
        }
    }
}

pub(crate) async fn an_agent_remembers_across_runs_through_tools_and_hooks(f: &impl Fixture) {
    let at = f.fresh().await;
    let store = f.open(&at, Some(Arc::new(HashEmbedder::new(256)))).await;
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .expect(Expectation::LastUserContains(
                "<user_profile chars=\"0/2000\">".into(),
            ))
            .tool_call(
                "m",
                "memory_append",
                json!({"label": "user_profile", "text": "Name: Ada. Prefers Rust."}),
            )
            .tool_call(
                "f",
                "remember_fact",
                json!({"key": "build", "value": "cargo build --release"}),
            )
            .tool_call(
                "k",
                "kg_add",
                json!({"subject": "ada", "predicate": "works_on", "object": "kinet"}),
            ),
        ScriptedTurn::text("Noted."),
    ]);
    let pack = MemoryPack::new(Arc::clone(&store), "run-1");
    let agent = Agent::builder(provider)
        .tools(pack.toolset())
        .calls(
            Calls::new()
                .hook(BlocksHook::new(Arc::clone(&store)))
                .hook(pack.history_hook()),
        )
        .build();
    let outcome = agent
        .run_to_completion("I'm Ada and I like Rust; we build with cargo.")
        .await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);

    // A second run, as in a new process: the store is opened again.
    drop(agent);
    let store = f.open(&at, Some(Arc::new(HashEmbedder::new(256)))).await;
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .expect(Expectation::LastUserContains(
                "Name: Ada. Prefers Rust.".into(),
            ))
            .tool_call(
                "r",
                "recall_memory",
                json!({"query": "what does Ada like?"}),
            ),
        ScriptedTurn::text("You like Rust.").expect(Expectation::ToolResultContains {
            call_id: "r".into(),
            text: "I'm Ada and I like Rust".into(),
        }),
    ]);
    let agent = Agent::builder(provider)
        .tools(MemoryPack::new(Arc::clone(&store), "run-2").toolset())
        .calls(Calls::new().hook(BlocksHook::new(Arc::clone(&store))))
        .build();
    let outcome = agent.run_to_completion("What do I like?").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let recalled = outcome.conversation.messages[2].text();
    assert!(recalled.contains("(ada, works_on, kinet)"), "{recalled}");
    assert_eq!(
        store
            .fact(&Scope::EMPTY, "run-1", "build")
            .await
            .unwrap()
            .as_deref(),
        Some("cargo build --release")
    );
}

pub(crate) async fn concurrent_writers_lose_nothing(f: &impl Fixture) {
    let at = f.fresh().await;
    let store = f.open(&at, None).await;
    store
        .define_block(
            &Scope::EMPTY,
            BlockSpec::new("log", 100_000, "every writer appends"),
        )
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for writer in 0..6 {
        // Each writer has its own handle, as separate processes would.
        let handle = f.open(&at, None).await;
        tasks.push(tokio::spawn(async move {
            for i in 0..15 {
                handle
                    .block_append(&Scope::EMPTY, "log", &format!("w{writer}-{i}"))
                    .await
                    .unwrap();
                handle
                    .add_records(
                        &Scope::EMPTY,
                        &[NewRecord::new(
                            format!("w{writer}"),
                            "user",
                            format!("note {i}"),
                        )],
                    )
                    .await
                    .unwrap();
                handle
                    .set_fact(
                        &Scope::EMPTY,
                        "shared",
                        &format!("w{writer}"),
                        &i.to_string(),
                    )
                    .await
                    .unwrap();
                handle
                    .add_triple(
                        &Scope::EMPTY,
                        NewTriple::new("release", "owner", format!("w{writer}-{i}")),
                    )
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let blocks = store.blocks(&Scope::EMPTY).await.unwrap();
    let log = blocks.iter().find(|b| b.label == "log").unwrap();
    assert_eq!(log.value.lines().count(), 90, "lost block appends");
    for writer in 0..6 {
        for i in 0..15 {
            assert!(log.value.lines().any(|l| l == format!("w{writer}-{i}")));
        }
    }
    assert_eq!(store.record_count(&Scope::EMPTY).await.unwrap(), 90);
    assert_eq!(store.facts(&Scope::EMPTY, "shared").await.unwrap().len(), 6);
    let current = store
        .query_triples(
            &Scope::EMPTY,
            TripleQuery {
                subject: Some("release".into()),
                ..TripleQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(current.len(), 1, "exactly one current owner: {current:?}");
    let all = store
        .query_triples(
            &Scope::EMPTY,
            TripleQuery {
                subject: Some("release".into()),
                include_history: true,
                ..TripleQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(all.len(), 90);
}

pub(crate) async fn hostile_text_is_stored_and_searched_as_text(f: &impl Fixture) {
    let store = f
        .open(&f.fresh().await, Some(Arc::new(HashEmbedder::new(64))))
        .await;
    let nasty = [
        "'; DROP TABLE kinet_records; --",
        "\"unbalanced quote and * NEAR( OR AND NOT",
        "emoji 🦀 and combining é and RTL \u{202e} text",
        "percent % underscore _ backslash \\",
    ];
    for text in nasty {
        store
            .add_record(&Scope::EMPTY, "s", "user", text)
            .await
            .unwrap();
    }
    store
        .set_fact(&Scope::EMPTY, "s", "'; --", "\" OR 1=1")
        .await
        .unwrap();
    assert_eq!(
        store
            .fact(&Scope::EMPTY, "s", "'; --")
            .await
            .unwrap()
            .as_deref(),
        Some("\" OR 1=1")
    );
    for query in nasty {
        store
            .recall(&Scope::EMPTY, &RecallQuery::new(query))
            .await
            .unwrap();
    }
    let recall = store
        .recall(&Scope::EMPTY, &RecallQuery::new("DROP TABLE"))
        .await
        .unwrap();
    assert!(recall.hits.iter().any(|h| h.text.contains("DROP TABLE")));
    let recall = store
        .recall(&Scope::EMPTY, &RecallQuery::new("underscore backslash"))
        .await
        .unwrap();
    assert!(recall.hits.iter().any(|h| h.text.starts_with("percent")));
    store
        .add_triple(&Scope::EMPTY, NewTriple::new("100%", "is_a", "a_b"))
        .await
        .unwrap();
    let recall = store
        .recall(&Scope::EMPTY, &RecallQuery::new("xx 100% coverage"))
        .await
        .unwrap();
    assert!(recall.triples.is_empty() || recall.triples[0].subject == "100%");
    assert_eq!(store.record_count(&Scope::EMPTY).await.unwrap(), 4);
}

pub(crate) async fn frequent_words_stay_cheap_and_still_rank_the_best_matches(f: &impl Fixture) {
    let store = f.open(&f.fresh().await, None).await;
    // Two words in 6,000 records each (past the 5,000 after which a word
    // counts as frequent), both in one record of 500, and one rare word.
    // Only the newest 5,000 matches are ranked when every word is frequent.
    let mut batch = Vec::new();
    for i in 0..12_000 {
        let text = match i % 500 {
            0 => format!("billing incident {i} with the gateway"),
            _ if i % 2 == 0 => format!("billing note {i}"),
            _ => format!("incident report {i}"),
        };
        batch.push(NewRecord::new("s", "user", text));
        if batch.len() == 1000 {
            store.add_records(&Scope::EMPTY, &batch).await.unwrap();
            batch.clear();
        }
    }
    store
        .add_record(&Scope::EMPTY, "s", "user", "the gateway timed out")
        .await
        .unwrap();
    let recall = store
        .recall(
            &Scope::EMPTY,
            &RecallQuery::new("billing incident").limit(5),
        )
        .await
        .unwrap();
    assert_eq!(recall.hits.len(), 5, "{:?}", recall.hits);
    assert!(
        recall
            .hits
            .iter()
            .all(|h| h.text.starts_with("billing incident")),
        "records with both words first: {:?}",
        recall.hits
    );
    // A rare word among frequent ones decides.
    let recall = store
        .recall(&Scope::EMPTY, &RecallQuery::new("billing gateway").limit(3))
        .await
        .unwrap();
    assert!(
        recall.hits.iter().all(|h| h.text.contains("gateway")),
        "{:?}",
        recall.hits
    );
}
