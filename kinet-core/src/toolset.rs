//! The set of tools an agent offers: static tools plus dynamic sources.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::data::spec::ToolSpec;
use crate::layer::ToolLayer;
use crate::tooldef::{DynTool, Tool, spec_of};

/// Stands in for "no deadline" where an `Instant` is needed.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Whether `name` is a valid tool name for model APIs: 1 to 64 characters
/// of `[A-Za-z0-9_-]`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A provider of tools that can change between turns (the MCP hub).
#[async_trait]
pub trait ToolSource: Send + Sync {
    /// A short name for warnings.
    fn name(&self) -> &str;

    /// The tools available now. Called once per turn; it may wait for parts
    /// still starting, but should return what is ready by `ready_by`. The
    /// engine stops waiting at `ready_by` (plus a 50 ms grace) and goes on
    /// without this source for the turn.
    async fn tools(&self, ready_by: Instant) -> Vec<Arc<dyn DynTool>>;

    /// The tools for a turn whose model has a `window`-token context, when
    /// the agent knows it (configured, known by the model's name, or
    /// learned from the provider). A source whose offer depends on the room
    /// it may take (a large tool set that switches to search) overrides
    /// this; the default ignores the window.
    async fn tools_for_window(
        &self,
        ready_by: Instant,
        window: Option<u64>,
    ) -> Vec<Arc<dyn DynTool>> {
        let _ = window;
        self.tools(ready_by).await
    }
}

/// Layers, shared.
pub(crate) type Layers = Arc<[Arc<dyn ToolLayer>]>;

/// A tool and the layers of its own.
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) tool: Arc<dyn DynTool>,
    pub(crate) layers: Layers,
}

/// The tools of one turn: looked up by name, described to the model.
#[derive(Clone)]
pub struct ToolSnapshot {
    by_name: HashMap<String, Entry>,
    specs: Vec<ToolSpec>,
    warnings: Vec<String>,
    layers: Layers,
}

impl Default for ToolSnapshot {
    fn default() -> Self {
        Self {
            by_name: HashMap::new(),
            specs: Vec::new(),
            warnings: Vec::new(),
            layers: Arc::new([]),
        }
    }
}

impl ToolSnapshot {
    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn DynTool>> {
        self.by_name.get(name).map(|entry| &entry.tool)
    }

    /// The tool named `name` with its own layers.
    pub(crate) fn entry(&self, name: &str) -> Option<&Entry> {
        self.by_name.get(name)
    }

    /// The layers of the whole toolset (outside each tool's own).
    pub(crate) fn layers(&self) -> &Layers {
        &self.layers
    }

    /// What the model is told, in registration order (static tools first).
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// Names of all tools, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.specs.iter().map(|s| s.name.as_str())
    }

    /// Problems met while collecting (a source not ready, duplicate names).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn insert(
        &mut self,
        tool: Arc<dyn DynTool>,
        spec: ToolSpec,
        layers: Layers,
    ) -> Result<(), String> {
        if self.by_name.contains_key(&spec.name) {
            return Err(spec.name);
        }
        let entry = Entry { tool, layers };
        self.by_name.insert(spec.name.clone(), entry);
        self.specs.push(spec);
        Ok(())
    }
}

impl fmt::Debug for ToolSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSnapshot")
            .field("tools", &self.names().collect::<Vec<_>>())
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// Static tools plus dynamic [`ToolSource`]s, with optional
/// [layers](crate::layer) for the whole set or for one tool.
///
/// Static tool schemas are generated once, when the tool is added. A static
/// tool added under an existing name replaces it; a dynamic tool whose name is
/// taken is left out of that turn with a warning.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput, Toolset};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct NoArgs {}
/// struct Clock;
/// #[async_trait::async_trait]
/// impl Tool for Clock {
///     type Args = NoArgs;
///     fn name(&self) -> &str { "clock" }
///     fn description(&self) -> &str { "Tells the time." }
///     async fn call(&self, _: NoArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
///         Ok(ToolOutput::text("noon"))
///     }
/// }
///
/// let tools = Toolset::new().with(Clock);
/// let snapshot = tools.snapshot().await;
/// assert_eq!(snapshot.names().collect::<Vec<_>>(), ["clock"]);
/// # }
/// ```
#[derive(Clone)]
pub struct Toolset {
    statics: Arc<ToolSnapshot>,
    /// Each source with the layers of the set it was merged from (empty
    /// for a source added here).
    sources: Vec<(Arc<dyn ToolSource>, Layers)>,
    readiness: Duration,
}

