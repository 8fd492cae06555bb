//! sd_notify readiness and SIGHUP reload, against the real binary.

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use common::Server;

fn recv(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = sock
        .recv(&mut buf)
        .expect("a notification within the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn ready_reloading_and_stopping_reach_notify_socket() {
    let dir = common::TempDir::new("uaring-notify");
    let path = dir.join("notify.sock");
    let _ = std::fs::remove_file(&path);
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let cfg = dir.join("uaring.toml");
    std::fs::write(&cfg, "[log]\nfilter = \"info\"\n").unwrap();
    let server = Server::start_with(&["--config", cfg.to_str().unwrap()], |c| {
        c.env("NOTIFY_SOCKET", &path).env_remove("RUST_LOG");
    });
    assert_eq!(recv(&sock), "READY=1");
    // A reload re-reads [log] filter and rescans the trust lists.
    std::fs::write(&cfg, "[log]\nfilter = \"info,uaring=debug\"\n").unwrap();
    server.signal(libc::SIGHUP);
    let r = recv(&sock);
    assert!(r.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{r:?}");
    assert_eq!(recv(&sock), "READY=1");
    server.signal(libc::SIGTERM);
    assert_eq!(recv(&sock), "STOPPING=1");
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("reloaded (SIGHUP): trust lists rescanned, log filter \"info,uaring=debug\""),
        "{err}"
    );
}
