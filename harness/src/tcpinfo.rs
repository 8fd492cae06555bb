//! TCP segment counts of the load client's own sockets, from the kernel's `TCP_INFO`.
//!
//! Every load connection is registered in [`crate::uring::Shared::sockets`]; the run samples
//! all of them right before the window opens and right after it closes (the same instants as
//! the CPU samples). On the client's socket, `tcpi_data_segs_in` counts the segments with
//! payload the *server* sent and `tcpi_data_segs_out` those the client sent; pure ACKs are in
//! `tcpi_segs_in/out` only. Per-socket counters, unlike /proc/net/snmp, see nothing of the
//! machine's other TCP traffic. Needs Linux ≥ 4.6 (data_segs_*); older kernels report nothing.

use std::os::fd::RawFd;

/// Summed counters of a set of sockets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segments {
    /// Segments received (data and pure ACKs).
    pub segs_in: u64,
    /// Segments sent (data and pure ACKs).
    pub segs_out: u64,
    /// Segments received that carried payload (the server's data segments).
    pub data_segs_in: u64,
    /// Segments sent that carried payload (the client's data segments).
    pub data_segs_out: u64,
}

// Offsets in struct tcp_info (include/uapi/linux/tcp.h): after 8 one-byte fields, 24 u32s and
// 4 u64s come tcpi_segs_out @136, tcpi_segs_in @140, tcpi_notsent_bytes @144,
// tcpi_min_rtt @148, tcpi_data_segs_in @152, tcpi_data_segs_out @156.
const SEGS_OUT: usize = 136;
const SEGS_IN: usize = 140;
const DATA_SEGS_IN: usize = 152;
const DATA_SEGS_OUT: usize = 156;
const NEEDED: usize = DATA_SEGS_OUT + 4;

fn u32_at(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u64::from(u32::from_ne_bytes(b))
}

/// The counters of one socket, or `None` when it is not a TCP socket any more or the kernel
/// is too old to report them.
pub fn sample_socket(fd: RawFd) -> Option<Segments> {
    let mut buf = [0u8; 256];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `buf` and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 || (len as usize) < NEEDED {
        return None;
    }
    Some(Segments {
        segs_in: u32_at(&buf, SEGS_IN),
        segs_out: u32_at(&buf, SEGS_OUT),
        data_segs_in: u32_at(&buf, DATA_SEGS_IN),
        data_segs_out: u32_at(&buf, DATA_SEGS_OUT),
    })
}

/// One sample per socket, in the order of `fds` (`None` where unavailable).
pub fn sample(fds: &[RawFd]) -> Vec<Option<Segments>> {
    fds.iter().map(|&fd| sample_socket(fd)).collect()
}

/// Summed per-socket differences between two samples of the same sockets; sockets missing
/// from either sample are left out. `None` when no socket has both samples.
pub fn delta(before: &[Option<Segments>], after: &[Option<Segments>]) -> Option<Segments> {
    let mut total = Segments::default();
    let mut any = false;
    for (a, b) in before.iter().zip(after) {
        if let (Some(a), Some(b)) = (a, b) {
            // The kernel's counters are u32 and wrap.
            let d = |x: u64, y: u64| (y as u32).wrapping_sub(x as u32) as u64;
            total.segs_in += d(a.segs_in, b.segs_in);
            total.segs_out += d(a.segs_out, b.segs_out);
            total.data_segs_in += d(a.data_segs_in, b.data_segs_in);
            total.data_segs_out += d(a.data_segs_out, b.data_segs_out);
            any = true;
        }
    }
    any.then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    #[test]
    fn counts_the_segments_of_a_loopback_exchange() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.set_nodelay(true).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        server.set_nodelay(true).unwrap();
        let before = sample(&[client.as_raw_fd()]);
        assert!(
            before[0].is_some(),
            "TCP_INFO with data_segs_* needs Linux >= 4.6"
        );
        let mut buf = [0u8; 64];
        for _ in 0..10 {
            client.write_all(&[1u8; 64]).unwrap();
            server.read_exact(&mut buf).unwrap();
            server.write_all(&buf).unwrap();
            client.read_exact(&mut buf).unwrap();
        }
        let after = sample(&[client.as_raw_fd()]);
        let d = delta(&before, &after).unwrap();
        // Ten writes each way, one round trip at a time with NODELAY: ten data segments each way.
        assert_eq!((d.data_segs_out, d.data_segs_in), (10, 10), "{d:?}");
        assert!(d.segs_out >= d.data_segs_out && d.segs_in >= d.data_segs_in);
    }

    #[test]
    fn missing_samples_are_left_out_and_wrap_is_handled() {
        let s = |n: u64| {
            Some(Segments {
                segs_in: n,
                segs_out: n,
                data_segs_in: n,
                data_segs_out: n,
            })
        };
        let d = delta(&[s(u32::MAX as u64 - 1), None, s(5)], &[s(3), s(9), None]).unwrap();
        assert_eq!(d.data_segs_in, 5); // (2^32 - 2) → 3 is five increments
        assert_eq!(delta(&[None], &[s(1)]), None);
    }
}
