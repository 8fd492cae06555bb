//! The Prometheus text endpoint (`[metrics] listen`): a small thread that answers
//! `GET /metrics` from the shards' published counters (core's `ServerMetrics` and the
//! runtime's `ShardStats`). It reads relaxed atomics only; it never touches a shard's
//! request path, takes no lock a shard takes, and sends nothing to a shard.
//!
//! HTTP is the minimum Prometheus needs: one request per connection (`Connection: close`),
//! the request head read up to 8 KiB within 5 s, one connection at a time.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use uaring_core::metrics::{ServerMetrics, ShardMetrics, POLICIES, SERVICES};
use uaring_core::shared::ServerShared;

use crate::fleet::Fleet;

/// Longest request head read, bytes.
const MAX_REQUEST_BYTES: usize = 8192;
/// How long a scrape connection may take to send its request and read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// What the endpoint reads.
pub struct Sources {
    pub shared: Arc<ServerShared>,
    pub fleet: Arc<Fleet>,
    pub backend: String,
    /// The history store, when the server keeps history.
    pub history: Option<Arc<crate::history::serve::Historian>>,
    /// The Reverse Connect clients (`[[reverse_connect]]`), when there are any.
    pub reverse: Vec<Arc<crate::reverse::Target>>,
    /// The aggregating gateway's servers (`[[gateway.servers]]`), when there are any.
    pub gateway: Option<crate::gateway::StatusList>,
}

/// Binds `addr` and serves on a thread named `uaring-metrics`. Returns the bound address.
pub fn start(addr: SocketAddr, sources: Sources) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    std::thread::Builder::new()
        .name("uaring-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                if sources.fleet.stopping() {
                    break;
                }
                match stream {
                    Ok(s) => {
                        if let Err(e) = serve_one(s, &sources) {
                            tracing::debug!("metrics connection: {e}");
                        }
                    }
                    Err(e) => {
                        tracing::warn!("metrics accept: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })?;
    Ok(local)
}

fn serve_one(mut s: TcpStream, src: &Sources) -> std::io::Result<()> {
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut buf = vec![0u8; MAX_REQUEST_BYTES];
    let mut len = 0;
    while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
        if len == buf.len() {
            return respond(
                &mut s,
                "431 Request Header Fields Too Large",
                "text/plain",
                "request too large\n",
            );
        }
        let n = s.read(&mut buf[len..])?;
        if n == 0 {
            return Ok(());
        }
        len += n;
    }
    let head = String::from_utf8_lossy(&buf[..len]);
    let mut parts = head.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => {
            let body = render(src);
            respond(
                &mut s,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
            )
        }
        ("GET", _) => respond(
            &mut s,
            "404 Not Found",
            "text/plain",
            "only /metrics is served\n",
        ),
        _ => respond(
            &mut s,
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n",
        ),
    }
}

fn respond(s: &mut TcpStream, status: &str, ctype: &str, body: &str) -> std::io::Result<()> {
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.flush()
}

/// One metric family: HELP and TYPE lines, then `f` writes the samples.
fn family(out: &mut String, name: &str, kind: &str, help: &str, f: impl FnOnce(&mut String)) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    f(out);
}

