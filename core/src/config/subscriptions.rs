//! `[subscriptions]`: every bound of the subscription model. Each count is a hard cap; a
//! configured 0 is rejected (it would otherwise read as "unbounded").

use serde::{Deserialize, Serialize};

/// Limits on subscriptions, monitored items and their queues (per session and per shard).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubscriptionLimits {
    /// Most subscriptions one session owns (one more CreateSubscription: BadTooManySubscriptions).
    pub max_subscriptions_per_session: u32,
    /// Most subscriptions one shard holds, orphaned ones included (BadTooManySubscriptions).
    pub max_subscriptions_per_shard: u32,
    /// Most monitored items in one subscription (BadTooManyMonitoredItems per item).
    pub max_monitored_items_per_subscription: u32,
    /// Most monitored items on one shard (BadTooManyMonitoredItems per item).
    pub max_monitored_items_per_shard: u32,
    /// Fastest publishing interval granted, ms (a smaller request is raised to it).
    pub min_publishing_interval_ms: f64,
    /// Slowest publishing interval granted, ms.
    pub max_publishing_interval_ms: f64,
    /// Fastest sampling interval granted, ms, for items that are not exception-based
    /// (a node's own MinimumSamplingInterval may raise it further).
    pub min_sampling_interval_ms: f64,
    /// Slowest sampling interval granted, ms.
    pub max_sampling_interval_ms: f64,
    /// Largest MaxKeepAliveCount granted.
    pub max_keep_alive_count: u32,
    /// Longest subscription lifetime granted, ms (LifetimeCount × publishing interval is
    /// lowered to fit, but never below 3 × MaxKeepAliveCount).
    pub max_lifetime_ms: f64,
    /// Most notifications in one NotificationMessage; a client's 0 ("no limit") and any
    /// larger request are lowered to it. More pending notifications are sent in further
    /// messages with MoreNotifications set.
    pub max_notifications_per_publish: u32,
    /// Largest queue of one monitored item (RevisedQueueSize).
    pub max_queue_size: u32,
    /// Queue size of an event monitored item that asks for 0 (Part 4 §5.12.1.5: the
    /// server's default for events). At most `max_queue_size`.
    pub default_event_queue_size: u32,
    /// Publish requests a session may have queued; one more is answered at once with
    /// BadTooManyPublishRequests.
    pub max_publish_requests_per_session: u32,
    /// NotificationMessages kept for Republish per session (all its subscriptions
    /// together); the oldest is dropped first (Republish: BadMessageNotAvailable).
    pub max_retransmission_queue_per_session: u32,
    /// Most triggering links of one monitored item (SetTriggering: BadTooManyMonitoredItems).
    pub max_triggering_links_per_item: u32,
    /// Entries of each shard's change inbox: the stores (client Writes, application pushes)
    /// on their way to the shard's exception-based items (sampling interval 0). Allocated
    /// when the shard first has such an item, about 100 bytes an entry. A store that finds it
    /// full is dropped for that shard and the items are resynchronised with the Overflow bit.
    pub change_queue_per_shard: u32,
}

impl Default for SubscriptionLimits {
    fn default() -> Self {
        SubscriptionLimits {
            max_subscriptions_per_session: 100,
            max_subscriptions_per_shard: 10_000,
            max_monitored_items_per_subscription: 1_000_000,
            max_monitored_items_per_shard: 1_000_000,
            min_publishing_interval_ms: 10.0,
            max_publishing_interval_ms: 3_600_000.0,
            min_sampling_interval_ms: 1.0,
            max_sampling_interval_ms: 3_600_000.0,
            max_keep_alive_count: 10_000,
            max_lifetime_ms: 3_600_000.0,
            max_notifications_per_publish: 65_536,
            max_queue_size: 10_000,
            default_event_queue_size: 1_000,
            max_publish_requests_per_session: 64,
            max_retransmission_queue_per_session: 100,
            max_triggering_links_per_item: 1_000,
            change_queue_per_shard: 65_536,
        }
    }
}

