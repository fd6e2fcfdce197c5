//! Notifications from servers of the 2026-07-28 revision, which have no
//! stream of their own for them (no GET stream, no session): the hub opens
//! one `subscriptions/listen` request per connection for the lists the
//! server says change and the resources the host subscribed to, and opens
//! it again when that set changes or the stream ends.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::{Peer, Subscription};

use super::{Handler, ServerSlot};
use crate::changes::ServerChange;

/// What the hub listens for on `peer`: the lists the server says change,
/// the resources subscribed to; `None` when nothing.
fn filter(peer: &Peer<RoleClient>, slot: &ServerSlot) -> Option<SubscriptionFilter> {
    let info = peer.peer_info()?;
    let capabilities = &info.capabilities;
    let changes = |list_changed: Option<bool>| list_changed.unwrap_or(false).then_some(true);
    let mut filter = SubscriptionFilter::new();
    filter.tools_list_changed = changes(capabilities.tools.as_ref().and_then(|t| t.list_changed));
    filter.prompts_list_changed =
        changes(capabilities.prompts.as_ref().and_then(|p| p.list_changed));
    let resources = capabilities.resources.as_ref();
    filter.resources_list_changed = changes(resources.and_then(|r| r.list_changed));
    if resources.and_then(|r| r.subscribe).unwrap_or(false) {
        let subscribed = slot.subscribed();
        filter.resource_subscriptions = (!subscribed.is_empty()).then_some(subscribed);
    }
    (filter != SubscriptionFilter::new()).then_some(filter)
}

/// Whether `peer` speaks a revision without `initialize` (2026-07-28),
/// whose notifications come only on a listen stream.
pub(crate) fn sessionless(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info()
        .is_some_and(|info| !info.protocol_version.has_initialize())
}

/// Opens the stream for what the hub wants now (`None` when it wants
/// nothing, or the server did not acknowledge in `timeout`), and records
/// which subscribed resources the server accepted.
pub(super) async fn open(
    peer: &Peer<RoleClient>,
    slot: &Arc<ServerSlot>,
    timeout: Duration,
) -> Option<Subscription> {
    let Some(filter) = filter(peer, slot) else {
        slot.listening.send_replace(Some(BTreeSet::new()));
        return None;
    };
    match tokio::time::timeout(timeout, peer.listen(filter)).await {
        Ok(Ok(subscription)) => {
            let accepted = subscription
                .acknowledged()
                .resource_subscriptions
                .iter()
                .flatten()
                .cloned()
                .collect();
            slot.listening.send_replace(Some(accepted));
            Some(subscription)
        }
        Ok(Err(error)) => {
            tracing::debug!(server = %slot.config.name, "subscriptions/listen failed: {error}");
            slot.listening.send_replace(Some(BTreeSet::new()));
            None
        }
        Err(_) => None,
    }
}

/// The stream's next notification; `None` once it ended (pending while
/// there is no stream).
pub(super) async fn next(subscription: &mut Option<Subscription>) -> Option<ServerNotification> {
    match subscription {
        Some(subscription) => subscription.next().await.ok().flatten(),
        None => std::future::pending().await,
    }
}

/// Hands a notification from the stream where the same notification on a
/// connection of an older revision goes.
pub(super) fn deliver(handler: &Handler, notification: ServerNotification) {
    let server = handler.server.to_string();
    match notification {
        ServerNotification::ToolListChangedNotification(_) => handler.tools_changed.notify_one(),
        ServerNotification::ResourceUpdatedNotification(updated) => {
            handler.report(ServerChange::ResourceUpdated {
                server,
                uri: updated.params.uri,
            });
        }
        ServerNotification::ResourceListChangedNotification(_) => {
            handler.report(ServerChange::ResourcesChanged { server });
        }
        ServerNotification::PromptListChangedNotification(_) => {
            handler.report(ServerChange::PromptsChanged { server });
        }
        _ => {}
    }
}
