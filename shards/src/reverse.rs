//! Reverse Connect (Part 6 §7.1.3): for a server inside a network that accepts no incoming
//! connections, the server dials the clients named in `[[reverse_connect]]`, sends each a
//! ReverseHello and waits for the client's Hello on that socket; from the Hello on, the
//! connection is an ordinary one (any policy, sessions, subscriptions, a resume on another
//! shard).
//!
//! One thread of the runtime, the dialer, does the connecting (a blocking connect with a
//! timeout, name resolution included), so that a client that does not answer never stalls a
//! shard. It keeps `idle_connections` connections waiting for each client, never more than
//! `max_connections` to one client in all, and hands each new socket to the shard with the
//! fewest connections (open and queued) through a bounded queue of that shard's. A failed connect, and a
//! connection the client closes without taking it up, back off from `retry_min_ms`, doubling
//! to `retry_max_ms`; a connection taken up resets the back-off.
//!
//! The shard's side of a dialed connection holds a [`ReverseLease`]: it tells the dialer when
//! the client took the connection up (its Hello came) and when the connection went away.

use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::fleet::Fleet;
use crate::spsc::Producer;

/// Most `[[reverse_connect]]` entries.
pub const MAX_TARGETS: usize = 64;
/// Most idle connections kept for one client.
pub const MAX_IDLE: u32 = 16;
/// Most connections to one client in all.
pub const MAX_PER_CLIENT: u32 = 1024;

/// One `[[reverse_connect]]` entry: a client the server dials.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ReverseConnectConfig {
    /// The client's listening URL, `opc.tcp://HOST:PORT` (required).
    pub url: String,
    /// The EndpointUrl sent in the ReverseHello: the URL the client names in its Hello and
    /// looks the server up by. Unset: `opc.tcp://<this host's name>:<listening port>`.
    pub endpoint_url: Option<String>,
    /// Connections kept waiting for the client to take them up (1 to 16).
    pub idle_connections: u32,
    /// Connections to this client in all, idle and in use (`idle_connections` to 1024).
    pub max_connections: u32,
    /// How long an idle connection waits for the client's Hello before the server closes it
    /// (ERR BadTimeout) and dials again, ms.
    pub hello_wait_ms: u64,
    /// Bound of one connect attempt (name resolution and TCP handshake), ms.
    pub connect_timeout_ms: u64,
    /// First back-off after a failed attempt, ms; it doubles up to `retry_max_ms`.
    pub retry_min_ms: u64,
    pub retry_max_ms: u64,
}

impl Default for ReverseConnectConfig {
    fn default() -> Self {
        ReverseConnectConfig {
            url: String::new(),
            endpoint_url: None,
            idle_connections: 1,
            max_connections: 8,
            hello_wait_ms: 60_000,
            connect_timeout_ms: 5_000,
            retry_min_ms: 1_000,
            retry_max_ms: 30_000,
        }
    }
}

