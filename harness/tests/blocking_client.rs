//! The blocking Client over a real loopback socket, against a ServerConnection hosted by a
//! real ServiceState (default configuration) and driven by a plain thread.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use uaring_core::config::ServerConfig;
use uaring_core::random::ChaCha;
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::server::service_state::ServiceState;
use uaring_core::shared::ServerShared;
use uaring_core::types::{NodeId, StatusCode, Variant};
use uaring_harness::blocking::{host_port, now, Client, ClientError};

/// Serves one connection; returns the shard when the connection ends.
fn serve_one(listener: TcpListener) -> std::thread::JoinHandle<ServiceState> {
    std::thread::spawn(move || {
        let shared: Arc<ServerShared> = ServerShared::new(ServerConfig::default(), now()).unwrap();
        let mut shard = ServiceState::new(shared, 0, Box::new(ChaCha::from_u64(1)));
        let (mut s, peer) = listener.accept().unwrap();
        let mut conn = ServerConnection::new(&mut shard, Some(peer), now());
        let mut buf = vec![0u8; 65536];
        let mut out = Vec::new();
        loop {
            let n = match s.read(&mut buf) {
                Ok(0) | Err(_) => {
                    conn.on_close(&mut shard, now());
                    break;
                }
                Ok(n) => n,
            };
            let st = conn.on_recv(&mut shard, now(), &buf[..n], &mut out);
            let _ = s.write_all(&out);
            out.clear();
            if st == ConnStatus::Close {
                break;
            }
        }
        shard
    })
}

#[test]
fn connect_session_read_close() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let server = serve_one(l);
    let url = format!("opc.tcp://127.0.0.1:{port}/uaring");
    let mut c = Client::connect(&url, Duration::from_secs(5)).unwrap();
    let eps = c.get_endpoints().unwrap();
    assert_eq!(eps.len(), 1, "the None endpoint");
    c.activate_session_anonymous().unwrap();
    assert!(!c.connection().authentication_token().is_null());
    // Server_ServerStatus_CurrentTime and _State (Running = 0).
    let v = c
        .read_values(&[NodeId::ns0(2258), NodeId::ns0(2259)])
        .unwrap();
    assert_eq!(v.len(), 2);
    assert!(
        matches!(v[0].value, Variant::DateTime(_)),
        "{:?}",
        v[0].value
    );
    assert_eq!(v[1].value, Variant::Int32(0));
    // A Write of nothing is a ServiceFault, which the client reports as its status.
    match c.write(&[]) {
        Err(ClientError::Status(s)) => assert_eq!(s, StatusCode::BadNothingToDo),
        other => panic!("{other:?}"),
    }
    c.close().unwrap();
    let shard = server.join().unwrap();
    assert_eq!(shard.open_channel_count(), 0);
    assert_eq!(shard.session_count(), 0, "CloseSession closed it");
}

#[test]
fn connect_errors() {
    assert!(matches!(
        Client::connect("http://x", Duration::from_secs(1)),
        Err(ClientError::BadUrl(_))
    ));
    // Nothing listening.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    assert!(Client::connect(
        &format!("opc.tcp://127.0.0.1:{port}"),
        Duration::from_secs(1)
    )
    .is_err());
    assert_eq!(host_port("opc.tcp://h:1/x").as_deref(), Some("h:1"));
    assert_eq!(host_port("opc.tcp://h/x").as_deref(), Some("h:4840"));
}
