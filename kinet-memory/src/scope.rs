//! Who memory belongs to: [`Scope`], and how a backend picks the blocks a
//! scope sees.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{Block, BlockSpec};

/// Whose memory a read or write is: a user, an agent, a conversation, each
/// optional. The host sets it (on [`MemoryPack`](crate::MemoryPack), the
/// hooks, or each [`MemoryBackend`](crate::MemoryBackend) call), never the
/// model: no tool takes a scope in its arguments.
///
/// Every backend filters by it inside its queries:
///
/// - facts, history records (full-text, vector and hybrid recall) and
///   knowledge-graph triples are seen only by the **exact** scope that
///   wrote them: a scope with user `alice` and agent `support` sees
///   nothing written by `bob`, by another agent, or with no user at all;
///   the empty scope ([`Scope::default`], what stores written before
///   scopes hold) sees only what was written with no scope;
/// - blocks likewise, except blocks defined as
///   [shared](BlockSpec::shared): those are seen by every scope inside the
///   scope they were defined in (a persona defined for `Scope::agent("support")`
///   is seen by every user of that agent). A block of the reader's own
///   scope hides a shared one with the same label.
///
/// An empty id is no id: `Scope::user("")` is the empty scope, so a host
/// must not map missing identities to `""` and expect isolation.
///
/// ```
/// use kinet_memory::Scope;
///
/// let scope = Scope::user("alice").with_agent("support");
/// assert_eq!(scope.user_id(), Some("alice"));
/// assert!(Scope::agent("support").contains(&scope));
/// assert!(!Scope::user("bob").contains(&scope));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Scope {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    user: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    agent: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    conversation: String,
}

impl Scope {
    /// The empty scope: no user, agent or conversation (what
    /// [`Scope::default`] gives, as a constant).
    pub const EMPTY: Scope = Scope {
        user: String::new(),
        agent: String::new(),
        conversation: String::new(),
    };

    /// The scope of one user.
    pub fn user(id: impl Into<String>) -> Self {
        Self::default().with_user(id)
    }

    /// The scope of one agent (all its users share it).
    pub fn agent(id: impl Into<String>) -> Self {
        Self::default().with_agent(id)
    }

    /// The scope of one conversation.
    pub fn conversation(id: impl Into<String>) -> Self {
        Self::default().with_conversation(id)
    }

    /// The same scope, of user `id`.
    pub fn with_user(mut self, id: impl Into<String>) -> Self {
        self.user = id.into();
        self
    }

    /// The same scope, of agent `id`.
    pub fn with_agent(mut self, id: impl Into<String>) -> Self {
        self.agent = id.into();
        self
    }

    /// The same scope, of conversation `id`.
    pub fn with_conversation(mut self, id: impl Into<String>) -> Self {
        self.conversation = id.into();
        self
    }

    /// The user, if set.
    pub fn user_id(&self) -> Option<&str> {
        Some(self.user.as_str()).filter(|s| !s.is_empty())
    }

    /// The agent, if set.
    pub fn agent_id(&self) -> Option<&str> {
        Some(self.agent.as_str()).filter(|s| !s.is_empty())
    }

    /// The conversation, if set.
    pub fn conversation_id(&self) -> Option<&str> {
        Some(self.conversation.as_str()).filter(|s| !s.is_empty())
    }

    /// Whether nothing is set (the scope of stores written before scopes).
    pub fn is_empty(&self) -> bool {
        self.user.is_empty() && self.agent.is_empty() && self.conversation.is_empty()
    }

    /// Whether `other` lies inside this scope: every id set here is set to
    /// the same in `other`. The empty scope contains every scope; a shared
    /// block defined in this scope is seen by `other`.
    pub fn contains(&self, other: &Scope) -> bool {
        [
            (&self.user, &other.user),
            (&self.agent, &other.agent),
            (&self.conversation, &other.conversation),
        ]
        .iter()
        .all(|(mine, theirs)| mine.is_empty() || mine == theirs)
    }

    /// The three columns as stored: user, agent, conversation (`""` when
    /// unset).
    pub(crate) fn columns(&self) -> [&str; 3] {
        [&self.user, &self.agent, &self.conversation]
    }

    /// The scope of stored columns.
    pub(crate) fn from_columns(user: String, agent: String, conversation: String) -> Self {
        Self {
            user,
            agent,
            conversation,
        }
    }

    /// How many ids are set: a more specific scope wins a label.
    fn depth(&self) -> usize {
        self.columns().iter().filter(|c| !c.is_empty()).count()
    }

    /// One word naming the scope, for indexes that can only hold words
    /// (SQLite's full-text index, the in-memory vector index): `k0` for the
    /// empty scope, else `k` and 16 hex digits of a hash of the three ids.
    /// Different scopes may share a key (a 64-bit hash); backends check the
    /// columns too, so a shared key costs ranking depth, never isolation.
    pub(crate) fn key(&self) -> String {
        if self.is_empty() {
            return "k0".to_owned();
        }
        format!("k{:016x}", self.hash())
    }

