//! A provided-buffer ring (IORING_REGISTER_PBUF_RING, kernel 5.19+): the
//! kernel picks a buffer for each multishot receive and names it in the CQE.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

/// `entries` buffers of `buf_bytes` each, registered as group `bgid`.
pub struct BufRing {
    ring: NonNull<BufRingEntry>,
    ring_bytes: usize,
    entries: u16,
    mask: u16,
    tail: u16,
    bufs: Box<[u8]>,
    buf_bytes: usize,
    bgid: u16,
    /// The buffer pushed after each buffer (receive bundles): the kernel takes ring entries
    /// in the order they were pushed, and a bundle's completion names only its first buffer.
    next: Box<[u16]>,
    /// The buffer pushed last.
    last: Option<u16>,
}

impl BufRing {
    /// Maps the ring, fills it with every buffer and registers it on `uring`.
    pub fn new(uring: &IoUring, entries: u16, buf_bytes: usize, bgid: u16) -> io::Result<BufRing> {
        if entries == 0 || !entries.is_power_of_two() || entries > 32768 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "buffer ring entries must be a power of two ≤ 32768",
            ));
        }
        let ring_bytes =
            (entries as usize * std::mem::size_of::<BufRingEntry>()).div_ceil(4096) * 4096;
        // SAFETY: anonymous private mapping; checked for MAP_FAILED below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ring = NonNull::new(addr as *mut BufRingEntry)
            .ok_or_else(|| io::Error::other("mmap returned null"))?;
        let total = (entries as usize)
            .checked_mul(buf_bytes)
            .ok_or_else(|| io::Error::other("buffer size overflow"))?;
        let mut br = BufRing {
            ring,
            ring_bytes,
            entries,
            mask: entries - 1,
            tail: 0,
            bufs: vec![0u8; total].into_boxed_slice(),
            buf_bytes,
            bgid,
            next: vec![0u16; entries as usize].into_boxed_slice(),
            last: None,
        };
        for bid in 0..entries {
            br.push(bid);
        }
        br.publish();
        // SAFETY: the mapping is page aligned, `entries` long, and lives until
        // `Drop`, which happens after the ring is unregistered or the io_uring closed
        // (the owner drops the BufRing before the IoUring, and unregisters first).
        unsafe {
            uring.submitter().register_buf_ring_with_flags(
                ring.as_ptr() as u64,
                entries,
                bgid,
                0,
            )?
        };
        Ok(br)
    }

    pub fn bgid(&self) -> u16 {
        self.bgid
    }

    pub fn buf_bytes(&self) -> usize {
        self.buf_bytes
    }

    pub fn entries(&self) -> u16 {
        self.entries
    }

    /// The first `len` bytes of buffer `bid` (as named in a CQE).
    pub fn get(&self, bid: u16, len: usize) -> &[u8] {
        let start = (bid & self.mask) as usize * self.buf_bytes;
        &self.bufs[start..start + len.min(self.buf_bytes)]
    }

    /// Gives buffer `bid` back to the kernel (visible after [`BufRing::publish`]).
    pub fn push(&mut self, bid: u16) {
        let bid = bid & self.mask;
        let idx = (self.tail & self.mask) as usize;
        let addr = self.bufs.as_ptr() as u64 + bid as u64 * self.buf_bytes as u64;
        // SAFETY: idx < entries, inside the mapping.
        let entry = unsafe { &mut *self.ring.as_ptr().add(idx) };
        entry.set_addr(addr);
        entry.set_len(self.buf_bytes as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        if let Some(l) = self.last {
            self.next[(l & self.mask) as usize] = bid;
        }
        self.last = Some(bid);
    }

    /// The buffers a receive of `len` bytes filled, first to last, starting at `first` (the
    /// buffer its completion names): each full but the last — `first` alone unless the receive
    /// was a bundle. Read before any of them is pushed back.
    pub fn bundle(&self, first: u16, len: usize, into: &mut Vec<u16>) {
        into.clear();
        let count = len.div_ceil(self.buf_bytes).clamp(1, self.entries as usize);
        let mut bid = first & self.mask;
        for _ in 0..count {
            into.push(bid);
            bid = self.next[bid as usize] & self.mask;
        }
    }

    /// Publishes pushed buffers to the kernel (one release store per loop iteration).
    pub fn publish(&mut self) {
        // SAFETY: the tail field overlaps the first entry's `resv`, as the
        // kernel's io_uring_buf_ring defines; it is 2-byte aligned in the mapping.
        unsafe {
            let tail = BufRingEntry::tail(self.ring.as_ptr()) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    /// Unregisters the group from `uring`.
    pub fn unregister(&self, uring: &IoUring) {
        let _ = uring.submitter().unregister_buf_ring(self.bgid);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: the mapping was created in `new` with this length.
        unsafe { libc::munmap(self.ring.as_ptr() as *mut libc::c_void, self.ring_bytes) };
    }
}
