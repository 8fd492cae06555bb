//! Socket helpers: listeners (with SO_REUSEPORT), addresses, options.

use std::io;
use std::mem;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn set_int_opt(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int of the stated size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const _ as *const libc::c_void,
            mem::size_of::<libc::c_int>() as _,
        )
    })
    .map(drop)
}

/// Converts a `SocketAddr` into a sockaddr_storage and its length.
pub fn to_sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as _,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as _,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// Reads a sockaddr written by the kernel.
pub fn from_sockaddr(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: family and length say it is a sockaddr_in.
            let sin = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: family and length say it is a sockaddr_in6.
            let sin6 = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The peer of a connected socket (unspecified address when it cannot be read).
pub fn peer_addr(fd: RawFd) -> SocketAddr {
    // SAFETY: zeroed storage and its length are valid out-parameters.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let rc = unsafe { libc::getpeername(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) };
    if rc == 0 {
        if let Some(a) = from_sockaddr(&ss, len) {
            return a;
        }
    }
    SocketAddr::from(([0, 0, 0, 0], 0))
}

/// Creates a bound, listening TCP socket; `reuseport` sets SO_REUSEPORT so
/// every shard can have its own listener on the same port.
pub fn listen(addr: &SocketAddr, reuseport: bool, backlog: u32) -> io::Result<TcpListener> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain syscall, result checked.
    let raw = cvt(unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    set_int_opt(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    if reuseport {
        set_int_opt(raw, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    }
    let (ss, len) = to_sockaddr(addr);
    // SAFETY: ss/len describe a valid sockaddr.
    cvt(unsafe { libc::bind(raw, &ss as *const _ as *const libc::sockaddr, len) })?;
    let backlog = backlog.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: plain syscall.
    cvt(unsafe { libc::listen(raw, backlog) })?;
    Ok(TcpListener::from(fd))
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we hold.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(drop)
}

pub fn set_nodelay(fd: RawFd) {
    // Best effort: a socket that refuses TCP_NODELAY still works.
    let _ = set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
}

/// shutdown(SHUT_RDWR): outstanding receives complete with 0, sends fail.
pub fn shutdown(fd: &OwnedFd) {
    // SAFETY: plain syscall on an fd we hold; ENOTCONN etc. are fine to ignore.
    unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) };
}

/// accept4 on a non-blocking listener; `Ok(None)` when nothing is pending.
pub fn accept_nonblocking(listener: RawFd) -> io::Result<Option<(OwnedFd, SocketAddr)>> {
    // SAFETY: zeroed storage and its length are valid out-parameters.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let rc = unsafe {
        libc::accept4(
            listener,
            &mut ss as *mut _ as *mut libc::sockaddr,
            &mut len,
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(rc) };
    let peer = from_sockaddr(&ss, len).unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    Ok(Some((fd, peer)))
}

/// This machine's host name (gethostname), or `localhost` when it has none that is printable
/// ASCII (what an `opc.tcp://` URL can carry).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into our buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..len]) {
        Ok(name)
            if rc == 0
                && !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.') =>
        {
            name.to_owned()
        }
        _ => "localhost".to_owned(),
    }
}
