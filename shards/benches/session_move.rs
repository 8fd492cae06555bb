//! What it costs when a reconnecting client's ActivateSession lands on the shard that does
//! not own its session and the connection moves (docs/Architecture.md, "Session ownership").
//!
//! The real runtime in-process: two shards (pinned to CPUs 0 and 1 when the machine has
//! them), round-robin distribution, on each backend. Two sessions, one owned by each shard.
//! Each iteration opens a new connection (HEL, OPN: not timed), looks at which shard took it
//! (the channel id names it), and times one ActivateSession round trip from the client:
//!
//! * `activate_local`: the session of the shard that took the connection (no move);
//! * `activate_moved`: the session of the other shard (the connection moves there first).
//!
//! The connection is then dropped (the session survives unbound). Quote the two as a ratio
//! or a difference from one run: `cargo bench -p uaring --bench session_move`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use uaring::runtime::{self, RuntimeOptions};
use uaring::{ua_handler, Distribution, IoBackend, LoopConfig};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::service_state::channel_shard;
use uaring_core::{ExtensionObject, NodeId};
use uaring_harness::blocking::Client;

const T: Duration = Duration::from_secs(10);

fn start(backend: IoBackend) -> runtime::Running {
    let setup = ua_handler::build(&toml::Table::new(), false).expect("server setup");
    let two_cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let opts = RuntimeOptions {
        listen: "127.0.0.1:0".parse::<SocketAddr>().unwrap(),
        cpus: if two_cpus { vec![0, 1] } else { Vec::new() },
        shards: 2,
        backend,
        distribution: Distribution::RoundRobin,
        ring_entries: 0,
        loop_cfg: LoopConfig::default(),
        listen_backlog: 128,
        handoff_queue: 64,
        move_queue: 16,
        sqpoll_cpus: Vec::new(),
    };
    let setup: Arc<ua_handler::ServerSetup> = setup;
    runtime::start(opts, move |i| ua_handler::make_handler(&setup, i, 2)).expect("runtime")
}

fn activate(c: &mut Client) {
    let r = c
        .call(Request::ActivateSession(Box::new(ActivateSessionRequest {
            user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                policy_id: "anonymous".into(),
            }),
            ..Default::default()
        })))
        .expect("ActivateSession");
    assert!(matches!(r, Response::ActivateSession(_)));
}

/// A session owned by each shard: tokens[shard].
fn sessions(url: &str) -> [NodeId; 2] {
    let mut tokens: [Option<NodeId>; 2] = [None, None];
    while tokens.iter().any(|t| t.is_none()) {
        let mut c = Client::connect(url, T).expect("connect");
        let shard = channel_shard(c.connection().channel_id());
        c.activate_session_anonymous().expect("session");
        tokens[shard].get_or_insert_with(|| c.connection().authentication_token().clone());
    }
    tokens.map(|t| t.unwrap())
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("session_move");
    g.sample_size(30)
        .measurement_time(Duration::from_secs(6))
        .warm_up_time(Duration::from_secs(1));
    for (name, backend) in [("uring", IoBackend::Uring), ("epoll", IoBackend::Epoll)] {
        let running = start(backend);
        let url = format!("opc.tcp://{}", running.local_addr);
        let tokens = sessions(&url);
        for moved in [false, true] {
            let label = format!(
                "{name}/{}",
                if moved {
                    "activate_moved"
                } else {
                    "activate_local"
                }
            );
            g.bench_function(label, |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let mut client = Client::connect(&url, T).expect("connect");
                        let shard = channel_shard(client.connection().channel_id());
                        let owner = if moved { 1 - shard } else { shard };
                        client
                            .connection()
                            .set_authentication_token(tokens[owner].clone());
                        let t = Instant::now();
                        activate(&mut client);
                        total += t.elapsed();
                    }
                    total
                })
            });
        }
        let snap = running.fleet.snapshot();
        eprintln!(
            "{name}: moved_out {:?}, moved_in {:?}, move_refused {:?}",
            snap.iter().map(|s| s.moved_out).collect::<Vec<_>>(),
            snap.iter().map(|s| s.moved_in).collect::<Vec<_>>(),
            snap.iter().map(|s| s.move_refused).collect::<Vec<_>>()
        );
        running.stop();
        running.join().expect("shards");
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
