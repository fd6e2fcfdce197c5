//! Resources and prompts of the connected servers: listed and read by the
//! host ([`McpHub::list_resources`], [`McpHub::read_resource`],
//! [`McpHub::list_prompts`], [`McpHub::get_prompt`] for slash-command
//! style prompt templates), and resources by the model through two tools,
//! `mcp_list_resources` and `mcp_read_resource`, offered while a ready
//! server has resources.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kinet_core::message::ImagePart;
use kinet_core::tool::DynTool;
use kinet_core::{Message, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput};
use rmcp::model::{
    ContentBlock, GetPromptRequestParams, GetPromptResponse, ReadResourceRequestParams,
    ResourceContents, Role,
};
use rmcp::service::{Peer, RoleClient};
use serde_json::Value;

pub use crate::changes::ServerChange;
use crate::errors::service_error;
use crate::hub::McpHub;
use crate::supervisor::ServerState;

/// A resource a server offers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResourceInfo {
    /// The server's name.
    pub server: String,
    /// The resource's URI (what `read_resource` takes).
    pub uri: String,
    /// Its name.
    pub name: String,
    /// What it is, when the server says.
    pub description: Option<String>,
    /// Its media type, when known.
    pub mime_type: Option<String>,
}

/// One part of a resource that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResourcePart {
    /// Text.
    Text {
        /// The part's URI.
        uri: String,
        /// Its media type, when known.
        mime_type: Option<String>,
        /// The text.
        text: String,
    },
    /// Binary data, base64-encoded as the server sent it.
    Blob {
        /// The part's URI.
        uri: String,
        /// Its media type, when known.
        mime_type: Option<String>,
        /// Base64.
        base64: String,
    },
}

/// A prompt template a server offers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PromptInfo {
    /// The server's name.
    pub server: String,
    /// The prompt's name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// Its arguments: name, description, required.
    pub arguments: Vec<(String, Option<String>, bool)>,
}