/// The exposition text (Prometheus text format 0.0.4).
pub fn render(src: &Sources) -> String {
    let m: &ServerMetrics = &src.shared.metrics;
    let mut out = String::with_capacity(16 * 1024);
    let shards: Vec<(usize, &ShardMetrics)> = m.active().collect();
    let stats = src.fleet.snapshot();
    let get = ShardMetrics::get;
    let _ = writeln!(
        out,
        "# HELP uaring_build_info The uaring build.\n# TYPE uaring_build_info gauge"
    );
    let _ = writeln!(
        out,
        "uaring_build_info{{version=\"{}\",revision=\"{}\",io_backend=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        env!("UARING_GIT_REVISION"),
        src.backend
    );
    let per_shard =
        |out: &mut String, name: &str, kind: &str, help: &str, v: &dyn Fn(usize) -> u64| {
            family(out, name, kind, help, |out| {
                for i in 0..stats.len() {
                    let _ = writeln!(out, "{name}{{shard=\"{i}\"}} {}", v(i));
                }
            });
        };
    per_shard(
        &mut out,
        "uaring_connections",
        "gauge",
        "TCP connections open.",
        &|i| stats[i].open,
    );
    per_shard(
        &mut out,
        "uaring_connections_accepted_total",
        "counter",
        "TCP connections taken on.",
        &|i| stats[i].accepted,
    );
    per_shard(
        &mut out,
        "uaring_connections_closed_total",
        "counter",
        "TCP connections closed.",
        &|i| stats[i].closed,
    );
    per_shard(
        &mut out,
        "uaring_connections_refused_total",
        "counter",
        "TCP connections refused (table full or over budget).",
        &|i| stats[i].refused,
    );
    per_shard(
        &mut out,
        "uaring_received_bytes_total",
        "counter",
        "Bytes received.",
        &|i| stats[i].bytes_in,
    );
    per_shard(
        &mut out,
        "uaring_sent_bytes_total",
        "counter",
        "Bytes sent.",
        &|i| stats[i].bytes_out,
    );
    per_shard(
        &mut out,
        "uaring_loop_iterations_total",
        "counter",
        "Event loop iterations.",
        &|i| stats[i].loops,
    );
    family(
        &mut out,
        "uaring_loop_idle_seconds_total",
        "counter",
        "Time the event loop waited for I/O or a timer; loop utilisation = 1 - rate(this).",
        |out| {
            for (i, s) in stats.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "uaring_loop_idle_seconds_total{{shard=\"{i}\"}} {:.6}",
                    s.idle_ns as f64 / 1e9
                );
            }
        },
    );
    per_shard(
        &mut out,
        "uaring_uring_submissions_total",
        "counter",
        "io_uring submission queue entries submitted (0 on epoll).",
        &|i| stats[i].submissions,
    );
    per_shard(
        &mut out,
        "uaring_uring_completions_total",
        "counter",
        "io_uring completions handled (0 on epoll).",
        &|i| stats[i].completions,
    );
    per_shard(&mut out, "uaring_uring_batch_waits_total", "counter", "io_uring waits that asked for more than one completion (batch_wait_us; 0 when off and on epoll).", &|i| stats[i].batch_waits);
    per_shard(&mut out, "uaring_uring_batch_wanted_total", "counter", "Completions those waits asked for, in total (divided by uaring_uring_batch_waits_total: what a batched wait expects).", &|i| stats[i].batch_wanted);
    family(
        &mut out,
        "uaring_uring_io_mode_info",
        "gauge",
        "The I/O modes of each shard's loop: sqpoll (off, per-shard, shared), the poller's CPU (any = not bound), busy_poll_us, fixed_files (the file table's slots, 0 = off), zero_copy_send_min (0 = off), recv_bundles, fixed_send_buffers (registered send buffers, 0 = off) and napi_busy_poll_us (0 = off; it acts only on sockets of a NIC queue with a NAPI id, never on loopback).",
        |out| {
            for (i, link) in src.fleet.shards.iter().enumerate() {
                let m = link.modes();
                let cpu = m.sqpoll_cpu.map_or("any".to_string(), |c| c.to_string());
                let _ = writeln!(
                    out,
                    "uaring_uring_io_mode_info{{shard=\"{i}\",sqpoll=\"{}\",sqpoll_cpu=\"{cpu}\",busy_poll_us=\"{}\",fixed_files=\"{}\",zero_copy_send_min=\"{}\",recv_bundles=\"{}\",fixed_send_buffers=\"{}\",napi_busy_poll_us=\"{}\"}} 1",
                    m.sqpoll, m.busy_poll_us, m.fixed_files, m.zero_copy_send_min, m.recv_bundles, m.fixed_send_buffers, m.napi_busy_poll_us
                );
            }
        },
    );
    per_shard(&mut out, "uaring_uring_sqpoll_wakeups_total", "counter", "SQPOLL: submissions that found the shard's poller asleep and woke it (0 when sqpoll is off).", &|i| stats[i].sqpoll_wakeups);
    per_shard(
        &mut out,
        "uaring_uring_busy_polls_total",
        "counter",
        "Spins before sleeping (busy_poll_us; 0 when off).",
        &|i| stats[i].busy_polls,
    );
    per_shard(
        &mut out,
        "uaring_uring_busy_poll_hits_total",
        "counter",
        "Spins that found a completion before their bound (a sleep saved).",
        &|i| stats[i].busy_poll_hits,
    );
    family(
        &mut out,
        "uaring_uring_busy_poll_seconds_total",
        "counter",
        "Time the shard spun before sleeping (busy_poll_us): CPU spent instead of sleeping.",
        |out| {
            for (i, s) in stats.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "uaring_uring_busy_poll_seconds_total{{shard=\"{i}\"}} {:.6}",
                    s.busy_poll_ns as f64 / 1e9
                );
            }
        },
    );

    per_shard(
        &mut out,
        "uaring_uring_bundled_recvs_total",
        "counter",
        "Receive bundles (recv_bundles): receives that filled more than one provided buffer (0 when off).",
        &|i| stats[i].bundled_recvs,
    );
    per_shard(
        &mut out,
        "uaring_uring_bundled_bufs_total",
        "counter",
        "Buffers those receives filled.",
        &|i| stats[i].bundled_bufs,
    );
    per_shard(
        &mut out,
        "uaring_uring_fixed_files_registered_total",
        "counter",
        "Fixed files: connections whose socket was put into a slot of the ring's file table (0 when off).",
        &|i| stats[i].fixed_files_registered,
    );
    per_shard(
        &mut out,
        "uaring_uring_zc_sends_total",
        "counter",
        "Zero-copy sends (IORING_OP_SEND_ZC) submitted (zero_copy_send_min; 0 when off).",
        &|i| stats[i].zc_sends,
    );
    per_shard(
        &mut out,
        "uaring_uring_zc_bytes_total",
        "counter",
        "Bytes the zero-copy sends reported sent.",
        &|i| stats[i].zc_bytes,
    );
    per_shard(
        &mut out,
        "uaring_uring_zc_notifications_total",
        "counter",
        "Zero-copy send notifications: the kernel let go of the send buffer.",
        &|i| stats[i].zc_notifs,
    );
    per_shard(
        &mut out,
        "uaring_uring_zc_copied_total",
        "counter",
        "Zero-copy sends the kernel copied after all (IORING_NOTIF_USAGE_ZC_COPIED; every one on loopback).",
        &|i| stats[i].zc_copied,
    );
    per_shard(
        &mut out,
        "uaring_uring_fixed_buf_sends_total",
        "counter",
        "Registered send buffers (fixed_send_buffers): sends that named one (0 when off).",
        &|i| stats[i].fixed_buf_sends,
    );
    per_shard(
        &mut out,
        "uaring_uring_fixed_buf_exhausted_total",
        "counter",
        "Sends that could have named a registered send buffer but went out of an ordinary one: the region had none left for the connection.",
        &|i| stats[i].fixed_buf_exhausted,
    );
    per_shard(
        &mut out,
        "uaring_uring_fixed_buf_outgrown_total",
        "counter",
        "Batches that outgrew their registered send buffer (sent from ordinary memory; the buffer was given new memory).",
        &|i| stats[i].fixed_buf_outgrown,
    );
    per_shard(
        &mut out,
        "uaring_uring_fixed_bufs_lent",
        "gauge",
        "Registered send buffers lent to connections now (two per connection while they last).",
        &|i| stats[i].fixed_bufs_lent,
    );
    per_shard(
        &mut out,
        "uaring_uring_napi_sockets_total",
        "counter",
        "NAPI busy polling (napi_busy_poll_us): connections whose socket had a NAPI id at its first receive on the shard, that is, came through a NIC receive queue the ring's busy polling polls (0 when off).",
        &|i| stats[i].napi_sockets,
    );
    per_shard(
        &mut out,
        "uaring_uring_napi_none_total",
        "counter",
        "NAPI busy polling: connections whose socket had no NAPI id (loopback, or a device without NAPI): busy polling does nothing for them.",
        &|i| stats[i].napi_none,
    );
    per_shard(
        &mut out,
        "uaring_uring_zc_refused_total",
        "counter",
        "Zero-copy sends the locked-memory limit refused (ENOMEM; without CAP_IPC_LOCK their pages count against RLIMIT_MEMLOCK until the notification), sent again as ordinary sends.",
        &|i| stats[i].zc_refused,
    );

    let labelled = |out: &mut String,
                    name: &str,
                    kind: &str,
                    help: &str,
                    labels: &[&str],
                    label: &str,
                    v: &dyn Fn(&ShardMetrics, usize) -> u64| {
        family(out, name, kind, help, |out| {
            for (i, sm) in &shards {
                for (j, l) in labels.iter().enumerate() {
                    let x = v(sm, j);
                    if x != 0 {
                        let _ = writeln!(out, "{name}{{shard=\"{i}\",{label}=\"{l}\"}} {x}");
                    }
                }
            }
        });
    };
    labelled(
        &mut out,
        "uaring_secure_channels",
        "gauge",
        "Secure channels open, by security policy.",
        &POLICIES,
        "policy",
        &|sm, j| get(&sm.channels_opened[j]).saturating_sub(get(&sm.channels_closed[j])),
    );
    labelled(
        &mut out,
        "uaring_secure_channels_opened_total",
        "counter",
        "Secure channels opened, by security policy.",
        &POLICIES,
        "policy",
        &|sm, j| get(&sm.channels_opened[j]),
    );
    labelled(
        &mut out,
        "uaring_requests_total",
        "counter",
        "Service requests, by service.",
        &SERVICES,
        "service",
        &|sm, j| get(&sm.requests[j]),
    );
    labelled(
        &mut out,
        "uaring_request_errors_total",
        "counter",
        "Service requests answered with a Bad ServiceResult, by service.",
        &SERVICES,
        "service",
        &|sm, j| get(&sm.errors[j]),
    );
    let gauge =
        |out: &mut String, name: &str, kind: &str, help: &str, f: &dyn Fn(&ShardMetrics) -> u64| {
            family(out, name, kind, help, |out| {
                for (i, sm) in &shards {
                    let _ = writeln!(out, "{name}{{shard=\"{i}\"}} {}", f(sm));
                }
            });
        };
    gauge(&mut out, "uaring_sessions", "gauge", "Sessions.", &|sm| {
        get(&sm.sessions)
    });
    gauge(
        &mut out,
        "uaring_sessions_created_total",
        "counter",
        "Sessions created.",
        &|sm| get(&sm.sessions_created),
    );
    gauge(
        &mut out,
        "uaring_session_timeouts_total",
        "counter",
        "Sessions closed because they timed out.",
        &|sm| get(&sm.session_timeouts),
    );
    gauge(
        &mut out,
        "uaring_subscriptions",
        "gauge",
        "Subscriptions.",
        &|sm| get(&sm.subscriptions),
    );
    gauge(
        &mut out,
        "uaring_monitored_items",
        "gauge",
        "Monitored items.",
        &|sm| get(&sm.monitored_items),
    );
    gauge(
        &mut out,
        "uaring_notifications_sent_total",
        "counter",
        "Notifications sent in NotificationMessages.",
        &|sm| get(&sm.notifications),
    );
    gauge(
        &mut out,
        "uaring_notifications_dropped_total",
        "counter",
        "Values discarded by full monitored-item queues.",
        &|sm| get(&sm.queue_overflows),
    );
    gauge(
        &mut out,
        "uaring_notification_messages_sent_total",
        "counter",
        "NotificationMessages sent (keep-alives excluded).",
        &|sm| get(&sm.notification_messages),
    );
    gauge(
        &mut out,
        "uaring_keep_alives_sent_total",
        "counter",
        "Keep-alive messages sent.",
        &|sm| get(&sm.keep_alives),
    );
    gauge(
        &mut out,
        "uaring_samples_total",
        "counter",
        "Source samples taken for monitored items.",
        &|sm| get(&sm.samples),
    );
    gauge(
        &mut out,
        "uaring_events_missed_total",
        "counter",
        "Events the shared bus overwrote before this shard read them.",
        &|sm| get(&sm.events_missed),
    );
    family(
        &mut out,
        "uaring_handshakes_in_progress",
        "gauge",
        "Connections without an open secure channel yet (Hello or OpenSecureChannel pending).",
        |out| {
            for (i, s) in stats.iter().enumerate() {
                let sm = m.shard(i);
                let channels: u64 = (0..POLICIES.len())
                    .map(|j| {
                        get(&sm.channels_opened[j]).saturating_sub(get(&sm.channels_closed[j]))
                    })
                    .sum();
                let _ = writeln!(
                    out,
                    "uaring_handshakes_in_progress{{shard=\"{i}\"}} {}",
                    s.open.saturating_sub(channels)
                );
            }
        },
    );
    use std::sync::atomic::Ordering::Relaxed;
    family(
        &mut out,
        "uaring_read_callback_calls_total",
        "counter",
        "Read callbacks (computed values of the application) run on the shards.",
        |out| {
            let _ = writeln!(
                out,
                "uaring_read_callback_calls_total {}",
                crate::nodes::READ_CALLBACK_CALLS.load(Relaxed)
            );
        },
    );
    family(
        &mut out,
        "uaring_read_callback_seconds_total",
        "counter",
        "Time the shards spent in read callbacks.",
        |out| {
            let _ = writeln!(
                out,
                "uaring_read_callback_seconds_total {:.6}",
                crate::nodes::READ_CALLBACK_NS.load(Relaxed) as f64 / 1e9
            );
        },
    );
    let changes = src.shared.address_space.changes().counters();
    family(
        &mut out,
        "uaring_changes_queued_total",
        "counter",
        "Stores handed to a shard's change inbox for its exception-based monitored items.",
        |out| {
            let _ = writeln!(
                out,
                "uaring_changes_queued_total {}",
                changes.queued.load(Relaxed)
            );
        },
    );
    family(
        &mut out,
        "uaring_changes_lost_total",
        "counter",
        "Stores (or application answers) that found a shard's inbox full.",
        |out| {
            let _ = writeln!(
                out,
                "uaring_changes_lost_total {}",
                changes.lost.load(Relaxed)
            );
        },
    );
    family(
        &mut out,
        "uaring_change_wakes_total",
        "counter",
        "Wakes of sleeping shards by the change path and by application answers.",
        |out| {
            let _ = writeln!(
                out,
                "uaring_change_wakes_total {}",
                changes.wakes.load(Relaxed)
            );
        },
    );
    if let Some(h) = &src.history {
        history_families(&mut out, h);
    }
    if !src.reverse.is_empty() {
        reverse_families(&mut out, &src.reverse);
    }
    if let Some(g) = src
        .gateway
        .as_ref()
        .map(|g| g.list())
        .filter(|l| !l.is_empty())
    {
        gateway_families(&mut out, &g);
    }
    out
}

