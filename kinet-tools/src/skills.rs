//! Skills: folders with a `SKILL.md` (YAML front matter `name`,
//! `description`, then the body). The system prompt lists names and
//! descriptions; `load_skill` returns a body on demand.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use kinet_core::hook::Hook;
use kinet_core::hook::HookError;
use kinet_core::provider::ChatRequest;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

/// One skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Its name (from the front matter).
    pub name: String,
    /// When to use it (from the front matter).
    pub description: String,
    /// The instructions.
    pub body: String,
    /// The skill's folder (bodies may refer to files in it).
    pub dir: PathBuf,
}

/// A skill that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillProblem {
    /// The `SKILL.md` file.
    pub file: PathBuf,
    /// What is wrong.
    pub message: String,
}

/// The skills found in the configured directories.
#[derive(Debug, Clone, Default)]
pub struct SkillRegistry {
    skills: Vec<Skill>,
    problems: Vec<SkillProblem>,
}

/// A finished block scalar (`key`, folded with `>`?, its lines) as a field:
/// folded lines join with spaces, literal ones with newlines.
fn block_scalar((key, folded, lines): (String, bool, Vec<String>)) -> (String, String) {
    let joined = if folded {
        lines.join(" ")
    } else {
        lines.join("\n")
    };
    (key, joined.trim().to_owned())
}

/// Parses a `SKILL.md`: front matter between `---` lines with `key: value`
/// entries (values may be quoted, or block scalars with `|` or `>`), then
/// the body.
pub fn parse_skill(text: &str, dir: &Path) -> Result<Skill, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err("the file must start with a `---` front matter line".into());
    }
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut closed = false;
    let mut block: Option<(String, bool, Vec<String>)> = None;
    let mut body_lines = Vec::new();
    for line in lines.by_ref() {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        if let Some((_, _, collected)) = &mut block
            && (line.starts_with(' ') || line.starts_with('\t') || line.trim().is_empty())
        {
            collected.push(line.trim().to_owned());
            continue;
        }
        if let Some(finished) = block.take() {
            fields.push(block_scalar(finished));
        }
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(format!(
                "front matter line `{}` is not `key: value`",
                line.trim()
            ));
        };
        let key = key.trim().to_owned();
        let value = value.trim();
        match value {
            "|" | "|-" | ">" | ">-" => block = Some((key, value.starts_with('>'), Vec::new())),
            _ => {
                let unquoted = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                    .unwrap_or(value);
                fields.push((key, unquoted.to_owned()));
            }
        }
    }
    if let Some(finished) = block.take() {
        fields.push(block_scalar(finished));
    }
    if !closed {
        return Err("the front matter is not closed with a `---` line".into());
    }
    body_lines.extend(lines);
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("the front matter has no `{name}`"))
    };
    Ok(Skill {
        name: field("name")?,
        description: field("description")?,
        body: body_lines.join("\n").trim().to_owned(),
        dir: dir.to_path_buf(),
    })
}

impl SkillRegistry {
    /// Reads every `<dir>/<skill>/SKILL.md` under the given directories
    /// (missing directories are skipped; a later skill with a taken name is
    /// reported and left out).
    pub fn discover(dirs: &[PathBuf]) -> Self {
        let mut registry = Self::default();
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut folders: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.join("SKILL.md").is_file())
                .collect();
            folders.sort();
            for folder in folders {
                let file = folder.join("SKILL.md");
                let parsed = std::fs::read_to_string(&file)
                    .map_err(|e| format!("cannot read: {e}"))
                    .and_then(|text| parse_skill(&text, &folder));
                match parsed {
                    Ok(skill) if registry.get(&skill.name).is_some() => {
                        registry.problems.push(SkillProblem {
                            file,
                            message: format!("a skill named `{}` already exists", skill.name),
                        })
                    }
                    Ok(skill) => registry.skills.push(skill),
                    Err(message) => registry.problems.push(SkillProblem { file, message }),
                }
            }
        }
        registry
    }

    /// The skills, in discovery order.
    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    /// Files that could not be used.
    pub fn problems(&self) -> &[SkillProblem] {
        &self.problems
    }

    /// The skill named `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// The system-prompt section listing names and descriptions.
    pub fn prompt_section(&self) -> String {
        if self.skills.is_empty() {
            return String::new();
        }
        let mut text = String::from(
            "\n\n<skills>\nSkills hold instructions for specific tasks. When a task matches one, call load_skill with its name first.\n",
        );
        for skill in &self.skills {
            text.push_str(&format!("- {}: {}\n", skill.name, skill.description));
        }
        text.push_str("</skills>");
        text
    }
}

/// Adds the skill list to the system prompt before each model call.
#[derive(Debug, Clone)]
pub struct SkillsHook {
    registry: Arc<SkillRegistry>,
}

impl SkillsHook {
    /// A hook listing `registry`'s skills.
    pub fn new(registry: Arc<SkillRegistry>) -> Self {
        Self { registry }
    }
}

#[async_trait]
impl Hook for SkillsHook {
    async fn before_model_call(&self, request: &mut ChatRequest<'_>) -> Result<(), HookError> {
        let section = self.registry.prompt_section();
        if !section.is_empty() {
            request.system.to_mut().push_str(&section);
        }
        Ok(())
    }
}

/// Arguments of `load_skill`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct LoadSkillArgs {
    /// The skill's name, as listed in the system prompt.
    pub name: String,
}

/// Returns a skill's instructions.
#[derive(Debug, Clone)]
pub struct LoadSkillTool {
    registry: Arc<SkillRegistry>,
}

impl LoadSkillTool {
    /// A tool serving `registry`'s skills.
    pub fn new(registry: Arc<SkillRegistry>) -> Self {
        Self { registry }
    }
}

#[async_trait]
impl Tool for LoadSkillTool {
    type Args = LoadSkillArgs;

    fn name(&self) -> &str {
        "load_skill"
    }

    fn description(&self) -> &str {
        "Loads the full instructions of a skill listed in the system prompt. Call it before \
         starting a task the skill covers, then follow the instructions."
    }

    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }

    async fn call(&self, args: LoadSkillArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        match self.registry.get(&args.name) {
            Some(skill) => Ok(ToolOutput::text(format!(
                "# Skill: {}\n(files it mentions are in {})\n\n{}",
                skill.name,
                skill.dir.display(),
                skill.body
            ))),
            None => {
                let names: Vec<&str> = self
                    .registry
                    .skills()
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect();
                Err(ToolError::not_found(format!(
                    "no skill named `{}`; skills: {}",
                    args.name,
                    if names.is_empty() {
                        "(none)".to_owned()
                    } else {
                        names.join(", ")
                    }
                )))
            }
        }
    }
}
