//! sd_notify: readiness and state to systemd (`Type=notify`), the datagram protocol of
//! sd_notify(3) on `$NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace). Without
//! `$NOTIFY_SOCKET` nothing is sent.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. `READY=1`) to `$NOTIFY_SOCKET`; errors are logged, never fatal.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send(&path, state) {
        tracing::warn!("sd_notify {state:?} to {}: {e}", path.to_string_lossy());
    }
}

fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let sock = UnixDatagram::unbound()?;
    let bytes = path.as_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), path)?;
    }
    Ok(())
}

/// `RELOADING=1` with the monotonic time systemd asks for (`Type=notify-reload`).
pub fn reloading() {
    let mono_us = crate::clock::mono_ns() / 1000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={mono_us}"));
}