/// The aggregating gateway's counters, per mirrored server (docs/Gateway.md).
fn gateway_families(out: &mut String, servers: &[Arc<crate::gateway::ServerStatus>]) {
    use crate::gateway::{ServerStatus, State};
    use std::sync::atomic::Ordering::Relaxed;
    let each =
        |out: &mut String, name: &str, kind: &str, help: &str, v: fn(&ServerStatus) -> u64| {
            family(out, name, kind, help, |out| {
                for s in servers {
                    let server = s.name.replace('\\', "\\\\").replace('"', "\\\"");
                    let _ = writeln!(out, "{name}{{server=\"{server}\"}} {}", v(s));
                }
            });
        };
    each(
        out,
        "uaring_gateway_connected",
        "gauge",
        "1 while the mirrored server is connected and mirrored (its values flow), else 0.",
        |s| u64::from(s.state() == State::Connected),
    );
    each(
        out,
        "uaring_gateway_reconnects_total",
        "counter",
        "Connections to the mirrored server lost or refused after the first.",
        |s| s.reconnects.load(Relaxed),
    );
    each(
        out,
        "uaring_gateway_monitored_items",
        "gauge",
        "Monitored items the gateway keeps on the server now (one per mirrored Variable monitored here).",
        |s| s.items.load(Relaxed),
    );
    each(
        out,
        "uaring_gateway_nodes",
        "gauge",
        "Nodes mirrored of the server now.",
        |s| s.nodes.load(Relaxed),
    );
    each(
        out,
        "uaring_gateway_notifications_total",
        "counter",
        "Values the server reported, stored into mirrored Variables.",
        |s| s.notifications.load(Relaxed),
    );
    each(
        out,
        "uaring_gateway_forwarded_total",
        "counter",
        "Reads, Writes and Calls forwarded to the server.",
        |s| s.forwarded.load(Relaxed),
    );
    each(
        out,
        "uaring_gateway_events_total",
        "counter",
        "Events of the server passed on.",
        |s| s.events.load(Relaxed),
    );
    each(
        out,
        "uaring_gateway_service_level",
        "gauge",
        "The server's ServiceLevel when last read (0 unknown).",
        |s| u64::from(s.service_level.load(Relaxed)),
    );
    each(
        out,
        "uaring_gateway_identity_sessions",
        "gauge",
        "Sessions open on the server now for mapped identities (gateway.servers.identities), the main one aside.",
        |s| s.identity_sessions.load(Relaxed),
    );
    each(
        out,
        "uaring_gateway_identity_refusals_total",
        "counter",
        "Logins of mapped identities the server refused (or that could not be made).",
        |s| s.identity_refusals.load(Relaxed),
    );
}

