//! The handshake pool of the real `uaring` binary: argon2id logins run on the helper thread
//! while the shard answers Reads of an existing session, and logins past the pool's bound are
//! refused with BadTooManyOperations instead of queueing.

mod common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::Server;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{ActivateSessionRequest, UserNameIdentityToken};
use uaring_core::types::{ByteString, ExtensionObject, NodeId, StatusCode, UaString};
use uaring_harness::blocking::{Client, ClientError};

const TIMEOUT: Duration = Duration::from_secs(30);

/// A config with one user (password "pw"), passwords accepted in clear on None channels (the
/// test has no RSA client), one shard, and the given `[handshake]` section.
fn start(handshake: &str, tag: &str) -> (Server, common::TempDir) {
    start_on(1, handshake, tag)
}

/// [`start`] with `shards` shards, connections dealt round robin.
fn start_on(shards: usize, handshake: &str, tag: &str) -> (Server, common::TempDir) {
    let dir = common::TempDir::new(&format!("uaring-hs-{tag}"));
    let hash = uaring_crypto::hash_password("pw").unwrap();
    let cfg = dir.join("uaring.toml");
    std::fs::write(
        &cfg,
        format!(
            "[runtime]\nshards = {shards}\ndistribution = \"round-robin\"\n[handshake]\n{handshake}\n[security]\npolicies = [\"None\", \"Basic256Sha256\"]\nuser_token_policy_on_none = \"\"\n\
             allow_password_on_none = true\n[[users]]\nname = \"op\"\npassword = \"{hash}\"\nrole = \"read\"\n"
        ),
    )
    .unwrap();
    let server = Server::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--pki",
        dir.join("pki").to_str().unwrap(),
    ]);
    (server, dir)
}

fn activate_user(c: &mut Client) -> Result<(), StatusCode> {
    let req = ActivateSessionRequest {
        user_identity_token: ExtensionObject::from_struct(&UserNameIdentityToken {
            policy_id: "username".into(),
            user_name: "op".into(),
            password: ByteString::from(&b"pw"[..]),
            encryption_algorithm: UaString::null(),
        }),
        ..Default::default()
    };
    match c.call(Request::ActivateSession(Box::new(req))) {
        Ok(Response::ActivateSession(_)) => Ok(()),
        Ok(other) => panic!("{other:?}"),
        Err(ClientError::Status(s)) => Err(s),
        Err(e) => panic!("{e:?}"),
    }
}

fn session(url: &str) -> Client {
    let mut c = Client::connect(url, TIMEOUT).expect("connect");
    c.create_session().expect("CreateSession");
    c
}