/// Why a resource or prompt request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    /// No server of that name is configured.
    #[error("no MCP server named `{0}` is configured")]
    UnknownServer(String),
    /// The server is not ready.
    #[error("the MCP server `{server}` is not connected ({state}); try again when it is ready")]
    NotConnected {
        /// The server.
        server: String,
        /// Its state, in words.
        state: String,
    },
    /// The server does not offer this.
    #[error("the MCP server `{server}` does not offer {what}")]
    Unsupported {
        /// The server.
        server: String,
        /// `resources` or `prompts`.
        what: &'static str,
    },
    /// The request failed.
    #[error("the MCP server `{server}` failed: {message}")]
    Failed {
        /// The server.
        server: String,
        /// What it or the connection said.
        message: String,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Capability {
    Resources,
    Prompts,
}

impl McpHub {
    /// The connected peer of `server` that offers `capability`.
    fn peer_for(&self, server: &str, capability: Capability) -> Result<Peer<RoleClient>, HubError> {
        let slot = self
            .slots()
            .iter()
            .find(|s| s.config.name == server)
            .ok_or_else(|| HubError::UnknownServer(server.to_owned()))?;
        let state = slot.state();
        let connection = match (&state, slot.connection()) {
            (ServerState::Ready, Some(connection)) => connection,
            _ => {
                return Err(HubError::NotConnected {
                    server: server.to_owned(),
                    state: format!("{state:?}").to_lowercase(),
                });
            }
        };
        let offered = connection
            .peer
            .peer_info()
            .is_some_and(|info| match capability {
                Capability::Resources => info.capabilities.resources.is_some(),
                Capability::Prompts => info.capabilities.prompts.is_some(),
            });
        if !offered {
            return Err(HubError::Unsupported {
                server: server.to_owned(),
                what: match capability {
                    Capability::Resources => "resources",
                    Capability::Prompts => "prompts",
                },
            });
        }
        Ok(connection.peer)
    }

    /// Ready servers offering `capability`, or just `server`.
    fn servers_with(
        &self,
        server: Option<&str>,
        capability: Capability,
    ) -> Result<Vec<(String, Peer<RoleClient>)>, HubError> {
        match server {
            Some(name) => Ok(vec![(name.to_owned(), self.peer_for(name, capability)?)]),
            None => Ok(self
                .slots()
                .iter()
                .filter_map(|slot| {
                    let name = slot.config.name.clone();
                    self.peer_for(&name, capability)
                        .ok()
                        .map(|peer| (name, peer))
                })
                .collect()),
        }
    }

    fn request_limit(&self) -> Duration {
        self.settings().tool_timeout
    }

    /// The resources of `server`, or of every ready server that has some.
    pub async fn list_resources(
        &self,
        server: Option<&str>,
    ) -> Result<Vec<ResourceInfo>, HubError> {
        let mut all = Vec::new();
        for (name, peer) in self.servers_with(server, Capability::Resources)? {
            let listed = limit(self.request_limit(), &name, peer.list_all_resources()).await;
            match listed {
                Ok(resources) => all.extend(resources.into_iter().map(|r| ResourceInfo {
                    server: name.clone(),
                    uri: r.uri.clone(),
                    name: r.name.clone(),
                    description: r.description.clone(),
                    mime_type: r.mime_type.clone(),
                })),
                // One server's failure does not hide the others' resources.
                Err(error) if server.is_none() => tracing::warn!("{error}"),
                Err(error) => return Err(error),
            }
        }
        Ok(all)
    }

    /// Reads the resource `uri` of `server`.
    pub async fn read_resource(
        &self,
        server: &str,
        uri: &str,
    ) -> Result<Vec<ResourcePart>, HubError> {
        let peer = self.peer_for(server, Capability::Resources)?;
        let result = limit(
            self.request_limit(),
            server,
            peer.read_resource(ReadResourceRequestParams::new(uri)),
        )
        .await?;
        Ok(result
            .contents
            .into_iter()
            .filter_map(|part| match part {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => Some(ResourcePart::Text {
                    uri,
                    mime_type,
                    text,
                }),
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => Some(ResourcePart::Blob {
                    uri,
                    mime_type,
                    base64: blob,
                }),
                #[allow(unreachable_patterns)]
                _ => None,
            })
            .collect())
    }

    /// Asks `server` to report changes of the resource `uri` (where the
    /// server offers subscriptions); they arrive on
    /// [`changes`](Self::changes). The subscription is renewed when the hub
    /// reconnects to the server.
    pub async fn subscribe_resource(&self, server: &str, uri: &str) -> Result<(), HubError> {
        let peer = self.peer_for(server, Capability::Resources)?;
        let offered = peer.peer_info().is_some_and(|info| {
            info.capabilities
                .resources
                .as_ref()
                .and_then(|r| r.subscribe)
                .unwrap_or(false)
        });
        if !offered {
            return Err(HubError::Unsupported {
                server: server.to_owned(),
                what: "resource subscriptions",
            });
        }
        let Some(slot) = self
            .slots()
            .iter()
            .find(|s| s.config.name == server)
            .cloned()
        else {
            return Err(HubError::UnknownServer(server.to_owned()));
        };
        if !crate::supervisor::sessionless(&peer) {
            // Revisions with `initialize`: `resources/subscribe`.
            #[allow(deprecated)]
            let subscribe = peer.subscribe(rmcp::model::SubscribeRequestParams::new(uri));
            limit(self.request_limit(), server, subscribe).await?;
            if let Ok(mut subscribed) = slot.subscriptions.lock() {
                subscribed.insert(uri.to_owned());
            }
            return Ok(());
        }
        if let Ok(mut subscribed) = slot.subscriptions.lock() {
            subscribed.insert(uri.to_owned());
        }
        // 2026-07-28: the connection listens again, for the new set; the
        // subscription holds once the server's stream accepted it.
        let mut listening = slot.listening.subscribe();
        listening.mark_unchanged();
        slot.subscriptions_changed.notify_one();
        let accepted = async {
            let _ = listening.changed().await;
            listening
                .borrow()
                .as_ref()
                .is_some_and(|accepted| accepted.contains(uri))
        };
        match limit(self.request_limit(), server, async {
            Ok::<_, rmcp::ServiceError>(accepted.await)
        })
        .await
        {
            Ok(true) => Ok(()),
            Ok(false) => {
                if let Ok(mut subscribed) = slot.subscriptions.lock() {
                    subscribed.remove(uri);
                }
                Err(HubError::Unsupported {
                    server: server.to_owned(),
                    what: "a subscription to this resource",
                })
            }
            Err(error) => Err(error),
        }
    }

    /// Changes of subscribed resources and of resource and prompt lists,
    /// from every server, as they come (a receiver that falls more than 256
    /// behind loses the oldest).
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<ServerChange> {
        self.updates().subscribe()
    }

    /// The prompt templates of `server`, or of every ready server that has
    /// some.
    pub async fn list_prompts(&self, server: Option<&str>) -> Result<Vec<PromptInfo>, HubError> {
        let mut all = Vec::new();
        for (name, peer) in self.servers_with(server, Capability::Prompts)? {
            match limit(self.request_limit(), &name, peer.list_all_prompts()).await {
                Ok(prompts) => all.extend(prompts.into_iter().map(|p| {
                    PromptInfo {
                        server: name.clone(),
                        name: p.name,
                        description: p.description,
                        arguments: p
                            .arguments
                            .unwrap_or_default()
                            .into_iter()
                            .map(|a| (a.name, a.description, a.required.unwrap_or(false)))
                            .collect(),
                    }
                })),
                Err(error) if server.is_none() => tracing::warn!("{error}"),
                Err(error) => return Err(error),
            }
        }
        Ok(all)
    }

    /// Fills in the prompt `name` of `server` with `arguments`: the
    /// messages to start (or continue) a conversation with. Text parts are
    /// kept; other content is described in a line.
    pub async fn get_prompt(
        &self,
        server: &str,
        name: &str,
        arguments: BTreeMap<String, String>,
    ) -> Result<Vec<Message>, HubError> {
        let peer = self.peer_for(server, Capability::Prompts)?;
        let arguments: serde_json::Map<String, Value> = arguments
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        let params = GetPromptRequestParams::new(name).with_arguments(arguments);
        let response = limit(self.request_limit(), server, peer.get_prompt_once(params)).await?;
        let GetPromptResponse::Complete(result) = response else {
            return Err(HubError::Failed {
                server: server.to_owned(),
                message: format!("the prompt `{name}` asks for input kinet cannot give"),
            });
        };
        Ok(result
            .messages
            .into_iter()
            .map(|message| {
                let text = match message.content {
                    ContentBlock::Text(text) => text.text,
                    ContentBlock::Resource(resource) => match resource.resource {
                        ResourceContents::TextResourceContents { text, .. } => text,
                        other => format!("[a resource: {}]", resource_uri(&other)),
                    },
                    ContentBlock::ResourceLink(link) => format!("[a resource: {}]", link.uri),
                    _ => "[non-text content]".to_owned(),
                };
                match message.role {
                    Role::Assistant => Message::assistant(text),
                    _ => Message::user(text),
                }
            })
            .collect())
    }

    /// The model's resource tools, while a ready server has resources.
    pub(crate) fn resource_tools(&self) -> Vec<Arc<dyn DynTool>> {
        if !self.settings().resource_tools
            || self
                .servers_with(None, Capability::Resources)
                .is_ok_and(|s| s.is_empty())
        {
            return Vec::new();
        }
        vec![
            Arc::new(ListResourcesTool(self.clone())),
            Arc::new(ReadResourceTool(self.clone())),
        ]
    }
}

fn resource_uri(contents: &ResourceContents) -> &str {
    match contents {
        ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. } => uri,
        #[allow(unreachable_patterns)]
        _ => "",
    }
}

