//! A bounded single-producer/single-consumer queue for handing accepted
//! sockets from the acceptor shard to the others. Lock-free: one atomic head,
//! one atomic tail, each written by one side only.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Shared<T> {
    buf: Box<[UnsafeCell<MaybeUninit<T>>]>,
    head: AtomicUsize, // next slot to read; written by the consumer
    tail: AtomicUsize, // next slot to write; written by the producer
}

// SAFETY: a slot is written only by the producer while it is outside
// [head, tail) and read only by the consumer while it is inside; the
// Release/Acquire pairs on head and tail order those accesses.
unsafe impl<T: Send> Sync for Shared<T> {}
unsafe impl<T: Send> Send for Shared<T> {}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        let head = *self.head.get_mut();
        let tail = *self.tail.get_mut();
        for i in head..tail {
            let slot = &self.buf[i % self.buf.len()];
            // SAFETY: slots in [head, tail) hold initialised values that were never read.
            unsafe { (*slot.get()).assume_init_drop() };
        }
    }
}

/// The sending half.
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
}

/// The receiving half.
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
}

/// A queue holding at most `capacity` (≥ 1) items.
pub fn channel<T>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    let capacity = capacity.max(1);
    let buf = (0..capacity)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let shared = Arc::new(Shared {
        buf,
        head: AtomicUsize::new(0),
        tail: AtomicUsize::new(0),
    });
    (
        Producer {
            shared: shared.clone(),
        },
        Consumer { shared },
    )
}

impl<T> Producer<T> {
    /// Appends `value`, or gives it back when the queue is full.
    pub fn push(&mut self, value: T) -> Result<(), T> {
        let s = &*self.shared;
        let tail = s.tail.load(Ordering::Relaxed);
        let head = s.head.load(Ordering::Acquire);
        if tail.wrapping_sub(head) >= s.buf.len() {
            return Err(value);
        }
        // SAFETY: the slot is outside [head, tail): the consumer does not touch it.
        unsafe { (*s.buf[tail % s.buf.len()].get()).write(value) };
        s.tail.store(tail.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Items queued and not yet taken.
    pub fn len(&self) -> usize {
        let s = &*self.shared;
        s.tail
            .load(Ordering::Relaxed)
            .wrapping_sub(s.head.load(Ordering::Acquire))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most items the queue holds.
    pub fn capacity(&self) -> usize {
        self.shared.buf.len()
    }
}

impl<T> Consumer<T> {
    /// Takes the oldest item.
    pub fn pop(&mut self) -> Option<T> {
        let s = &*self.shared;
        let head = s.head.load(Ordering::Relaxed);
        let tail = s.tail.load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        // SAFETY: the slot is inside [head, tail): initialised by the producer,
        // which does not touch it until head moves past it.
        let value = unsafe { (*s.buf[head % s.buf.len()].get()).assume_init_read() };
        s.head.store(head.wrapping_add(1), Ordering::Release);
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_fifo_across_threads() {
        let (mut p, mut c) = channel::<u32>(4);
        for i in 0..4 {
            assert!(p.push(i).is_ok());
        }
        assert_eq!(p.push(9), Err(9));
        assert_eq!(c.pop(), Some(0));
        let t = std::thread::spawn(move || {
            let mut got = Vec::new();
            while got.len() < 1003 {
                if let Some(v) = c.pop() {
                    got.push(v)
                }
            }
            got
        });
        for i in 4..1004 {
            let mut v = i;
            while let Err(back) = p.push(v) {
                v = back;
                std::hint::spin_loop();
            }
        }
        let got = t.join().unwrap();
        assert_eq!(got, (1..1004).collect::<Vec<_>>());
    }

    #[test]
    fn drops_unread_items() {
        let item = Arc::new(());
        let (mut p, c) = channel(2);
        p.push(item.clone()).unwrap();
        drop(p);
        drop(c);
        assert_eq!(Arc::strong_count(&item), 1);
    }
}