/// Reads of an anonymous session complete while a UserName login (argon2id, tens of
/// milliseconds) is being checked on the helper thread: the shard is not blocked by it.
#[test]
fn reads_are_served_while_logins_run_on_the_pool() {
    let (server, dir) = start("threads = 1\nqueue_depth = 4", "reads");
    let url = server.url();
    let mut reader = session(&url);
    reader.activate_session_anonymous().expect("anonymous");
    let logins = 5;
    let url2 = url.clone();
    let logger = std::thread::spawn(move || {
        let mut windows = Vec::new();
        for _ in 0..logins {
            let mut c = session(&url2);
            let t0 = Instant::now();
            activate_user(&mut c).expect("login");
            windows.push((t0, Instant::now()));
            let _ = c.close();
        }
        windows
    });
    let mut reads = Vec::new();
    while !logger.is_finished() {
        let t0 = Instant::now();
        let v = reader.read_values(&[NodeId::ns0(2258)]).expect("Read");
        assert_eq!(v.len(), 1);
        reads.push((t0, Instant::now()));
    }
    let windows = logger.join().unwrap();
    let inside = reads
        .iter()
        .filter(|(a, b)| windows.iter().any(|(s, e)| s <= a && b <= e))
        .count();
    eprintln!(
        "reads inside login windows: {inside} of {} ({} logins)",
        reads.len(),
        windows.len()
    );
    // Inline (threads = 0), the shard is blocked for each whole argon2id check: at most the
    // Read already waiting (and one more, if the logging thread is slow to note the end) can
    // complete inside a window. With the pool the reader keeps going throughout.
    assert!(
        inside >= 5 * logins,
        "only {inside} Reads were answered while logins were being checked ({} reads, {} logins)",
        reads.len(),
        windows.len()
    );
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// One helper and a queue of one: of eight simultaneous logins the shard keeps at most two out
/// (one running, one queued); the rest are refused at once with BadTooManyOperations, and the
/// refused clients can log in afterwards.
#[test]
fn logins_past_the_pool_bound_are_refused() {
    let (server, dir) = start("threads = 1\nqueue_depth = 1", "overflow");
    let url = server.url();
    let n = 8;
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (url, barrier) = (url.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut c = session(&url);
                barrier.wait();
                let first = activate_user(&mut c);
                let retry = if first.is_err() {
                    Some(activate_user(&mut c))
                } else {
                    None
                };
                (first, retry)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let refused = results
        .iter()
        .filter(|(f, _)| *f == Err(StatusCode::BadTooManyOperations))
        .count();
    let ok = results.iter().filter(|(f, _)| f.is_ok()).count();
    assert_eq!(
        refused + ok,
        n,
        "only Good or BadTooManyOperations: {results:?}"
    );
    assert!(refused >= 1, "nothing was refused: {results:?}");
    assert!(ok >= 1);
    // A refused login is not a failed one: the retry, one at a time, works.
    for (_, retry) in &results {
        if let Some(r) = retry {
            assert!(
                matches!(r, Ok(()) | Err(StatusCode::BadTooManyOperations)),
                "{r:?}"
            );
        }
    }
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// Large requests (over 64 KiB, decoded on the pool's helpers) that come while the pool is
/// full — one helper busy with logins, a queue of one — are decoded on the loop instead of
/// refused: every Read of 5,000 values is answered in full.
#[test]
fn large_requests_past_the_pool_bound_are_decoded_on_the_loop() {
    use uaring_core::generated::types::ReadValueId;
    let (server, dir) = start("threads = 1\nqueue_depth = 1", "decode");
    let url = server.url();
    let (logins, readers) = (4, 8);
    let barrier = Arc::new(Barrier::new(logins + readers));
    let mut handles = Vec::new();
    for i in 0..logins + readers {
        let (url, barrier) = (url.clone(), barrier.clone());
        handles.push(std::thread::spawn(move || {
            let mut c = session(&url);
            if i >= logins {
                c.activate_session_anonymous().expect("anonymous");
            }
            barrier.wait();
            if i < logins {
                // Keeps the helper busy (argon2id); refused or not, it does not matter here.
                let _ = activate_user(&mut c);
                return None;
            }
            let nodes: Vec<ReadValueId> = (0..5_000)
                .map(|_| ReadValueId {
                    node_id: NodeId::ns0(2258),
                    attribute_id: 13,
                    ..Default::default()
                })
                .collect();
            let mut answered = Vec::new();
            for _ in 0..3 {
                answered.push(c.read(&nodes).map(|v| v.len()));
            }
            Some(answered)
        }));
    }
    for h in handles {
        if let Some(answered) = h.join().unwrap() {
            for a in answered {
                assert_eq!(a.map_err(|e| format!("{e:?}")), Ok(5_000));
            }
        }
    }
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// Two shards, connections dealt round robin: a UserName session resumed on new connections
/// moves to its owning shard when the connection lands on the other one, and the ActivateSession
/// it carries is then checked (argon2id) on the pool of the owning shard. Every resume succeeds,
/// and the session keeps answering.
#[test]
fn resumed_logins_move_to_the_owning_shard_and_run_on_its_pool() {
    let (server, dir) = start_on(2, "threads = 1\nqueue_depth = 4", "move");
    let url = server.url();
    let mut c = session(&url);
    activate_user(&mut c).expect("first login");
    let token = c.connection().authentication_token().clone();
    let read = |c: &mut Client| {
        let v = c
            .read_values(&[NodeId::ns0(2258)])
            .expect("read CurrentTime");
        assert!(v[0].status.is_none_or(|s| s.is_good()), "{v:?}");
    };
    read(&mut c);
    for i in 0..6 {
        drop(c);
        c = Client::connect(&url, TIMEOUT).expect("connect");
        c.connection().set_authentication_token(token.clone());
        activate_user(&mut c).unwrap_or_else(|s| panic!("resume {i}: {s:?}"));
        read(&mut c);
    }
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}