/// `opc.tcp://HOST:PORT[/path]` → (HOST, PORT); an IPv6 literal keeps its brackets off.
pub fn parse_client_url(url: &str) -> Result<(String, u16), String> {
    uaring_core::transport::check_endpoint_url(url).map_err(|e| format!("{url:?}: {e}"))?;
    let rest = url
        .get(..10)
        .filter(|s| s.eq_ignore_ascii_case("opc.tcp://"))
        .and_then(|_| url.get(10..))
        .ok_or_else(|| format!("{url:?}: not an opc.tcp:// URL"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("{url:?}: unclosed IPv6 literal"))?;
        (h, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = port
        .ok_or_else(|| format!("{url:?}: a client URL needs a port"))?
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("{url:?}: port must be 1 to 65535"))?;
    if host.is_empty() {
        return Err(format!("{url:?}: no host"));
    }
    Ok((host.to_owned(), port))
}

impl ReverseConnectConfig {
    /// Checks the entry; `Err` names the key.
    pub fn validate(&self) -> Result<(), String> {
        let at = |k: &str| format!("reverse_connect {:?}: {k}", self.url);
        if self.url.is_empty() {
            return Err("[[reverse_connect]]: url is required (opc.tcp://HOST:PORT)".into());
        }
        parse_client_url(&self.url).map_err(|e| format!("reverse_connect url {e}"))?;
        if let Some(e) = &self.endpoint_url {
            uaring_core::transport::check_endpoint_url(e)
                .map_err(|r| format!("{} = {e:?}: {r}", at("endpoint_url")))?;
            if e.is_empty() {
                return Err(format!("{}: empty", at("endpoint_url")));
            }
        }
        if !(1..=MAX_IDLE).contains(&self.idle_connections) {
            return Err(format!("{}: 1 to {MAX_IDLE}", at("idle_connections")));
        }
        if !(self.idle_connections..=MAX_PER_CLIENT).contains(&self.max_connections) {
            return Err(format!(
                "{}: idle_connections ({}) to {MAX_PER_CLIENT}",
                at("max_connections"),
                self.idle_connections
            ));
        }
        if !(100..=3_600_000).contains(&self.hello_wait_ms) {
            return Err(format!("{}: 100 to 3600000", at("hello_wait_ms")));
        }
        if !(10..=120_000).contains(&self.connect_timeout_ms) {
            return Err(format!("{}: 10 to 120000", at("connect_timeout_ms")));
        }
        if !(10..=3_600_000).contains(&self.retry_min_ms) || self.retry_max_ms < self.retry_min_ms {
            return Err(format!(
                "{}: retry_min_ms 10 to 3600000, retry_max_ms at least retry_min_ms",
                at("retry_min_ms")
            ));
        }
        if self.retry_max_ms > 3_600_000 {
            return Err(format!("{}: at most 3600000", at("retry_max_ms")));
        }
        Ok(())
    }
}

/// Checks a whole `[[reverse_connect]]` list.
pub fn validate_all(list: &[ReverseConnectConfig]) -> Result<(), String> {
    if list.len() > MAX_TARGETS {
        return Err(format!(
            "[[reverse_connect]]: {} entries, at most {MAX_TARGETS}",
            list.len()
        ));
    }
    for c in list {
        c.validate()?;
    }
    Ok(())
}

/// One client the dialer serves, shared with the leases of its connections.
#[derive(Debug)]
pub struct Target {
    /// The client's URL, for logs.
    pub url: String,
    /// The ReverseHello's ServerUri (our ApplicationUri) and EndpointUrl.
    pub server_uri: String,
    pub endpoint_url: String,
    /// How long a dialed connection waits for the client's Hello, ms.
    pub hello_wait_ms: u64,
    /// Connections handed to a shard and not taken up yet.
    idle: AtomicU32,
    /// Connections open to this client (idle and in use).
    live: AtomicU32,
    /// Idle connections that closed before the client took them up (the dialer backs off).
    dropped_idle: AtomicU32,
    /// A connection was taken up since the dialer last looked (the back-off resets).
    taken_since: AtomicBool,
    /// Statistics: connections dialed, taken up by the client, failed connect attempts.
    pub dialed: AtomicU64,
    pub taken: AtomicU64,
    pub failed: AtomicU64,
    dialer: OnceLock<Thread>,
}

impl Target {
    fn wake_dialer(&self) {
        if let Some(t) = self.dialer.get() {
            t.unpark();
        }
    }
    /// Connections waiting for the client now.
    pub fn idle(&self) -> u32 {
        self.idle.load(Ordering::Relaxed)
    }
    /// Connections open to the client now.
    pub fn live(&self) -> u32 {
        self.live.load(Ordering::Relaxed)
    }
}

/// A dialed connection's tie to its [`Target`]: counted idle until [`ReverseLease::taken`],
/// counted open until dropped (with the connection, on whichever shard it is then).
#[derive(Debug)]
pub struct ReverseLease {
    target: Arc<Target>,
    idle: bool,
    /// Closed by the server because the client sent no Hello within `hello_wait_ms`: the
    /// client left it unused, it did not turn it away (no back-off).
    waited_out: bool,
}

impl PartialEq for ReverseLease {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.target, &other.target) && self.idle == other.idle
    }
}

