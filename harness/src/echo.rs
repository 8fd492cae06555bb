//! The echo floor: `uaring::EchoHandler` on uaring's own shard
//! runtime (the same rings, provided receive buffers, batching, pinning and
//! connection distribution as the `uaring` server), and its client driver.
//!
//! The handler sends every byte back, so a reply is its request. Frames are
//! `[u32 total length LE][u32 reserved][padding]`, 128 bytes by default: the
//! size of a single-value Read request as the `read` scenario puts it on the
//! wire (a Read response is 66 bytes, so the floor moves 62 bytes more per
//! round trip than a Read does). "uaring ÷ floor" is then the cost of the OPC
//! UA work alone.

use std::net::SocketAddr;

use uaring::runtime::{self, RuntimeOptions};
use uaring::{EchoHandler, IoBackend, RuntimeConfig};

use crate::uring::{Ctx, Driver};

/// Default frame size (request = reply).
pub const DEFAULT_FRAME_BYTES: usize = 128;
const HEADER: usize = 8;
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// `--echo-bytes`: 8 bytes (the header) up to 16 MiB.
pub fn parse_frame_bytes(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if (HEADER..=MAX_FRAME).contains(&n) {
        Ok(n)
    } else {
        Err(format!("an echo frame is {HEADER}..={MAX_FRAME} bytes"))
    }
}

/// Splits complete frames off `pending` + `data`, calling `f` with each
/// frame's length. Incomplete tails stay in `pending`.
fn frames(pending: &mut Vec<u8>, data: &[u8], mut f: impl FnMut(u32)) -> Result<(), String> {
    let mut parse = |buf: &[u8]| -> Result<usize, String> {
        let mut off = 0;
        while buf.len() - off >= HEADER {
            let len = u32::from_le_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
            if !(HEADER..=MAX_FRAME).contains(&len) {
                return Err(format!("bad echo frame length {len}"));
            }
            if buf.len() - off < len {
                break;
            }
            f(len as u32);
            off += len;
        }
        Ok(off)
    };
    if pending.is_empty() {
        let used = parse(data)?;
        pending.extend_from_slice(&data[used..]);
    } else {
        pending.extend_from_slice(data);
        let used = parse(pending)?;
        pending.drain(..used);
    }
    Ok(())
}

fn write_frame(out: &mut Vec<u8>, len: usize) {
    let len = len.max(HEADER);
    let start = out.len();
    out.resize(start + len, 0);
    out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
}

pub struct EchoClientConn {
    pub inflight: usize,
    pub frame_bytes: usize,
    sent_at: std::collections::VecDeque<u64>,
    pending: Vec<u8>,
}

impl EchoClientConn {
    pub fn new(inflight: usize, frame_bytes: usize) -> Self {
        EchoClientConn {
            inflight,
            frame_bytes,
            sent_at: std::collections::VecDeque::with_capacity(inflight),
            pending: Vec::new(),
        }
    }
}

impl Driver for EchoClientConn {
    fn start(&mut self, now: u64, out: &mut Vec<u8>, ctx: &mut Ctx) -> Result<(), String> {
        for _ in 0..self.inflight {
            write_frame(out, self.frame_bytes);
            ctx.mark(out.len());
            self.sent_at.push_back(now);
        }
        ctx.ready();
        Ok(())
    }

    fn on_recv(
        &mut self,
        now: u64,
        data: &[u8],
        out: &mut Vec<u8>,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        let sent_at = &mut self.sent_at;
        let size = self.frame_bytes;
        let mut problem = None;
        frames(&mut self.pending, data, |len| {
            if len as usize != size {
                problem.get_or_insert_with(|| {
                    format!("echo reply of {len} bytes to a request of {size}")
                });
                return;
            }
            match sent_at.pop_front() {
                Some(t) => {
                    ctx.complete(now.saturating_sub(t));
                    if !ctx.stopping() {
                        write_frame(out, size);
                        ctx.mark(out.len());
                        sent_at.push_back(now);
                    }
                }
                None => {
                    problem.get_or_insert_with(|| "echo reply without a request".to_string());
                }
            }
        })?;
        match problem {
            Some(p) => Err(p),
            None => Ok(()),
        }
    }
}