/// The Reverse Connect dialer's counters, per client (docs/Configuration.md).
fn reverse_families(out: &mut String, targets: &[Arc<crate::reverse::Target>]) {
    use std::sync::atomic::Ordering::Relaxed;
    let each = |out: &mut String,
                name: &str,
                kind: &str,
                help: &str,
                v: fn(&crate::reverse::Target) -> u64| {
        family(out, name, kind, help, |out| {
            for t in targets {
                let client = t.url.replace('\\', "\\\\").replace('"', "\\\"");
                let _ = writeln!(out, "{name}{{client=\"{client}\"}} {}", v(t));
            }
        });
    };
    each(
        out,
        "uaring_reverse_dialed_total",
        "counter",
        "Connections the server dialed to this Reverse Connect client.",
        |t| t.dialed.load(Relaxed),
    );
    each(
        out,
        "uaring_reverse_taken_total",
        "counter",
        "Of those, connections the client took up (sent Hello on).",
        |t| t.taken.load(Relaxed),
    );
    each(
        out,
        "uaring_reverse_connect_failures_total",
        "counter",
        "Connect attempts to this client that failed (each backs off).",
        |t| t.failed.load(Relaxed),
    );
    each(
        out,
        "uaring_reverse_idle",
        "gauge",
        "Dialed connections waiting for this client's Hello now.",
        |t| u64::from(t.idle()),
    );
    each(
        out,
        "uaring_reverse_open",
        "gauge",
        "Connections open to this client now, waiting and in use.",
        |t| u64::from(t.live()),
    );
}