impl ReverseLease {
    /// Counts a new connection to `target` (idle and open).
    fn new(target: Arc<Target>) -> ReverseLease {
        target.idle.fetch_add(1, Ordering::Relaxed);
        target.live.fetch_add(1, Ordering::Relaxed);
        ReverseLease {
            target,
            idle: true,
            waited_out: false,
        }
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Still waiting for the client's Hello.
    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// The client took the connection up (its Hello came): the dialer dials a replacement.
    pub fn taken(&mut self) {
        if std::mem::replace(&mut self.idle, false) {
            let t = &self.target;
            t.idle.fetch_sub(1, Ordering::Relaxed);
            t.taken.fetch_add(1, Ordering::Relaxed);
            t.taken_since.store(true, Ordering::Relaxed);
            t.wake_dialer();
        }
    }
}

impl ReverseLease {
    /// The server closes the connection because no Hello came within `hello_wait_ms`: the
    /// dialer replaces it without backing off (the client is not refusing, only idle).
    pub fn waited_out(&mut self) {
        self.waited_out = self.idle;
    }
}

impl Drop for ReverseLease {
    fn drop(&mut self) {
        let t = &self.target;
        if self.idle {
            t.idle.fetch_sub(1, Ordering::Relaxed);
            if !self.waited_out {
                t.dropped_idle.fetch_add(1, Ordering::Relaxed);
            }
        }
        t.live.fetch_sub(1, Ordering::Relaxed);
        t.wake_dialer();
    }
}

/// A dialed socket on its way to a shard.
pub struct Dialed {
    pub fd: OwnedFd,
    pub peer: SocketAddr,
    /// A connection to a Reverse Connect client (`Origin::Reverse`); `None` for an outgoing
    /// connection of the loop's own client (`Origin::Dialed(tag)`: the gateway's dialer).
    pub lease: Option<ReverseLease>,
    /// What the loop's handler knows the connection by (`Origin::Dialed`); 0 with a lease.
    pub tag: u64,
}

/// The dialer thread's per-client state.
struct Slot {
    target: Arc<Target>,
    cfg: ReverseConnectConfig,
    host: String,
    port: u16,
    failures: u32,
    next_attempt: Instant,
    /// A failure was logged at warn since the last success (later ones go to debug).
    warned: bool,
}

impl Slot {
    fn back_off(&mut self, now: Instant, why: &str) {
        self.failures = self.failures.saturating_add(1);
        let ms = self
            .cfg
            .retry_min_ms
            .saturating_mul(1u64 << (self.failures - 1).min(20))
            .min(self.cfg.retry_max_ms);
        self.next_attempt = now + Duration::from_millis(ms);
        if self.warned {
            tracing::debug!(client = %self.cfg.url, retry_ms = ms, "reverse connect: {why}");
        } else {
            self.warned = true;
            tracing::warn!(client = %self.cfg.url, retry_ms = ms, "reverse connect: {why} (retrying with back-off; later failures are logged at debug)");
        }
    }
}

/// The running dialer: stop it with the fleet (it exits when the fleet stops), then join.
pub struct Dialer {
    thread: Option<JoinHandle<()>>,
    targets: Vec<Arc<Target>>,
}

impl Dialer {
    /// The clients it serves (statistics).
    pub fn targets(&self) -> &[Arc<Target>] {
        &self.targets
    }

    /// Waits for the thread (after the fleet was told to stop), at most a second: a connect
    /// in progress (name resolution included) may hold it up to `connect_timeout_ms`, and a
    /// shutdown does not wait for that — the thread is left to end on its own (a socket it
    /// still makes is closed by the stopped shards).
    pub fn join(mut self) {
        let Some(t) = self.thread.take() else {
            return;
        };
        t.thread().unpark();
        let give_up = Instant::now() + Duration::from_secs(1);
        while !t.is_finished() && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(5));
        }
        if t.is_finished() {
            let _ = t.join();
        } else {
            tracing::debug!(
                "reverse connect: the dialer is still in a connect; not waiting for it"
            );
        }
    }
}

