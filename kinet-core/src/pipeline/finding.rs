//! What the injection defence can say of a call: the modes, and why a
//! call was flagged.

use crate::provenance::{PLAN_TOOL, Provenance};

/// How the defence treats acting calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DefenceMode {
    /// No checks, nothing recorded.
    Off,
    /// Control-flow integrity, the default. Before the model has read
    /// untrusted text, nothing is checked: every decision so far came from
    /// the user, the host and trusted tools. After it, an acting call runs
    /// only when it is an action the model declared with `declare_plan`
    /// while its context was still trusted (the tool, the values the
    /// user's request fixed, the tools whose results may supply the
    /// rest), and its other values pass the provenance rule with those
    /// tools' text allowed. An action the untrusted text chose, however
    /// harmless its values look (a date, a title, a name the user also
    /// said), was not declared, so it is asked about, or refused
    /// unattended. Costs a `declare_plan` call before the first read,
    /// which the tool's description asks the model for.
    #[default]
    Planned,
    /// A call is flagged when one of its argument values appears in
    /// untrusted text and in nothing the user or a trusted source said
    /// (the module docs list what is compared). Protects against an
    /// injection that names its own recipient, link, account, file or
    /// command; costs a question (or a refusal, unattended) whenever the
    /// user's task really needs a value only an untrusted source holds
    /// (paying a bill read from a file, replying to a mail's sender).
    /// Does not stop an action the untrusted text chose whose values
    /// trusted text also holds.
    Provenance,
    /// As [`Provenance`](Self::Provenance), and every mutating call once
    /// the model has read untrusted text is flagged too. Protects also
    /// against injections that steer values the model computes or
    /// transforms; costs a question before every action after the first
    /// untrusted read.
    Strict,
}

/// Why the defence stopped a call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// The argument holding the value (a JSON pointer, `/recipient`).
    pub argument: String,
    /// The value as the call has it (shortened); empty for strict mode.
    pub value: String,
    /// The untrusted source it came from (a tool name).
    pub source: String,
    /// The mode that flagged it.
    pub mode: DefenceMode,
    /// The rule that flagged it.
    pub rule: FindingRule,
}

/// Which rule flagged a call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FindingRule {
    /// A value came from untrusted text only.
    Provenance,
    /// The action was not declared before untrusted text was read.
    NotPlanned,
    /// The action was declared with another value for [`Finding::argument`].
    PlanSaidOtherwise {
        /// The declared value (shortened).
        declared: String,
    },
    /// A plan declared after untrusted text was read.
    LatePlan,
    /// A value of an argument the plan (or a host policy) said its
    /// sources supply that those sources did not return, nor the user say.
    NotFromSources {
        /// The declared sources.
        sources: Vec<String>,
    },
    /// Strict mode: any action after untrusted text was read.
    Strict,
}

impl Finding {
    /// The reason, in words for a person and a model.
    pub fn reason(&self) -> String {
        let source = &self.source;
        match &self.rule {
            FindingRule::Strict => format!(
                "the model has read text from `{source}`, which is not trusted, and strict mode asks before every action after that"
            ),
            FindingRule::NotPlanned => format!(
                "the model chose this action after reading text from `{source}`, which is not trusted, and it is not one of the actions declared with `{PLAN_TOOL}` before that"
            ),
            FindingRule::PlanSaidOtherwise { declared } => format!(
                "`{}` is `{}`, but the action declared with `{PLAN_TOOL}` before reading text from `{source}` (not trusted) fixed it to `{declared}`",
                self.argument, self.value
            ),
            FindingRule::LatePlan => format!(
                "a plan declared after reading text from `{source}`, which is not trusted, cannot vouch for actions"
            ),
            FindingRule::NotFromSources { sources } if sources.is_empty() => format!(
                "the value `{}` in `{}` is not one the user gave, and only the user may give it (the model has read text from `{source}`, which is not trusted)",
                self.value, self.argument
            ),
            FindingRule::NotFromSources { sources } => format!(
                "the value `{}` in `{}` is not in what the tools named for it (`{}`) returned, nor in anything the user said (the model has read text from `{source}`, which is not trusted)",
                self.value,
                self.argument,
                sources.join("`, `")
            ),
            FindingRule::Provenance => format!(
                "the value `{}` in `{}` comes from text returned by `{source}`, which is not trusted, and not from anything the user or a trusted source said",
                self.value, self.argument
            ),
        }
    }

    /// A finding of the plan rules.
    pub(super) fn planned(rule: FindingRule, ledger: &Provenance) -> Self {
        Self {
            argument: String::new(),
            value: String::new(),
            source: ledger
                .first_untrusted_source()
                .unwrap_or("a tool")
                .to_owned(),
            mode: DefenceMode::Planned,
            rule,
        }
    }
}
