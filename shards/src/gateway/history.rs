//! HistoryRead of mirrored Variables, forwarded to their servers (docs/Gateway.md
//! "History").
//!
//! A server has one history backend, fixed when its address space is built; a server
//! started with a gateway gets this one: it serves the mirrored Variables (their
//! namespaces are the gateway's instance namespaces, marked in [`InstanceNamespaces`]) by
//! handing each operation to the gateway thread, and every other node from the server's
//! own store (`[history]`), when it has one. The service has checked the node, its
//! AccessLevel's HistoryRead (set on a mirrored Variable only when its server keeps its
//! history and forwarding is on) and the user's ReadHistory before an operation comes here.
//!
//! Continuation points: the server's resume token for a forwarded read is the downstream's
//! continuation point behind the number of the gateway's session it belongs to; a token of
//! an earlier session (the server was away and the session is new) is
//! BadContinuationPointInvalid without asking the server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use uaring_core::history::{
    HistoryBackend, HistoryCapabilities, HistoryReadOp, HistoryReply, HistoryUpdateOp,
    HistoryUpdateReply, ReadDetails, UpdateDetails,
};
use uaring_core::types::{NodeId, StatusCode};

use super::{Forward, Shared};

/// The namespace indexes that hold mirrored instances: a bit per index, set by the gateway
/// thread when it registers a server's namespaces (never cleared: an index keeps its URI).
pub(crate) struct InstanceNamespaces {
    bits: Box<[AtomicU64]>,
}

impl InstanceNamespaces {
    fn new() -> InstanceNamespaces {
        InstanceNamespaces {
            bits: (0..(1usize << 16) / 64)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    pub(crate) fn mark(&self, ns: u16) {
        if let Some(w) = self.bits.get(ns as usize / 64) {
            w.fetch_or(1 << (ns % 64), Ordering::Release);
        }
    }

    pub(crate) fn contains(&self, ns: u16) -> bool {
        self.bits
            .get(ns as usize / 64)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (ns % 64)) != 0)
    }
}

/// The history backend of a server with a gateway: forwarded reads for mirrored Variables,
/// the server's own store for the rest.
pub struct GatewayHistory {
    local: Option<Arc<dyn HistoryBackend>>,
    /// The gateway's queues, once it runs.
    shared: OnceLock<Arc<Shared>>,
    pub(crate) namespaces: Arc<InstanceNamespaces>,
    timeout_ms: u32,
}

impl std::fmt::Debug for GatewayHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayHistory")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl GatewayHistory {
    /// In front of the server's own store `local` (if any); a forwarded read unanswered
    /// after `request_timeout_ms` (and a second) is BadTimeout.
    pub fn new(local: Option<Arc<dyn HistoryBackend>>, request_timeout_ms: u32) -> GatewayHistory {
        GatewayHistory {
            local,
            shared: OnceLock::new(),
            namespaces: Arc::new(InstanceNamespaces::new()),
            timeout_ms: request_timeout_ms.saturating_add(1_000),
        }
    }

    /// The gateway runs: forwarded reads go to its queue from now on.
    pub(crate) fn attach(&self, shared: Arc<Shared>) -> bool {
        self.shared.set(shared).is_ok()
    }

    fn mirrored(&self, node: &NodeId) -> bool {
        node.namespace != 0 && self.namespaces.contains(node.namespace)
    }
}

impl HistoryBackend for GatewayHistory {
    fn capabilities(&self) -> HistoryCapabilities {
        let mut c = self
            .local
            .as_ref()
            .map(|l| l.capabilities())
            .unwrap_or_default();
        // Data reads of mirrored Variables, with every aggregate and modified values: the
        // server behind decides (its status comes back); the local store's own limits are
        // applied in `read` for its nodes.
        c.access_history_data = true;
        c.modified_values = true;
        for a in uaring_core::history::aggregate::Aggregate::ALL {
            let id = a.node_id();
            if !c.aggregates.contains(&id) {
                c.aggregates.push(id);
            }
        }
        c
    }

    fn has_history(&self, node_id: &NodeId, events: bool) -> bool {
        if !events && self.mirrored(node_id) {
            // Its AccessLevel says whether its server keeps it (checked by the service).
            return true;
        }
        self.local
            .as_ref()
            .is_some_and(|l| l.has_history(node_id, events))
    }

    fn read(&self, op: HistoryReadOp, reply: HistoryReply) {
        if !op.details.reads_events() && self.mirrored(&op.node_id) {
            match self.shared.get() {
                Some(s) => s.forward(Forward::History { op, reply }),
                None => reply.fail(StatusCode::BadHistoryOperationUnsupported),
            }
            return;
        }
        let Some(local) = &self.local else {
            reply.fail(StatusCode::BadHistoryOperationUnsupported);
            return;
        };
        // What this backend claims beyond the local store's own capabilities.
        let caps = local.capabilities();
        match &*op.details {
            ReadDetails::Raw(d) if d.is_read_modified && !caps.modified_values => {
                return reply.fail(StatusCode::BadHistoryOperationUnsupported)
            }
            ReadDetails::Processed(_)
                if op
                    .aggregate
                    .as_ref()
                    .is_some_and(|a| !caps.aggregates.contains(a)) =>
            {
                return reply.fail(StatusCode::BadAggregateNotSupported)
            }
            _ => {}
        }
        local.read(op, reply);
    }

    fn update(&self, op: HistoryUpdateOp, reply: HistoryUpdateReply) {
        let Some(local) = &self.local else {
            reply.fail(StatusCode::BadHistoryOperationUnsupported);
            return;
        };
        if let UpdateDetails::DeleteRaw(d) = &op.details {
            if d.is_delete_modified && !local.capabilities().modified_values {
                return reply.fail(StatusCode::BadHistoryOperationUnsupported);
            }
        }
        local.update(op, reply);
    }

    fn timeout_ms(&self) -> u32 {
        self.local
            .as_ref()
            .map_or(self.timeout_ms, |l| l.timeout_ms().max(self.timeout_ms))
    }
}

/// A forwarded read's resume token: the gateway's session number, then the server's
/// continuation point.
pub(super) fn token(session: u64, point: &[u8]) -> Vec<u8> {
    let mut t = Vec::with_capacity(8 + point.len());
    t.extend_from_slice(&session.to_le_bytes());
    t.extend_from_slice(point);
    t
}

/// The server's continuation point of a token, when it belongs to session `session`.
pub(super) fn point_of(token: &[u8], session: u64) -> Option<&[u8]> {
    let (n, point) = token.split_at_checked(8)?;
    (n == session.to_le_bytes() && !point.is_empty()).then_some(point)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_their_session() {
        let t = token(7, b"cp");
        assert_eq!(point_of(&t, 7), Some(&b"cp"[..]));
        assert_eq!(point_of(&t, 8), None);
        assert_eq!(point_of(&t[..5], 7), None);
        assert_eq!(point_of(&token(7, b""), 7), None);
    }

    #[test]
    fn instance_namespaces_are_marked() {
        let n = InstanceNamespaces::new();
        assert!(!n.contains(5));
        n.mark(5);
        n.mark(65535);
        assert!(n.contains(5) && n.contains(65535) && !n.contains(6));
    }
}