/// Starts the dialer for `list` (validated), handing sockets to the shards of `fleet` through
/// `queues` (one per shard, from [`Fleet::take_dial_queues`]). `server_uri` is our
/// ApplicationUri; `default_endpoint_url` the EndpointUrl of entries that set none.
pub fn start(
    list: &[ReverseConnectConfig],
    fleet: Arc<Fleet>,
    queues: Vec<Producer<Dialed>>,
    server_uri: &str,
    default_endpoint_url: &str,
) -> io::Result<Dialer> {
    let now = Instant::now();
    let mut slots = Vec::with_capacity(list.len());
    for cfg in list {
        let (host, port) = parse_client_url(&cfg.url).map_err(io::Error::other)?;
        let target = Arc::new(Target {
            url: cfg.url.clone(),
            server_uri: server_uri.to_owned(),
            endpoint_url: cfg
                .endpoint_url
                .clone()
                .unwrap_or_else(|| default_endpoint_url.to_owned()),
            hello_wait_ms: cfg.hello_wait_ms,
            idle: AtomicU32::new(0),
            live: AtomicU32::new(0),
            dropped_idle: AtomicU32::new(0),
            taken_since: AtomicBool::new(false),
            dialed: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dialer: OnceLock::new(),
        });
        slots.push(Slot {
            target,
            cfg: cfg.clone(),
            host,
            port,
            failures: 0,
            next_attempt: now,
            warned: false,
        });
    }
    let targets: Vec<Arc<Target>> = slots.iter().map(|s| s.target.clone()).collect();
    for s in &slots {
        tracing::info!(
            client = %s.cfg.url,
            endpoint_url = %s.target.endpoint_url,
            idle = s.cfg.idle_connections,
            max = s.cfg.max_connections,
            "reverse connect: dialing"
        );
    }
    let thread = std::thread::Builder::new()
        .name("uaring-reverse".into())
        .spawn(move || run(slots, fleet, queues))?;
    for t in &targets {
        let _ = t.dialer.set(thread.thread().clone());
    }
    thread.thread().unpark();
    Ok(Dialer {
        thread: Some(thread),
        targets,
    })
}

