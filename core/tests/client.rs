//! The blocking Client over a real loopback socket, against a ServerConnection driven by
//! a plain thread (the test dispatcher answers Read, GetEndpoints, CreateSession and
//! ActivateSession).

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use common::TestHost;
use uaring_core::client::blocking::now;
use uaring_core::client::{Client, ClientError};
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::types::{NodeId, StatusCode, Variant};

/// Serves one connection; returns the host when the connection ends.
fn serve_one(listener: TcpListener) -> std::thread::JoinHandle<TestHost> {
    std::thread::spawn(move || {
        let mut host = TestHost::new();
        let (mut s, peer) = listener.accept().unwrap();
        let mut conn = ServerConnection::new(&mut host, Some(peer), now());
        let mut buf = vec![0u8; 65536];
        let mut out = Vec::new();
        loop {
            let n = match s.read(&mut buf) {
                Ok(0) | Err(_) => {
                    conn.on_close(&mut host, now());
                    break;
                }
                Ok(n) => n,
            };
            let st = conn.on_recv(&mut host, now(), &buf[..n], &mut out);
            let _ = s.write_all(&out);
            out.clear();
            if st == ConnStatus::Close {
                break;
            }
        }
        host
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
    assert_eq!(eps.len(), 1);
    assert_eq!(eps[0].endpoint_url.as_str(), url);
    c.activate_session_anonymous().unwrap();
    assert!(!c.connection().authentication_token().is_null());
    let v = c.read_values(&[NodeId::ns0(2258), NodeId::ns0(2259)]).unwrap();
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].value, Variant::Int32(42));
    // The test dispatcher does not do Write: a ServiceFault is an error status.
    match c.write(&[]) {
        Err(ClientError::Status(s)) => assert_eq!(s, StatusCode::BadServiceUnsupported),
        other => panic!("{other:?}"),
    }
    // CloseSession is not served by the test dispatcher either.
    let _ = c.close();
    let host = server.join().unwrap();
    assert_eq!(host.closed_channels.len(), 1);
    assert!(host.open_channels.is_empty());
}

#[test]
fn connect_errors() {
    assert!(matches!(Client::connect("http://x", Duration::from_secs(1)), Err(ClientError::BadUrl(_))));
    // Nothing listening.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    assert!(Client::connect(&format!("opc.tcp://127.0.0.1:{port}"), Duration::from_secs(1)).is_err());
    assert_eq!(uaring_core::client::blocking::host_port("opc.tcp://h:1/x").as_deref(), Some("h:1"));
    assert_eq!(uaring_core::client::blocking::host_port("opc.tcp://h/x").as_deref(), Some("h:4840"));
}