/// Runs `request` within `limit`, in the user's terms on failure.
async fn limit<T>(
    limit: Duration,
    server: &str,
    request: impl Future<Output = Result<T, rmcp::ServiceError>>,
) -> Result<T, HubError> {
    match tokio::time::timeout(limit, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(HubError::Failed {
            server: server.to_owned(),
            message: service_error(&error),
        }),
        Err(_) => Err(HubError::Failed {
            server: server.to_owned(),
            message: format!("no answer within {:.0} s", limit.as_secs_f64()),
        }),
    }
}

/// The arguments of `mcp_list_resources`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ListArgs {
    /// Only this server's resources (default: every server's).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    server: Option<Value>,
}

/// `mcp_list_resources`.
struct ListResourcesTool(McpHub);

#[async_trait]
impl Tool for ListResourcesTool {
    type Args = ListArgs;

    fn name(&self) -> &str {
        "mcp_list_resources"
    }

    fn description(&self) -> &str {
        "Lists the resources the connected MCP servers offer (files, records, documents): server, URI, name and what each is."
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }

    async fn call(&self, args: ListArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        // A server that is not a string means every server, as before.
        let server = args.server.as_ref().and_then(Value::as_str);
        let listed = self
            .0
            .list_resources(server)
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?;
        if listed.is_empty() {
            return Ok(ToolOutput::text("No MCP server offers resources."));
        }
        let lines: Vec<String> = listed
            .iter()
            .map(|r| {
                let mut line = format!("{}  {}  {}", r.server, r.uri, r.name);
                if let Some(description) = &r.description {
                    line.push_str(&format!(" — {}", description.lines().next().unwrap_or("")));
                }
                line
            })
            .collect();
        Ok(ToolOutput::text(lines.join("\n")))
    }
}

/// The arguments of `mcp_read_resource`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ReadArgs {
    /// The server's name.
    server: String,
    /// The resource's URI.
    uri: String,
}

/// `mcp_read_resource`.
struct ReadResourceTool(McpHub);

#[async_trait]
impl Tool for ReadResourceTool {
    type Args = ReadArgs;

    fn name(&self) -> &str {
        "mcp_read_resource"
    }

    fn description(&self) -> &str {
        "Reads a resource of an MCP server (a file, a record, a document) by its server and URI, as listed by mcp_list_resources."
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }

    async fn call(&self, args: ReadArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let parts = self
            .0
            .read_resource(&args.server, &args.uri)
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?;
        let mut text = Vec::new();
        let mut images = Vec::new();
        for part in parts {
            match part {
                ResourcePart::Text { text: body, .. } => text.push(body),
                ResourcePart::Blob {
                    uri,
                    mime_type,
                    base64,
                } => match mime_type {
                    Some(kind) if kind.starts_with("image/") => images.push(ImagePart {
                        media_type: kind,
                        data: base64,
                    }),
                    kind => text.push(format!(
                        "[{uri}: binary, {}, {} bytes]",
                        kind.unwrap_or_else(|| "unknown type".into()),
                        base64.len() * 3 / 4
                    )),
                },
            }
        }
        let mut output = ToolOutput::text(text.join("\n\n"));
        for image in images {
            output = output.with_image(image);
        }
        Ok(output)
    }
}