    /// The 64-bit hash behind [`key`](Self::key) (0 for the empty scope).
    pub(crate) fn hash(&self) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for (index, part) in self.columns().iter().enumerate() {
            // Length-prefixed, so ("ab", "") and ("a", "b") differ.
            for byte in (index as u64)
                .to_le_bytes()
                .iter()
                .chain(&(part.len() as u64).to_le_bytes())
                .chain(part.as_bytes())
            {
                hash = (hash ^ u64::from(*byte)).wrapping_mul(0x100_0000_01b3);
            }
        }
        hash.max(1)
    }

    /// The hash of a stored key (`None` for a malformed one).
    pub(crate) fn hash_of_key(key: &str) -> Option<u64> {
        match key.strip_prefix('k')? {
            "0" => Some(0),
            hex if hex.len() == 16 => u64::from_str_radix(hex, 16).ok(),
            _ => None,
        }
    }
}

/// A stored block with where it lives.
#[derive(Debug, Clone)]
pub(crate) struct StoredBlock {
    pub(crate) block: Block,
    pub(crate) scope: Scope,
    pub(crate) shared: bool,
}

/// The blocks `reader` sees among `rows` (its own and shared ones of wider
/// scopes, as the backend selected them) and the templates (blocks of
/// every scope, from [`MemoryConfig::blocks`](crate::MemoryConfig)): per
/// label the most specific row, a template's settings over its own-scope
/// rows, and templates not yet written with their initial content. Rows the
/// reader must not see are dropped here too, whatever the query returned.
pub(crate) fn visible_blocks(
    reader: &Scope,
    rows: Vec<StoredBlock>,
    templates: &[BlockSpec],
) -> Vec<StoredBlock> {
    let mut chosen: BTreeMap<String, StoredBlock> = BTreeMap::new();
    for mut row in rows {
        let own = row.scope == *reader;
        if !(own || (row.shared && row.scope.contains(reader))) {
            continue;
        }
        if own && let Some(template) = templates.iter().find(|t| t.label == row.block.label) {
            apply_template(&mut row.block, template);
        }
        let better = chosen
            .get(&row.block.label)
            .is_none_or(|held| row.scope.depth() > held.scope.depth());
        if better {
            chosen.insert(row.block.label.clone(), row);
        }
    }
    for template in templates {
        let own = chosen
            .get(&template.label)
            .is_some_and(|held| held.scope == *reader);
        if !own {
            chosen.insert(
                template.label.clone(),
                StoredBlock {
                    block: Block {
                        label: template.label.clone(),
                        value: template.initial.clone(),
                        limit: template.limit,
                        read_only: template.read_only,
                        description: template.description.clone(),
                    },
                    scope: reader.clone(),
                    shared: false,
                },
            );
        }
    }
    chosen.into_values().collect()
}

/// A template's limit, flag and description on a block written from it.
fn apply_template(block: &mut Block, template: &BlockSpec) {
    block.limit = template.limit;
    block.read_only = template.read_only;
    block.description.clone_from(&template.description);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_where_the_text_sits() {
        let a = Scope::user("ab");
        let b = Scope::user("a").with_agent("b");
        assert_ne!(a.key(), b.key());
        assert_eq!(Scope::default().key(), "k0");
        assert_eq!(Scope::user("").key(), "k0");
        for scope in [a, b, Scope::conversation("c")] {
            assert_eq!(Scope::hash_of_key(&scope.key()), Some(scope.hash()));
            assert_eq!(scope.key().len(), 17);
        }
        assert_eq!(Scope::hash_of_key("k0"), Some(0));
        assert_eq!(Scope::hash_of_key("x"), None);
    }

    #[test]
    fn containment() {
        let alice = Scope::user("alice").with_agent("support");
        assert!(Scope::default().contains(&alice));
        assert!(Scope::agent("support").contains(&alice));
        assert!(alice.contains(&alice));
        assert!(!alice.contains(&Scope::agent("support")));
        assert!(!Scope::agent("sales").contains(&alice));
    }

    fn row(label: &str, value: &str, scope: Scope, shared: bool) -> StoredBlock {
        StoredBlock {
            block: Block {
                label: label.into(),
                value: value.into(),
                limit: 100,
                read_only: false,
                description: String::new(),
            },
            scope,
            shared,
        }
    }

    #[test]
    fn own_blocks_hide_shared_ones_and_unshared_wider_ones_are_not_seen() {
        let alice = Scope::user("alice").with_agent("support");
        let rows = vec![
            row("persona", "shared persona", Scope::agent("support"), true),
            row(
                "notes",
                "agent-wide but not shared",
                Scope::agent("support"),
                false,
            ),
            row("persona", "alice's own", alice.clone(), false),
            row("team", "everyone", Scope::default(), true),
            row(
                "bob",
                "bob's",
                Scope::user("bob").with_agent("support"),
                false,
            ),
        ];
        let seen = visible_blocks(&alice, rows, &[BlockSpec::new("profile", 50, "who")]);
        let labels: Vec<(&str, &str)> = seen
            .iter()
            .map(|b| (b.block.label.as_str(), b.block.value.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("persona", "alice's own"),
                ("profile", ""),
                ("team", "everyone")
            ]
        );
        assert_eq!(seen[1].scope, alice);
    }
}
