//! The plan: the actions a model declared while everything it had read was
//! trusted (the user's request, the system prompt, trusted tools).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The name of the tool a model declares its plan with (exported as
/// `pipeline::PLAN_TOOL`).
pub(crate) const PLAN_TOOL: &str = "declare_plan";

/// The ledger's source name for a declared plan (a name no tool can have).
pub(crate) const PLAN_SOURCE: &str = "kinet:plan";

/// What the `declare_plan` tool takes: the actions the task needs, written
/// from the user's request before any data is read.
///
/// Once the model has read untrusted text, the default defence
/// ([`DefenceMode::Planned`](crate::pipeline::DefenceMode::Planned)) lets
/// an acting call run only when it is one of these actions: a call the
/// user's request did not lead to, chosen by text someone else wrote, is
/// not.
///
/// ```
/// use kinet_core::provenance::Plan;
///
/// let plan: Plan = serde_json::from_value(serde_json::json!({
///     "actions": [{
///         "tool": "send_money",
///         "arguments": {"date": "2022-03-01"},
///         "from": {"recipient": ["read_file"], "amount": ["read_file"]}
///     }]
/// })).unwrap();
/// assert_eq!(plan.actions[0].from.for_argument("recipient"), ["read_file"]);
/// assert!(plan.actions[0].from.for_argument("subject").is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Plan {
    /// Every action (a tool that sends, writes, pays, books, deletes or
    /// otherwise changes something) the task will take, in any order.
    pub actions: Vec<PlannedAction>,
}

/// One declared action.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct PlannedAction {
    /// The tool, by the name it is called with (or a prefix ending in `*`).
    pub tool: String,
    /// Arguments whose values the user's request already fixes (a date the
    /// user gave, a recipient the user named), as the call will pass them.
    /// A call with another value there is not this action.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub arguments: Map<String, Value>,
    /// The tools whose results supply the other values (the file holding
    /// the bill to pay, the mail to answer), per argument or for all. A
    /// value of such an argument must be in what those tools returned (or
    /// what the user said); an argument named nowhere takes only values
    /// the user said or the model works out, none from untrusted text.
    #[serde(default, skip_serializing_if = "Sources::is_empty")]
    pub from: Sources,
}

/// Where a declared action's values that the request does not fix come
/// from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[non_exhaustive]
pub enum Sources {
    /// Per argument: `{"recipient": ["read_file"]}`.
    Each(BTreeMap<String, Vec<String>>),
    /// The same tools for every argument the request does not fix.
    All(Vec<String>),
}

impl Default for Sources {
    fn default() -> Self {
        Self::All(Vec::new())
    }
}

impl Sources {
    /// Whether no tool supplies anything.
    pub fn is_empty(&self) -> bool {
        match self {
            Self::All(tools) => tools.is_empty(),
            Self::Each(map) => map.values().all(Vec::is_empty),
        }
    }

    /// The tools that supply `argument`.
    pub fn for_argument(&self, argument: &str) -> &[String] {
        match self {
            Self::All(tools) => tools,
            Self::Each(map) => map.get(argument).map_or(&[], Vec::as_slice),
        }
    }

    /// Every tool named.
    pub fn tools(&self) -> Vec<&str> {
        let mut tools: Vec<&str> = match self {
            Self::All(tools) => tools.iter().map(String::as_str).collect(),
            Self::Each(map) => map.values().flatten().map(String::as_str).collect(),
        };
        tools.sort_unstable();
        tools.dedup();
        tools
    }
}

impl PlannedAction {
    /// An action on `tool` with no fixed values and no sources.
    pub fn new(tool: impl Into<String>) -> Self {
        Self {
            tool: tool.into(),
            ..Self::default()
        }
    }

    /// Fixes an argument's value.
    pub fn with_argument(mut self, name: impl Into<String>, value: Value) -> Self {
        self.arguments.insert(name.into(), value);
        self
    }

    /// Lets the results of `tool` supply every argument not fixed
    /// (replacing per-argument sources, if any).
    pub fn with_source(mut self, tool: impl Into<String>) -> Self {
        match &mut self.from {
            Sources::All(tools) => tools.push(tool.into()),
            Sources::Each(_) => self.from = Sources::All(vec![tool.into()]),
        }
        self
    }

    /// Lets the results of `tool` supply `argument` (replacing sources for
    /// every argument, if any).
    pub fn with_source_for(mut self, argument: impl Into<String>, tool: impl Into<String>) -> Self {
        if !matches!(self.from, Sources::Each(_)) {
            self.from = Sources::Each(BTreeMap::new());
        }
        if let Sources::Each(map) = &mut self.from {
            map.entry(argument.into()).or_default().push(tool.into());
        }
        self
    }
}

impl Plan {
    /// A plan of these actions.
    pub fn new(actions: impl IntoIterator<Item = PlannedAction>) -> Self {
        Self {
            actions: actions.into_iter().collect(),
        }
    }
}
