//! The one list of a call's stages, in the order a call meets them.
//!
//! [`STAGES`] is that order; [`Pipeline::stages`](super::Pipeline::stages)
//! shows it with the host's own stages where they were put
//! ([`Pipeline::with_stage`](super::Pipeline::with_stage)). The runner
//! (one for a single call and for a turn's batch) walks the same list: the
//! gate half up to [`StageName::Layers`] for each call, one call at a
//! time; then the execution half.

use std::sync::Arc;

use crate::hook::Hook;

/// A stage of the pipeline, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StageName {
    /// The tool is looked up and the arguments parsed.
    Parse,
    /// The approval policy and the rules file: run, ask or refuse; on a
    /// resume, the decision given later.
    Policy,
    /// The injection defence: an action not declared in the plan, or whose
    /// values came from others' text, is asked about (or refused when
    /// unattended).
    Defence,
    /// The host's confirmation handler, when the policy or the defence
    /// asks.
    Confirm,
    /// The hooks' [`before_tool_call`](Hook::before_tool_call), in the
    /// order they were added.
    BeforeTool,
    /// The layers (the agent's, the toolset's, the tool's, the timeout)
    /// and the tool.
    Layers,
    /// A panic in the layers or the tool becomes the call's error.
    PanicGuard,
    /// The hooks' [`after_tool_call`](Hook::after_tool_call).
    AfterTool,
    /// What the model reads of the result is truncated.
    Truncation,
    /// What the model reads is noted, with its trust, for the defence.
    Provenance,
    /// The host's `ToolCallFinished` event, the journal, the history.
    Record,
}

/// The order of the built-in stages.
pub const STAGES: [StageName; 11] = [
    StageName::Parse,
    StageName::Policy,
    StageName::Defence,
    StageName::Confirm,
    StageName::BeforeTool,
    StageName::Layers,
    StageName::PanicGuard,
    StageName::AfterTool,
    StageName::Truncation,
    StageName::Provenance,
    StageName::Record,
];

/// The two halves of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Half {
    /// Decides whether the call runs; calls pass it one at a time.
    Gate,
    /// Runs the call and records what it returned; a turn's calls that
    /// may run together do.
    Execution,
}

impl StageName {
    /// The half the stage belongs to.
    pub fn half(self) -> Half {
        match self {
            Self::Parse | Self::Policy | Self::Defence | Self::Confirm | Self::BeforeTool => {
                Half::Gate
            }
            _ => Half::Execution,
        }
    }

    /// The stage's name as [`Pipeline::stages`](super::Pipeline::stages)
    /// shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Parse => "parse",
            Self::Policy => "policy",
            Self::Defence => "defence",
            Self::Confirm => "confirm",
            Self::BeforeTool => "before-tool hooks",
            Self::Layers => "layers",
            Self::PanicGuard => "panic guard",
            Self::AfterTool => "after-tool hooks",
            Self::Truncation => "truncation",
            Self::Provenance => "provenance",
            Self::Record => "record",
        }
    }
}

/// Where a host's stage goes, next to a built-in one.
///
/// A stage runs in the gate half (its hook's
/// [`before_tool_call`](Hook::before_tool_call)) when it is placed before
/// [`StageName::Layers`], and in the execution half (its hook's
/// [`after_tool_call`](Hook::after_tool_call)) otherwise. A place before
/// [`StageName::Parse`] is taken as right after it (a call is parsed
/// first), and one after the panic guard's block or past
/// [`StageName::AfterTool`] as right before [`StageName::Truncation`]
/// (the last three stages work on what the model reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Place {
    /// Right before the stage (after host stages already there).
    Before(StageName),
    /// Right after the stage (after host stages already there).
    After(StageName),
}

/// One stage as [`Pipeline::stages`](super::Pipeline::stages) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StageInfo {
    /// The built-in stage's name, or the name the host gave its own.
    pub name: String,
    /// Its half.
    pub half: Half,
    /// Whether the host added it.
    pub host: bool,
}

/// An entry of the pipeline's list.
#[derive(Clone)]
pub(crate) enum Step {
    Builtin(StageName),
    Host {
        name: String,
        hook: Arc<dyn Hook>,
        half: Half,
    },
}

impl Step {
    pub(crate) fn info(&self) -> StageInfo {
        match self {
            Step::Builtin(name) => StageInfo {
                name: name.as_str().to_owned(),
                half: name.half(),
                host: false,
            },
            Step::Host { name, half, .. } => StageInfo {
                name: name.clone(),
                half: *half,
                host: true,
            },
        }
    }
}

/// The built-in list.
pub(crate) fn builtin() -> Vec<Step> {
    STAGES.iter().copied().map(Step::Builtin).collect()
}

/// Inserts a host's stage at `place` (see [`Place`] for the places that
/// are moved to the nearest one allowed).
pub(crate) fn insert(steps: &mut Vec<Step>, place: Place, name: String, hook: Arc<dyn Hook>) {
    let position = |stage: StageName| {
        steps
            .iter()
            .position(|step| matches!(step, Step::Builtin(s) if *s == stage))
            .unwrap_or(steps.len())
    };
    let at = match place {
        // After the host stages already in front of it.
        Place::Before(stage) => position(stage),
        Place::After(stage) => {
            let mut at = position(stage) + 1;
            while matches!(steps.get(at), Some(Step::Host { .. })) {
                at += 1;
            }
            at
        }
    };
    let first = position(StageName::Parse) + 1;
    let layers = position(StageName::Layers);
    let guard = position(StageName::PanicGuard);
    let truncation = position(StageName::Truncation);
    let at = if at > layers && at <= guard {
        // Inside the layers' block: right after it.
        guard + 1
    } else {
        at.clamp(first, truncation)
    };
    let half = if at <= layers {
        Half::Gate
    } else {
        Half::Execution
    };
    steps.insert(at, Step::Host { name, hook, half });
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;
    impl Hook for Nothing {}

    fn names(steps: &[Step]) -> Vec<String> {
        steps.iter().map(|step| step.info().name).collect()
    }

    #[test]
    fn host_stages_go_where_they_are_put_or_the_nearest_place_allowed() {
        let mut steps = builtin();
        let hook: Arc<dyn Hook> = Arc::new(Nothing);
        insert(
            &mut steps,
            Place::After(StageName::Policy),
            "a".into(),
            hook.clone(),
        );
        insert(
            &mut steps,
            Place::After(StageName::Policy),
            "b".into(),
            hook.clone(),
        );
        insert(
            &mut steps,
            Place::Before(StageName::Parse),
            "c".into(),
            hook.clone(),
        );
        insert(
            &mut steps,
            Place::After(StageName::Layers),
            "d".into(),
            hook.clone(),
        );
        insert(
            &mut steps,
            Place::After(StageName::Record),
            "e".into(),
            hook.clone(),
        );
        insert(
            &mut steps,
            Place::Before(StageName::Layers),
            "f".into(),
            hook,
        );
        assert_eq!(
            names(&steps),
            [
                "parse",
                "c",
                "policy",
                "a",
                "b",
                "defence",
                "confirm",
                "before-tool hooks",
                "f",
                "layers",
                "panic guard",
                "d",
                "after-tool hooks",
                "e",
                "truncation",
                "provenance",
                "record"
            ]
        );
        let halves: Vec<Half> = steps.iter().map(|step| step.info().half).collect();
        let layers = halves.len() - 8;
        assert!(halves[..layers].iter().all(|h| *h == Half::Gate));
        assert!(halves[layers..].iter().all(|h| *h == Half::Execution));
    }
}