fn parse_backend(s: &str) -> Result<IoBackend, String> {
    match s {
        "auto" => Ok(IoBackend::Auto),
        "uring" => Ok(IoBackend::Uring),
        "epoll" => Ok(IoBackend::Epoll),
        other => Err(format!("--io-backend {other:?}: one of auto, uring, epoll")),
    }
}

/// `uaring-bench echo-server --cpus EXPR --port N`: uaring's shard runtime
/// (one pinned shard per CPU, its default `[runtime]` configuration) with
/// `EchoHandler` in place of the OPC UA server. Runs until SIGTERM/SIGINT.
pub fn echo_server_main(cpus: &[usize], port: u16, backend: &str) -> Result<(), String> {
    let rc = RuntimeConfig {
        io_backend: parse_backend(backend)?,
        ..Default::default()
    };
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let opts = RuntimeOptions::from_config(&rc, listen, cpus.to_vec());
    // Block the stop signals in every thread (shards inherit the mask) and
    // wait for them on this one.
    // SAFETY: sigset operations on a local set; pthread_sigmask on this thread.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let running =
        runtime::start(opts, |_shard| Ok(EchoHandler::default())).map_err(|e| e.to_string())?;
    println!("listening on {}", running.local_addr);
    println!(
        "echo floor: {} shard(s), {}",
        cpus.len().max(1),
        running.features
    );
    println!("benchmark server ready");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // SAFETY: waits for one of the blocked signals of `set`.
    while unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) } < 0 {}
    running.stop();
    running.join()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uring::{Shared, ThreadStats};

    #[test]
    fn frames_split_across_reads() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 20);
        write_frame(&mut buf, 9);
        let mut pending = Vec::new();
        let mut seen = Vec::new();
        for chunk in buf.chunks(3) {
            frames(&mut pending, chunk, |len| seen.push(len)).unwrap();
        }
        assert_eq!(seen, vec![20, 9]);
        assert!(pending.is_empty());
    }

    #[test]
    fn bad_length_is_an_error() {
        let mut pending = Vec::new();
        assert!(frames(&mut pending, &[1, 0, 0, 0, 0, 0, 0, 0], |_| {}).is_err());
        assert!(parse_frame_bytes("7").is_err());
        assert_eq!(parse_frame_bytes("128").unwrap(), 128);
    }

    #[test]
    fn client_counts_echoed_frames_and_marks_each_request() {
        let shared = Shared::default();
        let mut stats = ThreadStats::default();
        let mut marks = Vec::new();
        let mut c = EchoClientConn::new(2, 113);
        let mut first = Vec::new();
        {
            let mut ctx = Ctx {
                phase: crate::uring::PHASE_MEASURE,
                stats: &mut stats,
                shared: &shared,
                marks: Some(&mut marks),
            };
            c.start(0, &mut first, &mut ctx).unwrap();
        }
        assert_eq!(first.len(), 226);
        assert_eq!(marks, vec![113, 226]);
        // The echo handler sends the bytes back: two replies, two new requests.
        let mut next = Vec::new();
        let mut ctx = Ctx::new(crate::uring::PHASE_MEASURE, &mut stats, &shared);
        c.on_recv(1000, &first, &mut next, &mut ctx).unwrap();
        assert_eq!(next.len(), 226);
        assert_eq!(ctx.stats.ops, 2);
        assert_eq!(ctx.stats.hist.max(), 1000);
        // A reply of another size is an error, not an op.
        let mut wrong = Vec::new();
        write_frame(&mut wrong, 64);
        let mut out = Vec::new();
        assert!(c.on_recv(2000, &wrong, &mut out, &mut ctx).is_err());
        assert_eq!(ctx.stats.ops, 2);
    }
}