/// The history store's counters (docs/History.md).
fn history_families(out: &mut String, h: &crate::history::serve::Historian) {
    let st = h.stats();
    let (reads, refused) = h.read_counts();
    let embedded = h.store().is_some();
    let one = |out: &mut String, name: &str, kind: &str, help: &str, v: u64| {
        family(out, name, kind, help, |out| {
            let _ = writeln!(out, "{name} {v}");
        });
    };
    one(
        out,
        "uaring_history_series",
        "gauge",
        "Historized Variables (series) in the store.",
        st.series,
    );
    if embedded {
        one(
            out,
            "uaring_history_samples",
            "gauge",
            "Values the store holds.",
            st.samples,
        );
        one(
            out,
            "uaring_history_segment_bytes",
            "gauge",
            "Bytes of the store's segment files.",
            st.segment_bytes,
        );
        one(
            out,
            "uaring_history_wal_bytes",
            "gauge",
            "Bytes of the store's write-ahead log.",
            st.wal_bytes,
        );
    }
    one(
        out,
        "uaring_history_appended_total",
        "counter",
        "Values the writer thread took from the ingest queue since the start.",
        st.appended,
    );
    one(out, "uaring_history_durable_total", "counter", "Of those, values on disk (WAL fsynced) or committed to the database; appended - durable is what a crash now would lose.", st.durable);
    one(
        out,
        "uaring_history_dropped_total",
        "counter",
        "Values lost to a full ingest queue (history.queue_capacity, history.on_full).",
        st.dropped,
    );
    one(
        out,
        "uaring_history_rejected_total",
        "counter",
        "Values refused by the store (a value encoding to more than 1 MiB).",
        st.rejected,
    );
    one(
        out,
        "uaring_history_flushes_total",
        "counter",
        "Flushes (fsync of the WAL, or batches committed to the database) since the start.",
        st.flushes,
    );
    if let Some(pg) = h.postgres() {
        let p = pg.pg_stats();
        one(
            out,
            "uaring_history_database_up",
            "gauge",
            "1 while the history database answers, 0 while it is away (backend = postgres).",
            u64::from(p.up),
        );
        one(
            out,
            "uaring_history_database_connects_total",
            "counter",
            "Connections opened to the history database.",
            p.connects,
        );
        one(
            out,
            "uaring_history_database_reconnects_total",
            "counter",
            "Times the history database came back after being away.",
            p.reconnects,
        );
        one(
            out,
            "uaring_history_database_errors_total",
            "counter",
            "Connects and statements of the history database that failed.",
            p.errors,
        );
        one(
            out,
            "uaring_history_lost_at_shutdown_total",
            "counter",
            "Values not written because the database was away when the server stopped.",
            p.lost_at_shutdown,
        );
    }
    one(
        out,
        "uaring_history_io_errors_total",
        "counter",
        "Store I/O errors and chunks that failed their checksum on a read (database errors with backend = postgres).",
        st.io_errors,
    );
    one(
        out,
        "uaring_history_reads_total",
        "counter",
        "HistoryRead operations answered by the reader threads.",
        reads,
    );
    one(out, "uaring_history_reads_refused_total", "counter", "HistoryRead operations refused BadResourceUnavailable because the read queue was full (history.read_queue).", refused);
    let (run_time, run_time_max, run_time_refused, run_time_failed) = h.run_time_counts();
    one(
        out,
        "uaring_history_run_time_historized",
        "gauge",
        "Variables added while the server runs that are historized now.",
        run_time as u64,
    );
    one(
        out,
        "uaring_history_run_time_historized_max",
        "gauge",
        "The bound on them (history.max_run_time_historized).",
        run_time_max as u64,
    );
    one(
        out,
        "uaring_history_run_time_refused_total",
        "counter",
        "Run-time Variables refused history at the bound (asked for: refused with the node; named by history.nodes: added without history).",
        run_time_refused,
    );
    one(
        out,
        "uaring_history_run_time_failed_total",
        "counter",
        "Run-time historized Variables whose series the store could not make (logged).",
        run_time_failed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::{ServerStatus, State};

    #[test]
    fn gateway_servers_are_labelled_by_name() {
        let a = Arc::new(ServerStatus::new("plc\"1", "opc.tcp://a:4840"));
        a.set_state(State::Connected);
        a.reconnects.store(3, std::sync::atomic::Ordering::Relaxed);
        a.identity_sessions
            .store(2, std::sync::atomic::Ordering::Relaxed);
        let b = Arc::new(ServerStatus::new("plc2", "opc.tcp://b:4840"));
        let mut out = String::new();
        gateway_families(&mut out, &[a, b]);
        assert!(
            out.contains("uaring_gateway_identity_sessions{server=\"plc\\\"1\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("uaring_gateway_identity_refusals_total{server=\"plc2\"} 0\n"),
            "{out}"
        );
        assert!(
            out.contains("# TYPE uaring_gateway_connected gauge\n"),
            "{out}"
        );
        assert!(
            out.contains("uaring_gateway_connected{server=\"plc\\\"1\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("uaring_gateway_connected{server=\"plc2\"} 0\n"),
            "{out}"
        );
        assert!(
            out.contains("uaring_gateway_reconnects_total{server=\"plc\\\"1\"} 3\n"),
            "{out}"
        );
    }
}
