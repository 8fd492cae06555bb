//! The physical floor: a minimal io_uring echo server and its client driver.
//!
//! Frames are `[u32 total length LE][u32 reply length LE][padding]`. The
//! server answers each request frame with a frame of the requested reply
//! length, so request and reply have the sizes of an OPC UA Read request and
//! response. Replies produced from one receive go out in one send.

use std::os::fd::RawFd;

use crate::uring::{Ctx, Driver};

/// Default sizes: a single-value Read request and its response as encoded
/// by a None-security channel (measured by the `read` scenario's
/// bytes_out/bytes_in per op; override with --echo-req-bytes/--echo-resp-bytes).
pub const DEFAULT_REQ_BYTES: usize = 128;
pub const DEFAULT_RESP_BYTES: usize = 66;
const HEADER: usize = 8;
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Splits complete frames off `pending` + `data`, calling `f` for each frame's
/// header fields. Incomplete tails stay in `pending`.
fn frames(pending: &mut Vec<u8>, data: &[u8], mut f: impl FnMut(u32, u32)) -> Result<(), String> {
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
            let reply = u32::from_le_bytes(buf[off + 4..off + 8].try_into().unwrap());
            f(len as u32, reply);
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

fn write_frame(out: &mut Vec<u8>, len: usize, reply: usize) {
    let len = len.max(HEADER);
    let start = out.len();
    out.resize(start + len, 0);
    out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&(reply as u32).to_le_bytes());
}

#[derive(Default)]
pub struct EchoServerConn {
    pending: Vec<u8>,
}

impl Driver for EchoServerConn {
    fn start(&mut self, _now: u64, _out: &mut Vec<u8>, _ctx: &mut Ctx) -> Result<(), String> {
        Ok(())
    }

    fn on_recv(&mut self, _now: u64, data: &[u8], out: &mut Vec<u8>, _ctx: &mut Ctx) -> Result<(), String> {
        frames(&mut self.pending, data, |_, reply| write_frame(out, reply as usize, 0))
    }
}

pub struct EchoClientConn {
    pub inflight: usize,
    pub req_bytes: usize,
    pub resp_bytes: usize,
    sent_at: std::collections::VecDeque<u64>,
    pending: Vec<u8>,
}

impl EchoClientConn {
    pub fn new(inflight: usize, req_bytes: usize, resp_bytes: usize) -> Self {
        EchoClientConn {
            inflight,
            req_bytes,
            resp_bytes,
            sent_at: std::collections::VecDeque::with_capacity(inflight),
            pending: Vec::new(),
        }
    }
}

impl Driver for EchoClientConn {
    fn start(&mut self, now: u64, out: &mut Vec<u8>, ctx: &mut Ctx) -> Result<(), String> {
        for _ in 0..self.inflight {
            write_frame(out, self.req_bytes, self.resp_bytes);
            self.sent_at.push_back(now);
        }
        ctx.ready();
        Ok(())
    }

    fn on_recv(&mut self, now: u64, data: &[u8], out: &mut Vec<u8>, ctx: &mut Ctx) -> Result<(), String> {
        let sent_at = &mut self.sent_at;
        let (req, resp) = (self.req_bytes, self.resp_bytes);
        let mut missing = false;
        frames(&mut self.pending, data, |_, _| match sent_at.pop_front() {
            Some(t) => {
                ctx.complete(now.saturating_sub(t));
                if !ctx.stopping() {
                    write_frame(out, req, resp);
                    sent_at.push_back(now);
                }
            }
            None => missing = true,
        })?;
        if missing {
            return Err("echo reply without a request".into());
        }
        Ok(())
    }
}

/// A listening socket with SO_REUSEPORT (so every server thread can have one).
pub fn listen_reuseport(port: u16) -> std::io::Result<(RawFd, u16)> {
    // SAFETY: plain socket system calls on an fd we create and own.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let one: libc::c_int = 1;
        for opt in [libc::SO_REUSEADDR, libc::SO_REUSEPORT] {
            libc::setsockopt(fd, libc::SOL_SOCKET, opt, &one as *const _ as *const _, 4);
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as u16;
        addr.sin_port = port.to_be();
        addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len) != 0 {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        if libc::listen(fd, 1024) != 0 {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        let mut got: libc::sockaddr_in = std::mem::zeroed();
        let mut glen = len;
        libc::getsockname(fd, &mut got as *mut _ as *mut libc::sockaddr, &mut glen);
        Ok((fd, u16::from_be(got.sin_port)))
    }
}

/// `uaring-bench echo-server --cpus EXPR --port N`: one pinned thread per CPU,
/// each with its own SO_REUSEPORT listener and ring. Runs until killed.
pub fn echo_server_main(cpus: &[usize], port: u16) -> Result<(), String> {
    let (first_fd, port) = listen_reuseport(port).map_err(|e| format!("listen: {e}"))?;
    let mut fds = vec![first_fd];
    for _ in 1..cpus.len().max(1) {
        fds.push(listen_reuseport(port).map_err(|e| format!("listen: {e}"))?.0);
    }
    let mut handles = Vec::new();
    for (i, fd) in fds.into_iter().enumerate() {
        let cpu = cpus.get(i).copied();
        handles.push(
            std::thread::Builder::new()
                .name(format!("echo-{i}"))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        let _ = uaring_affinity::pin_current_thread(&[cpu]);
                    }
                    let shared = crate::uring::Shared::default();
                    let mut stats = crate::uring::ThreadStats::default();
                    let src = crate::uring::Source::Listen(fd, Box::new(EchoServerConn::default));
                    if let Err(e) = crate::uring::run_loop(src, &shared, &mut stats) {
                        eprintln!("echo-{i}: {e}");
                    }
                })
                .map_err(|e| e.to_string())?,
        );
    }
    println!("listening on 127.0.0.1:{port}");
    println!("benchmark server ready");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uring::{Shared, ThreadStats};

    #[test]
    fn frames_split_across_reads() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 20, 7);
        write_frame(&mut buf, 9, 100);
        let mut pending = Vec::new();
        let mut seen = Vec::new();
        for chunk in buf.chunks(3) {
            frames(&mut pending, chunk, |len, reply| seen.push((len, reply))).unwrap();
        }
        assert_eq!(seen, vec![(20, 7), (9, 100)]);
        assert!(pending.is_empty());
    }

    #[test]
    fn bad_length_is_an_error() {
        let mut pending = Vec::new();
        assert!(frames(&mut pending, &[1, 0, 0, 0, 0, 0, 0, 0], |_, _| {}).is_err());
    }

    #[test]
    fn server_answers_with_requested_size() {
        let shared = Shared::default();
        let mut stats = ThreadStats::default();
        let mut ctx = Ctx { phase: 1, stats: &mut stats, shared: &shared };
        let mut s = EchoServerConn::default();
        let mut req = Vec::new();
        write_frame(&mut req, 113, 86);
        write_frame(&mut req, 113, 86);
        let mut out = Vec::new();
        s.on_recv(0, &req, &mut out, &mut ctx).unwrap();
        assert_eq!(out.len(), 172);
        // The client counts both replies and sends two new requests.
        let mut c = EchoClientConn::new(2, 113, 86);
        let mut first = Vec::new();
        c.start(0, &mut first, &mut ctx).unwrap();
        assert_eq!(first.len(), 226);
        let mut next = Vec::new();
        c.on_recv(1000, &out, &mut next, &mut ctx).unwrap();
        assert_eq!(next.len(), 226);
        assert_eq!(ctx.stats.ops, 2);
        assert_eq!(ctx.stats.hist.max(), 1000);
    }
}
