//! The plan: the actions a model declared while everything it had read was
//! trusted (the user's request, the system prompt, trusted tools).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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
///         "from": ["read_file"]
///     }]
/// })).unwrap();
/// assert_eq!(plan.actions[0].from, ["read_file"]);
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
    /// Tools whose results may supply this action's other values (the
    /// file holding the bill to pay, the mail to answer). Values from
    /// other untrusted text are not this action's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<String>,
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

    /// Lets the results of `tool` supply values.
    pub fn with_source(mut self, tool: impl Into<String>) -> Self {
        self.from.push(tool.into());
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