impl Default for Toolset {
    fn default() -> Self {
        Self {
            statics: Arc::new(ToolSnapshot::default()),
            sources: Vec::new(),
            readiness: Duration::from_secs(2),
        }
    }
}

impl fmt::Debug for Toolset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Toolset")
            .field("tools", &self.statics.names().collect::<Vec<_>>())
            .field(
                "sources",
                &self
                    .sources
                    .iter()
                    .map(|(s, _)| s.name())
                    .collect::<Vec<_>>(),
            )
            .field("readiness", &self.readiness)
            .finish()
    }
}

impl Toolset {
    /// An empty toolset with a 2-second readiness deadline.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a typed tool.
    pub fn with(mut self, tool: impl Tool) -> Self {
        self.add(tool);
        self
    }

    /// Adds a typed tool.
    pub fn add(&mut self, tool: impl Tool) {
        self.add_dyn(Arc::new(tool));
    }

    /// Adds a typed tool with layers of its own (inside the toolset's and
    /// the agent's, first listed outermost).
    pub fn add_layered(&mut self, tool: impl Tool, layers: Vec<Arc<dyn ToolLayer>>) {
        self.insert_static(Arc::new(tool), layers.into());
    }

    /// Adds a layer around every tool of this set, sources' tools included
    /// (inside the agent's layers, outside each tool's own; the first added
    /// is the outermost). Default: none.
    pub fn layer(mut self, layer: impl ToolLayer) -> Self {
        let statics = Arc::make_mut(&mut self.statics);
        let mut layers = statics.layers.to_vec();
        layers.push(Arc::new(layer));
        statics.layers = layers.into();
        self
    }

    /// Adds a tool in its dynamic form, replacing one of the same name. A
    /// tool whose name model APIs would reject (see [`is_valid_tool_name`])
    /// is left out, with a warning reported every turn.
    pub fn add_dyn(&mut self, tool: Arc<dyn DynTool>) {
        self.insert_static(tool, Arc::new([]));
    }

    fn insert_static(&mut self, tool: Arc<dyn DynTool>, layers: Layers) {
        let spec = spec_of(&*tool);
        let statics = Arc::make_mut(&mut self.statics);
        if !is_valid_tool_name(&spec.name) {
            statics.warnings.push(format!(
                "tool `{}` was left out: names must be 1-64 characters of A-Z, a-z, 0-9, _ and -",
                spec.name.escape_debug()
            ));
            return;
        }
        let entry = Entry { tool, layers };
        if let Some(pos) = statics.specs.iter().position(|s| s.name == spec.name) {
            statics.specs[pos] = spec.clone();
            statics.by_name.insert(spec.name, entry);
        } else {
            statics.by_name.insert(spec.name.clone(), entry);
            statics.specs.push(spec);
        }
    }

