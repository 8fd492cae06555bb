//! Reused buffers: message bodies and encoded responses come from here and go back when a
//! message is acknowledged (or dropped) and when a response has been chunked; bounded in count,
//! in size each and in bytes together.

use super::*;

/// Buffers reused across messages, so a steady stream of NotificationMessages allocates
/// nothing: message bodies return when their message is acknowledged or dropped, response
/// buffers when the connection has chunked them. Bounded: at most `POOL_MAX` of each kind
/// are kept, a buffer that grew past `POOL_BUFFER_MAX_BYTES` is dropped, and the byte
/// buffers kept hold at most `POOL_BUFFER_BYTES_MAX` of capacity together (a burst of large
/// messages does not leave `POOL_MAX` × 4 MiB behind).
#[derive(Default)]
pub(super) struct Pools {
    buffers: Vec<Vec<u8>>,
    /// Capacity of `buffers` together, in bytes.
    buffer_bytes: usize,
    eo_vecs: Vec<Vec<ExtensionObject>>,
    /// Acknowledgement results of Publish requests (one list per request in the queue).
    results: Vec<Vec<StatusCode>>,
    /// The notification lists [`build_message`] fills, lent to it and given back.
    pub(super) notes: Vec<MonitoredItemNotification>,
    pub(super) events: Vec<crate::generated::types::EventFieldList>,
}

pub(super) const POOL_MAX: usize = 256;

pub(super) const POOL_BUFFER_MAX_BYTES: usize = 4 << 20;

pub(super) const POOL_BUFFER_BYTES_MAX: usize = 16 << 20;

impl Pools {
    pub(super) fn buffer(&mut self) -> Vec<u8> {
        match self.buffers.pop() {
            Some(b) => {
                self.buffer_bytes = self.buffer_bytes.saturating_sub(b.capacity());
                b
            }
            None => Vec::new(),
        }
    }
    pub(super) fn put_buffer(&mut self, mut b: Vec<u8>) {
        let cap = b.capacity();
        if self.buffers.len() < POOL_MAX
            && cap <= POOL_BUFFER_MAX_BYTES
            && self.buffer_bytes.saturating_add(cap) <= POOL_BUFFER_BYTES_MAX
        {
            b.clear();
            self.buffer_bytes += cap;
            self.buffers.push(b);
        }
    }
    pub(super) fn results(&mut self) -> Vec<StatusCode> {
        self.results.pop().unwrap_or_default()
    }
    pub(super) fn put_results(&mut self, mut r: Vec<StatusCode>) {
        // Bounded like the other lists; a request acknowledges at most a few messages.
        if self.results.len() < POOL_MAX && r.capacity() <= 1024 {
            r.clear();
            self.results.push(r);
        }
    }
    pub(super) fn eo_vec(&mut self) -> Vec<ExtensionObject> {
        self.eo_vecs.pop().unwrap_or_default()
    }
    pub(super) fn put_message(&mut self, m: NotificationMessage) {
        let mut v = m.notification_data;
        for eo in v.drain(..) {
            if let crate::types::ExtensionObjectBody::Binary(b) = eo.body {
                self.put_buffer(b);
            }
        }
        if self.eo_vecs.len() < POOL_MAX {
            self.eo_vecs.push(v);
        }
    }
}

#[cfg(test)]
mod pool_tests {
    use super::*;

    /// The byte buffers kept are bounded in count, in size each and in capacity together, and
    /// the running total follows what is taken out again.
    #[test]
    pub(super) fn pooled_buffers_are_bounded_in_total_bytes() {
        let mut p = Pools::default();
        for _ in 0..10 {
            p.put_buffer(Vec::with_capacity(4 << 20));
        }
        assert_eq!(p.buffers.len(), POOL_BUFFER_BYTES_MAX / (4 << 20));
        assert!(p.buffer_bytes <= POOL_BUFFER_BYTES_MAX);
        p.put_buffer(Vec::with_capacity(POOL_BUFFER_MAX_BYTES + 1));
        assert_eq!(
            p.buffers.len(),
            4,
            "a buffer past the size bound is dropped"
        );
        let b = p.buffer();
        assert!(b.is_empty() && b.capacity() >= 4 << 20);
        assert_eq!(
            p.buffer_bytes,
            p.buffers.iter().map(Vec::capacity).sum::<usize>()
        );
        p.put_buffer(b);
        while !p.buffers.is_empty() {
            drop(p.buffer());
        }
        assert_eq!(p.buffer_bytes, 0);
        for _ in 0..(POOL_MAX + 10) {
            p.put_buffer(Vec::with_capacity(64));
        }
        assert_eq!(p.buffers.len(), POOL_MAX, "at most POOL_MAX buffers");
        assert_eq!(
            p.buffer_bytes,
            p.buffers.iter().map(Vec::capacity).sum::<usize>()
        );
    }
}