impl SubscriptionLimits {
    /// Checks every field; the message names the offending key.
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            (
                "max_subscriptions_per_session",
                self.max_subscriptions_per_session,
            ),
            (
                "max_subscriptions_per_shard",
                self.max_subscriptions_per_shard,
            ),
            (
                "max_monitored_items_per_subscription",
                self.max_monitored_items_per_subscription,
            ),
            (
                "max_monitored_items_per_shard",
                self.max_monitored_items_per_shard,
            ),
            ("max_keep_alive_count", self.max_keep_alive_count),
            (
                "max_notifications_per_publish",
                self.max_notifications_per_publish,
            ),
            ("max_queue_size", self.max_queue_size),
            ("default_event_queue_size", self.default_event_queue_size),
            (
                "max_publish_requests_per_session",
                self.max_publish_requests_per_session,
            ),
            (
                "max_retransmission_queue_per_session",
                self.max_retransmission_queue_per_session,
            ),
            (
                "max_triggering_links_per_item",
                self.max_triggering_links_per_item,
            ),
            ("change_queue_per_shard", self.change_queue_per_shard),
        ];
        for (name, v) in counts {
            if v == 0 {
                return Err(format!("subscriptions.{name} must be at least 1"));
            }
        }
        if self.default_event_queue_size > self.max_queue_size {
            return Err(
                "subscriptions.default_event_queue_size must be at most max_queue_size".into(),
            );
        }
        if self.change_queue_per_shard > 1 << 24 {
            return Err("subscriptions.change_queue_per_shard must be at most 16777216".into());
        }
        // A monitored item's id is its slot (at most 24 bits) and a generation.
        if self.max_monitored_items_per_shard > 1 << 24 {
            return Err(
                "subscriptions.max_monitored_items_per_shard must be at most 16777216".into(),
            );
        }
        if self.max_subscriptions_per_shard > 0xFF_FFFF {
            return Err(
                "subscriptions.max_subscriptions_per_shard must be at most 16777215".into(),
            );
        }
        let ranges = [
            (
                "publishing_interval",
                self.min_publishing_interval_ms,
                self.max_publishing_interval_ms,
            ),
            (
                "sampling_interval",
                self.min_sampling_interval_ms,
                self.max_sampling_interval_ms,
            ),
        ];
        for (name, lo, hi) in ranges {
            if !(lo.is_finite() && lo > 0.0) {
                return Err(format!(
                    "subscriptions.min_{name}_ms must be a positive number"
                ));
            }
            if !(hi.is_finite() && hi >= lo) {
                return Err(format!(
                    "subscriptions.max_{name}_ms must be a number >= min_{name}_ms"
                ));
            }
        }
        if !(self.max_lifetime_ms.is_finite()
            && self.max_lifetime_ms >= self.min_publishing_interval_ms * 3.0)
        {
            return Err(
                "subscriptions.max_lifetime_ms must be at least 3 x min_publishing_interval_ms"
                    .into(),
            );
        }
        Ok(())
    }

    /// Revised publishing interval, ms (NaN, negative and 0 mean "the fastest").
    pub fn revise_publishing_interval(&self, requested: f64) -> f64 {
        if !requested.is_finite() || requested <= 0.0 {
            return self.min_publishing_interval_ms;
        }
        requested.clamp(
            self.min_publishing_interval_ms,
            self.max_publishing_interval_ms,
        )
    }

    /// Revised (max keep-alive count, lifetime count) for a publishing interval (Part 4
    /// §5.13.2: the lifetime is at least three keep-alive periods).
    pub fn revise_counts(&self, interval_ms: f64, keep_alive: u32, lifetime: u32) -> (u32, u32) {
        let keep_alive = keep_alive.clamp(1, self.max_keep_alive_count);
        let max_lifetime =
            ((self.max_lifetime_ms / interval_ms).floor() as u64).clamp(3, u32::MAX as u64) as u32;
        let mut keep_alive = keep_alive;
        if keep_alive.saturating_mul(3) > max_lifetime {
            keep_alive = (max_lifetime / 3).max(1);
        }
        let lifetime = lifetime
            .max(keep_alive.saturating_mul(3))
            .min(max_lifetime.max(keep_alive.saturating_mul(3)));
        (keep_alive, lifetime)
    }

    /// Revised MaxNotificationsPerPublish (0 = the server's limit).
    pub fn revise_max_notifications(&self, requested: u32) -> u32 {
        if requested == 0 {
            self.max_notifications_per_publish
        } else {
            requested.min(self.max_notifications_per_publish)
        }
    }

    /// Revised queue size: at least 1, at most `max_queue_size`.
    pub fn revise_queue_size(&self, requested: u32) -> u32 {
        requested.clamp(1, self.max_queue_size)
    }

    /// Revised queue size of an event item: 0 means the server's default for events.
    pub fn revise_event_queue_size(&self, requested: u32) -> u32 {
        if requested == 0 {
            self.default_event_queue_size
        } else {
            self.revise_queue_size(requested)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_zero_is_rejected() {
        SubscriptionLimits::default().validate().unwrap();
        let l = SubscriptionLimits {
            max_queue_size: 0,
            ..Default::default()
        };
        assert!(l.validate().unwrap_err().contains("max_queue_size"));
        let l = SubscriptionLimits {
            min_sampling_interval_ms: 0.0,
            ..Default::default()
        };
        assert!(l.validate().is_err());
        let l = SubscriptionLimits {
            max_monitored_items_per_shard: (1 << 24) + 1,
            ..Default::default()
        };
        assert!(l
            .validate()
            .unwrap_err()
            .contains("max_monitored_items_per_shard"));
        let l = SubscriptionLimits {
            max_monitored_items_per_shard: 1 << 24,
            ..Default::default()
        };
        l.validate().unwrap();
    }

    #[test]
    fn revisions() {
        let l = SubscriptionLimits::default();
        assert_eq!(l.revise_publishing_interval(0.0), 10.0);
        assert_eq!(l.revise_publishing_interval(f64::NAN), 10.0);
        assert_eq!(l.revise_publishing_interval(500.0), 500.0);
        assert_eq!(l.revise_counts(1000.0, 10, 5), (10, 30));
        assert_eq!(l.revise_counts(1000.0, 0, 0), (1, 3));
        // An hour at most: 3600 intervals of 1 s.
        assert_eq!(l.revise_counts(1000.0, 5000, 100_000), (1200, 3600));
        assert_eq!(l.revise_max_notifications(0), 65_536);
        assert_eq!(l.revise_queue_size(0), 1);
        assert_eq!(l.revise_queue_size(1_000_000), 10_000);
    }
}