    /// Adds a dynamic source.
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push((source, Arc::new([])));
    }

    /// Adds every tool and source of `other` (a tool pack's set), replacing
    /// static tools of the same name. `other`'s own layers keep wrapping
    /// its tools, inside this set's layers; its readiness deadline is not
    /// taken.
    ///
    /// ```
    /// use kinet_core::Toolset;
    /// # use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
    /// # #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// # struct NoArgs {}
    /// # struct Named(&'static str);
    /// # #[async_trait::async_trait]
    /// # impl Tool for Named {
    /// #     type Args = NoArgs;
    /// #     fn name(&self) -> &str { self.0 }
    /// #     fn description(&self) -> &str { "A tool." }
    /// #     async fn call(&self, _: NoArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
    /// #         Ok(ToolOutput::text(self.0))
    /// #     }
    /// # }
    /// let mut tools = Toolset::new().with(Named("read"));
    /// tools.merge(Toolset::new().with(Named("remember")));
    /// assert_eq!(tools.static_tools().names().collect::<Vec<_>>(), ["read", "remember"]);
    /// ```
    pub fn merge(&mut self, other: Toolset) {
        let set_layers = Arc::clone(&other.statics.layers);
        for spec in other.statics.specs() {
            if let Some(entry) = other.statics.entry(&spec.name) {
                let layers: Layers = set_layers
                    .iter()
                    .chain(entry.layers.iter())
                    .cloned()
                    .collect();
                self.insert_static(Arc::clone(&entry.tool), layers);
            }
        }
        for (source, layers) in other.sources {
            let layers: Layers = set_layers.iter().chain(layers.iter()).cloned().collect();
            self.sources.push((source, layers));
        }
    }

    /// [`merge`](Self::merge), by value.
    pub fn merged(mut self, other: Toolset) -> Self {
        self.merge(other);
        self
    }

    /// Adds a dynamic source.
    pub fn with_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.add_source(source);
        self
    }

    /// How long a turn waits for dynamic sources. Default 2 s.
    pub fn readiness_deadline(mut self, deadline: Duration) -> Self {
        self.readiness = deadline;
        self
    }

    /// The readiness deadline.
    pub(crate) fn readiness(&self) -> Duration {
        self.readiness
    }

    /// Keeps only the static tools for which `keep` returns true (sources
    /// are kept as they are).
    pub fn retain(&mut self, mut keep: impl FnMut(&dyn DynTool) -> bool) {
        let statics = Arc::make_mut(&mut self.statics);
        let by_name = &mut statics.by_name;
        statics.specs.retain(|spec| {
            let kept = by_name
                .get(&spec.name)
                .is_some_and(|entry| keep(&*entry.tool));
            if !kept {
                by_name.remove(&spec.name);
            }
            kept
        });
    }

    /// The static tools only, without asking any source.
    pub fn static_tools(&self) -> &ToolSnapshot {
        &self.statics
    }

    /// Whether a tool here may act: a static tool that is not read-only,
    /// or a tool source (whose tools are known only when asked).
    pub fn may_act(&self) -> bool {
        !self.sources.is_empty()
            || self
                .statics
                .by_name
                .values()
                .any(|entry| !entry.tool.annotations().read_only)
    }

    /// Whether the set has no tools and no tool sources.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty() && self.statics.specs().is_empty()
    }

    /// The tools for one turn: static tools, then each source's tools as of
    /// the readiness deadline. Sources are asked concurrently.
    pub async fn snapshot(&self) -> Arc<ToolSnapshot> {
        self.snapshot_for_window(None).await
    }

    /// [`snapshot`](Self::snapshot) for a model whose context window is
    /// `window` tokens (sources see it: [`ToolSource::tools_for_window`]).
    pub async fn snapshot_for_window(&self, window: Option<u64>) -> Arc<ToolSnapshot> {
        if self.sources.is_empty() {
            return Arc::clone(&self.statics);
        }
        let now = Instant::now();
        let ready_by = now.checked_add(self.readiness).unwrap_or(now + FAR_FUTURE);
        let grace = ready_by
            .checked_add(Duration::from_millis(50))
            .unwrap_or(ready_by);
        let answers =
            futures::future::join_all(self.sources.iter().map(|(source, layers)| async move {
                let tools =
                    tokio::time::timeout_at(grace, source.tools_for_window(ready_by, window)).await;
                (source.name(), layers, tools)
            }))
            .await;
        let mut snapshot = (*self.statics).clone();
        for (source, layers, tools) in answers {
            match tools {
                Ok(tools) => {
                    for tool in tools {
                        let spec = spec_of(&*tool);
                        if !is_valid_tool_name(&spec.name) {
                            snapshot.warnings.push(format!(
                                "tool `{}` from source `{source}` was left out: its name is not valid for model APIs",
                                spec.name.escape_debug()
                            ));
                            continue;
                        }
                        if let Err(name) = snapshot.insert(tool, spec, Arc::clone(layers)) {
                            snapshot.warnings.push(format!(
                                "tool `{name}` from source `{source}` was left out: the name is taken"
                            ));
                        }
                    }
                }
                Err(_) => snapshot.warnings.push(format!(
                    "tool source `{source}` was not ready within {:?}; its tools join a later turn",
                    self.readiness
                )),
            }
        }
        Arc::new(snapshot)
    }
}
