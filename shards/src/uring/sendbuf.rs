//! Registered send buffers (`runtime.fixed_send_buffers`): a shard's region of buffers
//! registered once in its ring's buffer table, lent to connections as their output buffers.
//!
//! Each buffer is an ordinary `Vec<u8>` of exactly `bytes` capacity whose memory is registered
//! at its index (the kernel pins its pages; without CAP_IPC_LOCK they are charged to
//! RLIMIT_MEMLOCK once, at start). A connection takes two: the handler appends its responses to
//! one while the other is on the wire, and a send from one names it by index instead of by
//! address, so the kernel neither walks the page tables nor pins the pages per send. A buffer
//! the handler grows past its capacity is moved by the allocator: it is no longer the
//! registered memory, so its batch goes out as an ordinary send and the index is given new
//! memory ([`SendBufs::replace`]). Whether a lent buffer is still the registered one is
//! exact: its address and capacity are those registered ([`SendBufs::intact`]), because a
//! connection's output buffer only grows between two checks (it is checked each time it
//! becomes the batch on the wire, and a buffer of at most 64 KiB is never shrunk).

use std::io;
use std::os::fd::AsRawFd;

use io_uring::{opcode, types, IoUring};

/// IORING_RECVSEND_FIXED_BUF: the send names a registered buffer (`buf_index`).
pub(crate) const RECVSEND_FIXED_BUF: u16 = 1 << 2;

/// The user_data of the one send that asks whether plain sends may name a registered buffer.
const PROBE_USER_DATA: u64 = u64::MAX - 7;

pub(crate) struct SendBufs {
    bytes: usize,
    /// The address each index is registered at.
    bases: Vec<usize>,
    /// Buffers not lent to a connection, with their index.
    home: Vec<(u16, Vec<u8>)>,
    /// Indexes the kernel would not give new memory ([`SendBufs::replace`]).
    retired: usize,
    /// Plain sends (IORING_OP_SEND) may name a registered buffer too.
    pub plain: bool,
}

fn iovec(v: &mut Vec<u8>) -> libc::iovec {
    libc::iovec {
        iov_base: v.as_mut_ptr().cast(),
        iov_len: v.capacity(),
    }
}

impl SendBufs {
    /// Allocates `count` buffers of `bytes` and registers them at indexes 0.. of `ring`'s
    /// sparse buffer table (one IORING_REGISTER_BUFFERS_UPDATE: the kernel pins and charges
    /// them now). Then sends one byte from buffer 0 over a socket pair with
    /// IORING_OP_SEND + IORING_RECVSEND_FIXED_BUF to learn whether plain sends may name them.
    /// Must run on the ring's thread before anything else is queued on it.
    pub fn register(ring: &mut IoUring, count: u32, bytes: u32) -> io::Result<SendBufs> {
        let bytes = bytes as usize;
        let mut bufs: Vec<Vec<u8>> = (0..count).map(|_| Vec::with_capacity(bytes)).collect();
        let iovecs: Vec<libc::iovec> = bufs.iter_mut().map(iovec).collect();
        // SAFETY: each iovec is the whole allocation of a Vec this struct owns from now on; a
        // Vec freed while registered (one that grew) leaves its pages pinned by the kernel, not
        // dangling, and is replaced before its index is named again.
        unsafe { ring.submitter().register_buffers_update(0, &iovecs, None)? };
        let bases = bufs.iter().map(|v| v.as_ptr() as usize).collect();
        let home = bufs
            .into_iter()
            .enumerate()
            .rev()
            .map(|(i, v)| (i as u16, v))
            .collect();
        let mut s = SendBufs {
            bytes,
            bases,
            home,
            retired: 0,
            plain: false,
        };
        s.plain = count > 0 && s.probe_plain(ring);
        Ok(s)
    }

    /// One byte from buffer 0 over a socket pair with a plain fixed-buffer send.
    fn probe_plain(&mut self, ring: &mut IoUring) -> bool {
        let Ok((a, b)) = std::os::unix::net::UnixStream::pair() else {
            return false;
        };
        let Some(base) = self.bases.first().copied() else {
            return false;
        };
        let e = opcode::Send::new(types::Fd(a.as_raw_fd()), base as *const u8, 1)
            .ioprio(RECVSEND_FIXED_BUF)
            .buf_group(0)
            .build()
            .user_data(PROBE_USER_DATA);
        // SAFETY: the byte is buffer 0's, owned by `self`, and the completion is awaited here.
        if unsafe { ring.submission().push(&e) }.is_err() {
            return false;
        }
        let mut res = None;
        while res.is_none() {
            if ring.submit_and_wait(1).is_err() {
                // Without the completion the byte may still be read: keep the buffer (it is
                // registered memory we own), just say no.
                return false;
            }
            for cqe in ring.completion() {
                if cqe.user_data() == PROBE_USER_DATA {
                    res = Some(cqe.result());
                }
            }
        }
        drop((a, b));
        res == Some(1)
    }

    /// The size of each buffer.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Buffers lent to connections now.
    pub fn lent(&self) -> usize {
        self.bases.len() - self.home.len() - self.retired
    }

    /// A buffer to lend (empty, `bytes` capacity), with its index; `None` when all are lent.
    pub fn take(&mut self) -> Option<(u16, Vec<u8>)> {
        self.home.pop()
    }

    /// `v` is still the memory registered at `index`.
    pub fn intact(&self, index: u16, v: &Vec<u8>) -> bool {
        self.bases.get(index as usize) == Some(&(v.as_ptr() as usize)) && v.capacity() == self.bytes
    }

    /// Takes back the buffer lent as `index`: kept when it is still the registered memory,
    /// else (it grew, and the allocator moved it) the index gets new memory. Returns false
    /// when it had to be replaced.
    pub fn give_back(&mut self, ring: &IoUring, index: u16, mut v: Vec<u8>) -> bool {
        if self.intact(index, &v) {
            v.clear();
            self.home.push((index, v));
            true
        } else {
            drop(v);
            self.replace(ring, index);
            false
        }
    }

    /// Gives `index` new memory (its buffer grew and was moved: the kernel still pins the old
    /// pages until this update) and takes it home. An index the kernel will not update is
    /// retired (logged): the region has one buffer less.
    pub fn replace(&mut self, ring: &IoUring, index: u16) {
        let mut v = Vec::with_capacity(self.bytes);
        let iov = iovec(&mut v);
        // SAFETY: as in `register`: `v` is owned here from now on.
        match unsafe {
            ring.submitter()
                .register_buffers_update(u32::from(index), &[iov], None)
        } {
            Ok(_) => {
                if let Some(b) = self.bases.get_mut(index as usize) {
                    *b = v.as_ptr() as usize;
                }
                self.home.push((index, v));
            }
            Err(e) => {
                tracing::warn!(
                    index,
                    "cannot register new memory for a send buffer that grew ({e}): one buffer less"
                );
                if let Some(b) = self.bases.get_mut(index as usize) {
                    // Never intact again: no Vec has address 0.
                    *b = 0;
                }
                self.retired += 1;
            }
        }
    }
}
