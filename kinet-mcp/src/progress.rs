//! Routing a connection's progress notifications to the calls waiting for
//! them.
//!
//! A call learns its progress token only once its request is on its way, so
//! a fast server's first notifications can arrive before the call listens.
//! Notifications for a token nobody listens to yet are kept for a short
//! while (bounded) and handed over when the call subscribes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use tokio::sync::mpsc;

/// How long unclaimed notifications are kept.
const KEEP_EARLY: Duration = Duration::from_secs(10);
/// How many tokens with unclaimed notifications are kept, and how many
/// notifications per token.
const MAX_EARLY: usize = 64;

#[derive(Default)]
struct Routes {
    listening: HashMap<ProgressToken, mpsc::UnboundedSender<ProgressNotificationParam>>,
    early: HashMap<ProgressToken, (Instant, Vec<ProgressNotificationParam>)>,
}

/// One connection's progress routes. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct ProgressRouter {
    routes: Arc<Mutex<Routes>>,
}

impl ProgressRouter {
    /// Delivers a notification, or keeps it for a call about to listen.
    pub(crate) fn deliver(&self, notification: ProgressNotificationParam) {
        let Ok(mut routes) = self.routes.lock() else {
            return;
        };
        let token = notification.progress_token.clone();
        if let Some(listener) = routes.listening.get(&token) {
            let _ = listener.send(notification);
            return;
        }
        let now = Instant::now();
        routes
            .early
            .retain(|_, (since, _)| now.duration_since(*since) < KEEP_EARLY);
        if routes.early.len() >= MAX_EARLY && !routes.early.contains_key(&token) {
            return;
        }
        let (_, kept) = routes
            .early
            .entry(token)
            .or_insert_with(|| (now, Vec::new()));
        if kept.len() < MAX_EARLY {
            kept.push(notification);
        }
    }

    /// Listens to `token` (notifications that came early first) until the
    /// returned subscription is dropped.
    pub(crate) fn subscribe(&self, token: ProgressToken) -> Subscription {
        let (sender, receiver) = mpsc::unbounded_channel();
        if let Ok(mut routes) = self.routes.lock() {
            if let Some((_, early)) = routes.early.remove(&token) {
                for notification in early {
                    let _ = sender.send(notification);
                }
            }
            routes.listening.insert(token.clone(), sender);
        }
        Subscription {
            token,
            receiver,
            routes: Arc::clone(&self.routes),
        }
    }
}

/// The notifications of one call; unsubscribes when dropped.
pub(crate) struct Subscription {
    token: ProgressToken,
    receiver: mpsc::UnboundedReceiver<ProgressNotificationParam>,
    routes: Arc<Mutex<Routes>>,
}

impl Subscription {
    /// The next notification, once one comes.
    pub(crate) async fn next(&mut self) -> Option<ProgressNotificationParam> {
        self.receiver.recv().await
    }

    /// A notification already here, if any.
    pub(crate) fn try_next(&mut self) -> Option<ProgressNotificationParam> {
        self.receiver.try_recv().ok()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.listening.remove(&self.token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(token: i64, step: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(
            ProgressToken(rmcp::model::NumberOrString::Number(token)),
            step,
        )
    }

    #[tokio::test]
    async fn early_notifications_reach_a_late_listener_and_others_do_not() {
        let router = ProgressRouter::default();
        router.deliver(note(1, 1.0));
        router.deliver(note(2, 9.0));
        let mut first = router.subscribe(note(1, 0.0).progress_token);
        router.deliver(note(1, 2.0));
        assert_eq!(first.next().await.map(|n| n.progress), Some(1.0));
        assert_eq!(first.next().await.map(|n| n.progress), Some(2.0));
        assert!(first.try_next().is_none());
        drop(first);
        // After the listener left, notifications are kept again, bounded.
        for step in 0..200 {
            router.deliver(note(1, f64::from(step)));
        }
        let routes = router.routes.lock().unwrap();
        assert!(routes.listening.is_empty());
        assert_eq!(
            routes.early[&note(1, 0.0).progress_token].1.len(),
            MAX_EARLY
        );
    }
}