fn connect(host: &str, port: u16, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::other("the name resolved to no address");
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn run(mut slots: Vec<Slot>, fleet: Arc<Fleet>, mut queues: Vec<Producer<Dialed>>) {
    let mut handed = vec![0u64; queues.len()];
    // Parked until a target is set up (start() sets the thread handles after the spawn).
    std::thread::park_timeout(Duration::from_millis(50));
    while !fleet.stopping() {
        let now = Instant::now();
        let mut wake_at = now + Duration::from_secs(1);
        for s in slots.iter_mut() {
            let t = s.target.clone();
            if t.taken_since.swap(false, Ordering::Relaxed) {
                s.failures = 0;
                s.warned = false;
            }
            let dropped = t.dropped_idle.swap(0, Ordering::Relaxed);
            if dropped > 0 {
                s.back_off(now, "the client closed a connection without taking it up");
            }
            while !fleet.stopping()
                && Instant::now() >= s.next_attempt
                && t.idle() < s.cfg.idle_connections
                && t.live() < s.cfg.max_connections
            {
                match connect(
                    &s.host,
                    s.port,
                    Duration::from_millis(s.cfg.connect_timeout_ms),
                ) {
                    Ok(stream) => {
                        t.dialed.fetch_add(1, Ordering::Relaxed);
                        if !hand_over(
                            &fleet,
                            &mut queues,
                            &mut handed,
                            stream,
                            ReverseLease::new(t.clone()),
                        ) {
                            // Every shard's queue is full: the lease's drop counted it as
                            // dropped idle; back off rather than dial into a full server.
                            t.dropped_idle.store(0, Ordering::Relaxed);
                            s.back_off(Instant::now(), "every shard's queue is full");
                        }
                    }
                    Err(e) => {
                        t.failed.fetch_add(1, Ordering::Relaxed);
                        s.back_off(Instant::now(), &format!("connect failed: {e}"));
                    }
                }
            }
            if t.idle() < s.cfg.idle_connections && t.live() < s.cfg.max_connections {
                wake_at = wake_at.min(s.next_attempt);
            }
        }
        let now = Instant::now();
        if wake_at > now {
            std::thread::park_timeout(wake_at - now);
        }
    }
}

/// Gives the socket to the shard with the fewest connections (open, and queued or on their way
/// in) whose queue has room. `handed` counts what this dialer queued for each shard.
fn hand_over(
    fleet: &Fleet,
    queues: &mut [Producer<Dialed>],
    handed: &mut [u64],
    stream: TcpStream,
    lease: ReverseLease,
) -> bool {
    let Ok(peer) = stream.peer_addr() else {
        return false;
    };
    let _ = stream.set_nonblocking(true);
    // A connection the shard popped but has not counted open yet is still "on its way in"
    // (`dialed_in`, loaded first, moves only after `open` did), so none is missed: two
    // connections dialed back to back go to different shards.
    let load = |i: usize| {
        fleet.shards.get(i).map_or(u64::MAX, |s| {
            let taken_in = s.stats.dialed_in.load(Ordering::Acquire);
            let on_the_way = handed.get(i).map_or(0, |h| h.saturating_sub(taken_in));
            s.stats
                .open
                .load(Ordering::Relaxed)
                .saturating_add(on_the_way)
        })
    };
    let mut order: Vec<(u64, usize)> = (0..queues.len()).map(|i| (load(i), i)).collect();
    order.sort_unstable();
    let mut h = Dialed {
        fd: OwnedFd::from(stream),
        peer,
        lease: Some(lease),
        tag: 0,
    };
    for (_, i) in order {
        let Some(q) = queues.get_mut(i) else { continue };
        match q.push(h) {
            Ok(()) => {
                if let Some(n) = handed.get_mut(i) {
                    *n += 1;
                }
                fleet.wake(i);
                return true;
            }
            Err(back) => h = back,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_urls_parse_and_are_checked() {
        assert_eq!(
            parse_client_url("opc.tcp://scada-1:4844").unwrap(),
            ("scada-1".into(), 4844)
        );
        assert_eq!(
            parse_client_url("OPC.TCP://[::1]:4844/path").unwrap(),
            ("::1".into(), 4844)
        );
        assert!(parse_client_url("opc.tcp://host").is_err(), "no port");
        assert!(parse_client_url("opc.tcp://host:0").is_err());
        assert!(parse_client_url("http://host:80").is_err());
        assert!(parse_client_url("opc.tcp://:4844").is_err());
    }

    #[test]
    fn entries_are_bounded() {
        let ok = ReverseConnectConfig {
            url: "opc.tcp://127.0.0.1:4844".into(),
            ..Default::default()
        };
        assert!(ok.validate().is_ok());
        let bad = |f: fn(&mut ReverseConnectConfig)| {
            let mut c = ok.clone();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert!(bad(|c| c.url.clear()).contains("url is required"));
        assert!(bad(|c| c.idle_connections = 0).contains("idle_connections"));
        assert!(bad(|c| c.idle_connections = 17).contains("idle_connections"));
        assert!(bad(|c| c.max_connections = 0).contains("max_connections"));
        assert!(bad(|c| c.hello_wait_ms = 10).contains("hello_wait_ms"));
        assert!(bad(|c| c.retry_max_ms = 5).contains("retry_min_ms"));
        assert!(bad(|c| c.endpoint_url = Some("http://x".into())).contains("endpoint_url"));
        assert!(validate_all(&vec![ok.clone(); MAX_TARGETS]).is_ok());
        assert!(validate_all(&vec![ok; MAX_TARGETS + 1]).is_err());
    }

    #[test]
    fn a_lease_counts_idle_until_taken_and_open_until_dropped() {
        let t = Arc::new(Target {
            url: "opc.tcp://c:1".into(),
            server_uri: "urn:s".into(),
            endpoint_url: "opc.tcp://s:4840".into(),
            hello_wait_ms: 1000,
            idle: AtomicU32::new(0),
            live: AtomicU32::new(0),
            dropped_idle: AtomicU32::new(0),
            taken_since: AtomicBool::new(false),
            dialed: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dialer: OnceLock::new(),
        });
        let mut a = ReverseLease::new(t.clone());
        let b = ReverseLease::new(t.clone());
        assert_eq!((t.idle(), t.live()), (2, 2));
        a.taken();
        a.taken();
        assert_eq!((t.idle(), t.live()), (1, 2));
        assert!(t.taken_since.load(Ordering::Relaxed));
        drop(b);
        assert_eq!((t.idle(), t.live()), (0, 1));
        assert_eq!(t.dropped_idle.load(Ordering::Relaxed), 1, "closed unused");
        drop(a);
        assert_eq!((t.idle(), t.live()), (0, 0));
        assert_eq!(
            t.dropped_idle.load(Ordering::Relaxed),
            1,
            "a used one is no failure"
        );
    }
}
