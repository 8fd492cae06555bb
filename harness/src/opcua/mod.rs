//! OPC UA scenarios over core's client role (`uaring_core::client`): the
//! harness never encodes or decodes OPC UA itself.
//!
//! Each connection is a [`UaDriver`]: core's sans-IO `ClientConnection`
//! (HEL/ACK, OpenSecureChannel, chunking) plus the session sequence
//! (CreateSession, ActivateSession), then a [`Workload`]'s setup steps
//! (subscriptions, monitored items) and its measured requests.
//!
//! This file holds the driver and `run_opcua`; `workloads` the workloads, `sub` the
//! reconnect storms and the `sub` scenario, `connect` session establishment, the blocking
//! one-session helpers and the counters scenario.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::services::attribute::attr;
use uaring_core::types::{
    DataValue, DateTime, ExtensionObject, NodeId, QualifiedName, StatusCode, UaString, Variant,
};
use uaring_core::{DecodeLimits, Now};

use crate::run::{run_with_guard, DynDriver, Plan, RunConfig, Running};
use crate::security::{self, Security};
use crate::uring::{mono_ns, Ctx, Driver};

mod churn;
mod connect;
mod scale;
mod sub;
mod workloads;
pub use churn::*;
pub use connect::*;
pub use scale::*;
use sub::*;
pub use workloads::*;

/// First and count of the benchmark variables (ns=1;i=1001..1100).
pub const FIRST_NODE: u32 = 1001;
pub const NODE_COUNT: u32 = 100;
const ATTR_EVENT_NOTIFIER: u32 = 12;
const SERVER_OBJECT: u32 = 2253;
const HIERARCHICAL_REFERENCES: u32 = 33;
const BASE_EVENT_TYPE: u32 = 2041;

fn realtime_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// The wall time (ns since the Unix epoch) of monotonic instant `mono` (CLOCK_MONOTONIC ns,
/// the loops' clock), from one reading of both clocks taken at first use: the push scenario
/// stamps a message with the time its bytes were reaped by the loop, not the later time this
/// thread got round to decoding it.
pub fn unix_ns_at(mono: u64) -> i128 {
    static OFFSET: std::sync::OnceLock<i128> = std::sync::OnceLock::new();
    let offset = *OFFSET.get_or_init(|| realtime_ns() - i128::from(crate::uring::mono_ns()));
    i128::from(mono) + offset
}

pub fn now_at(mono: u64) -> Now {
    Now::new(mono, DateTime::from_unix_nanos(realtime_ns()))
}

fn status_name(s: StatusCode) -> String {
    format!("{s:?}")
}

/// The service result of any response (ServiceFault included).
fn service_result(r: &Response) -> StatusCode {
    r.response_header().service_result
}

/// The measured operation of one connection and its setup steps.
pub trait Workload: Send {
    /// Setup request number `step` after the session is active; `prev` is
    /// the response to the previous step. `None`: setup is complete.
    fn setup(&mut self, _step: usize, _prev: Option<&Response>) -> Result<Option<Request>, String> {
        Ok(None)
    }
    /// Requests to put in flight when setup is complete.
    fn initial(&self) -> usize;
    /// The request that follows a response (closed loop), if any.
    fn next(&mut self, now_ns: u64) -> Option<Request>;
    /// The request last returned by `next` (or `on_timer`) went out under `id`.
    fn on_sent(&mut self, _id: u32) {}
    /// Checks the response to request `id` and records the operation(s). A
    /// response that is not what the contract says is an error and no
    /// operation is recorded for it.
    fn on_response(
        &mut self,
        id: u32,
        resp: &Response,
        sent_ns: u64,
        now_ns: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String>;
    /// The server granted the session `revised_timeout_ms` (CreateSession's
    /// revisedSessionTimeout) at `now_ns`.
    fn session_created(&mut self, _revised_timeout_ms: f64, _now_ns: u64) {}
    /// The session is activated as `user` (None: anonymously).
    fn logged_in(&mut self, _user: Option<&str>) {}
    /// Timer-driven requests (writers at a fixed rate).
    fn deadline(&self) -> Option<u64> {
        None
    }
    fn on_timer(&mut self, _now_ns: u64, _ctx: &mut Ctx) -> Vec<Request> {
        Vec::new()
    }
}

#[derive(PartialEq, Debug, Clone, Copy)]
enum Stage {
    Channel,
    CreateSession,
    Activate,
    Setup(usize),
    Running,
    Closing,
    Closed,
}

pub struct UaDriver {
    conn: ClientConnection,
    stage: Stage,
    work: Box<dyn Workload>,
    endpoint_url: String,
    /// Send time by request id of every request in flight (servers may answer
    /// far out of order).
    sent: rustc_hash::FxHashMap<u32, u64>,
    security: Option<Arc<Security>>,
    /// Log in with a UserName token (name, password) instead of anonymously.
    user: Option<(String, String)>,
    /// With `user`: anonymously when the server offers no UserName token.
    user_if_offered: bool,
    /// The request id of the CloseSession sent, and its answer's service result.
    close_id: Option<u32>,
    close_result: Option<StatusCode>,
    /// The run is stopping: the workload's timer sends nothing more, so its deadline no
    /// longer counts (a pacer's due send would otherwise stay due).
    stopping: bool,
}

impl UaDriver {
    pub fn new(
        endpoint_url: &str,
        work: Box<dyn Workload>,
        inflight: usize,
        security: Option<Arc<Security>>,
    ) -> UaDriver {
        let mut cfg = ClientConfig::new(endpoint_url);
        if let Some(sec) = &security {
            sec.apply(&mut cfg);
        }
        UaDriver {
            security,
            conn: ClientConnection::new(
                cfg,
                Box::new(uaring::random::os_seeded().expect("the OS random number generator")),
            ),
            stage: Stage::Channel,
            work,
            endpoint_url: endpoint_url.to_string(),
            sent: rustc_hash::FxHashMap::with_capacity_and_hasher(
                inflight * 2 + 8,
                Default::default(),
            ),
            user: None,
            user_if_offered: false,
            close_id: None,
            close_result: None,
            stopping: false,
        }
    }

    /// Activates the session with a UserName token (the password in clear: only accepted
    /// inside a SignAndEncrypt channel).
    pub fn with_user(mut self, user: Option<(String, String)>) -> UaDriver {
        self.user = user;
        self
    }

    /// [`UaDriver::with_user`] where the server offers UserName tokens, else anonymously
    /// (the workload learns which through [`Workload::logged_in`]).
    pub fn with_user_if_offered(mut self, user: Option<(String, String)>) -> UaDriver {
        self.user = user;
        self.user_if_offered = true;
        self
    }

    fn send(&mut self, req: Request, now: u64, out: &mut Vec<u8>) -> Result<(), String> {
        self.send_id(req, now, out).map(|_| ())
    }

    fn send_id(&mut self, req: Request, now: u64, out: &mut Vec<u8>) -> Result<u32, String> {
        let id = self
            .conn
            .send_request(req, now_at(now), out)
            .map_err(|s| format!("send: {}", status_name(s)))?;
        self.sent.insert(id, now);
        Ok(id)
    }

    /// A measured request: its end is marked for per-request sends and the
    /// workload learns its id.
    fn send_work(
        &mut self,
        req: Request,
        now: u64,
        out: &mut Vec<u8>,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        let id = self.send_id(req, now, out)?;
        ctx.mark(out.len());
        self.work.on_sent(id);
        Ok(())
    }

    fn sent_at(&mut self, id: u32, now: u64) -> u64 {
        self.sent.remove(&id).unwrap_or(now)
    }

    fn advance_setup(
        &mut self,
        step: usize,
        prev: Option<&Response>,
        now: u64,
        out: &mut Vec<u8>,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        match self.work.setup(step, prev)? {
            Some(req) => {
                self.stage = Stage::Setup(step + 1);
                self.send(req, now, out)
            }
            None => {
                self.stage = Stage::Running;
                ctx.ready();
                for _ in 0..self.work.initial() {
                    if let Some(req) = self.work.next(now) {
                        self.send_work(req, now, out, ctx)?;
                    }
                }
                Ok(())
            }
        }
    }

    fn handle(
        &mut self,
        id: u32,
        resp: Response,
        now: u64,
        out: &mut Vec<u8>,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        match self.stage {
            Stage::Channel => Err(format!("unexpected {} before the session", resp.name())),
            Stage::CreateSession => {
                let Response::CreateSession(r) = resp else {
                    return Err(format!(
                        "CreateSession answered with {} {}",
                        resp.name(),
                        status_name(service_result(&resp))
                    ));
                };
                if r.response_header.service_result.is_bad() {
                    return Err(format!(
                        "CreateSession: {}",
                        status_name(r.response_header.service_result)
                    ));
                }
                self.conn
                    .set_authentication_token(r.authentication_token.clone());
                self.work.session_created(r.revised_session_timeout, now);
                let client_signature = match &self.security {
                    Some(sec) => {
                        let mut data = if r.server_certificate.is_empty() {
                            sec.server_certificate.clone()
                        } else {
                            r.server_certificate.as_bytes().to_vec()
                        };
                        data.extend_from_slice(r.server_nonce.as_bytes());
                        let (alg, sig) = sec
                            .policy
                            .sign_own(&data)
                            .map_err(|s| format!("client signature: {}", status_name(s)))?;
                        SignatureData {
                            algorithm: alg.as_str().into(),
                            signature: uaring_core::types::ByteString::from(sig),
                        }
                    }
                    None => SignatureData::default(),
                };
                let offers_user_names = r
                    .server_endpoints
                    .iter()
                    .flat_map(|e| e.user_identity_tokens.iter())
                    .any(|p| p.token_type == UserTokenType::UserName);
                let user = self
                    .user
                    .clone()
                    .filter(|_| offers_user_names || !self.user_if_offered);
                self.work.logged_in(user.as_ref().map(|u| u.0.as_str()));
                let token_type = if user.is_some() {
                    UserTokenType::UserName
                } else {
                    UserTokenType::Anonymous
                };
                let policy_id = r
                    .server_endpoints
                    .iter()
                    .flat_map(|e| e.user_identity_tokens.iter())
                    .find(|p| p.token_type == token_type)
                    .map(|p| p.policy_id.clone())
                    .unwrap_or_else(|| {
                        UaString::from(if user.is_some() {
                            "username"
                        } else {
                            "anonymous"
                        })
                    });
                let user_identity_token = match &user {
                    Some((name, password)) => {
                        ExtensionObject::from_struct(&UserNameIdentityToken {
                            policy_id,
                            user_name: name.as_str().into(),
                            password: uaring_core::types::ByteString::from(password.as_bytes()),
                            encryption_algorithm: UaString::null(),
                        })
                    }
                    None => ExtensionObject::from_struct(&AnonymousIdentityToken { policy_id }),
                };
                let req = ActivateSessionRequest {
                    client_signature,
                    user_identity_token,
                    locale_ids: vec!["en".into()],
                    ..Default::default()
                };
                self.stage = Stage::Activate;
                self.send(Request::ActivateSession(Box::new(req)), now, out)
            }
            Stage::Activate => {
                if !matches!(resp, Response::ActivateSession(_)) || service_result(&resp).is_bad() {
                    return Err(format!(
                        "ActivateSession answered with {} {}",
                        resp.name(),
                        status_name(service_result(&resp))
                    ));
                }
                self.advance_setup(0, None, now, out, ctx)
            }
            Stage::Setup(step) => {
                if service_result(&resp).is_bad() {
                    return Err(format!(
                        "setup step {step}: {} {}",
                        resp.name(),
                        status_name(service_result(&resp))
                    ));
                }
                self.advance_setup(step, Some(&resp), now, out, ctx)
            }
            // A response to a request sent before the CloseSession is not its answer.
            Stage::Closing if Some(id) != self.close_id => Ok(()),
            Stage::Closing => {
                self.close_result = Some(service_result(&resp));
                self.stage = Stage::Closed;
                Ok(())
            }
            Stage::Closed => Ok(()),
            Stage::Running => {
                let sent = self.sent_at(id, now);
                if let Err(e) = self.work.on_response(id, &resp, sent, now, ctx) {
                    ctx.error(|| e);
                }
                // The next Read response is decoded into this one's memory.
                self.conn.give_back(resp);
                if !ctx.stopping() {
                    if let Some(req) = self.work.next(now) {
                        self.send_work(req, now, out, ctx)?;
                    }
                }
                Ok(())
            }
        }
    }

    pub fn is_running(&self) -> bool {
        self.stage == Stage::Running
    }

    pub fn is_closed(&self) -> bool {
        self.stage == Stage::Closed
    }

    /// CloseSession (subscriptions deleted); `is_closed` once answered.
    pub fn close_session(&mut self, now: u64, out: &mut Vec<u8>) -> Result<(), String> {
        self.stage = Stage::Closing;
        let id = self.send_id(
            Request::CloseSession(Box::new(CloseSessionRequest {
                delete_subscriptions: true,
                ..Default::default()
            })),
            now,
            out,
        )?;
        self.close_id = Some(id);
        Ok(())
    }

    /// The service result of the CloseSession's answer, once `is_closed`.
    pub fn close_result(&self) -> Option<StatusCode> {
        self.close_result
    }

    /// CloseSecureChannel.
    pub fn close_channel(&mut self, now: u64, out: &mut Vec<u8>) {
        self.conn.close(now_at(now), out);
    }

    fn create_session(&mut self, now: u64, out: &mut Vec<u8>) -> Result<(), String> {
        let req = CreateSessionRequest {
            client_description: ApplicationDescription {
                application_uri: "urn:uaring:bench".into(),
                product_uri: "urn:uaring".into(),
                application_name: uaring_core::types::LocalizedText::text("uaring-bench"),
                application_type: ApplicationType::Client,
                ..Default::default()
            },
            endpoint_url: self.endpoint_url.as_str().into(),
            session_name: "uaring-bench".into(),
            client_nonce: uaring_core::types::ByteString::from(uaring_core::random::bytes(
                self.conn.random(),
                32,
            )),
            requested_session_timeout: 120_000.0,
            client_certificate: match &self.security {
                Some(sec) => uaring_core::types::ByteString::from(sec.client_certificate.clone()),
                None => Default::default(),
            },
            max_response_message_size: 0,
            ..Default::default()
        };
        self.stage = Stage::CreateSession;
        self.send(Request::CreateSession(Box::new(req)), now, out)
    }
}

impl Driver for UaDriver {
    fn start(&mut self, now: u64, out: &mut Vec<u8>, _ctx: &mut Ctx) -> Result<(), String> {
        self.conn.start(now_at(now), out);
        Ok(())
    }

    fn on_recv(
        &mut self,
        now: u64,
        data: &[u8],
        out: &mut Vec<u8>,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        self.conn
            .on_recv(now_at(now), data, out)
            .map_err(|s| format!("connection: {}", status_name(s)))?;
        while let Some((id, resp)) = self.conn.poll_response() {
            self.handle(id, resp, now, out, ctx)?;
        }
        if self.stage == Stage::Channel && self.conn.is_open() {
            self.create_session(now, out)?;
        }
        Ok(())
    }

    fn poll(&mut self, now: u64, out: &mut Vec<u8>, ctx: &mut Ctx) -> Result<(), String> {
        if self.conn.next_deadline().is_some_and(|d| d <= now) {
            self.conn
                .on_timer(now_at(now), out)
                .map_err(|s| format!("renew: {}", status_name(s)))?;
        }
        self.stopping |= ctx.stopping();
        if self.stage == Stage::Running
            && self.work.deadline().is_some_and(|d| d <= now)
            && !self.stopping
        {
            for req in self.work.on_timer(now, ctx) {
                self.send_work(req, now, out, ctx)?;
            }
        }
        Ok(())
    }

    fn next_deadline(&self) -> Option<u64> {
        let a = self.conn.next_deadline();
        let b = if self.stage == Stage::Running && !self.stopping {
            self.work.deadline()
        } else {
            None
        };
        match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }
}

fn endpoint(r: &Running) -> String {
    r.url.clone()
}

fn secure(cfg: &RunConfig, url: &str) -> Result<Option<Arc<Security>>, String> {
    security::prepare(url, &cfg.security, &cfg.opts.security_policy)
}

fn security_check(cfg: &RunConfig) -> Result<(), String> {
    security::parse_mode(&cfg.security).map(|_| ())
}

pub fn run_opcua(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    security_check(cfg)?;
    match cfg.scenario.as_str() {
        "read" | "read-batch" | "write" | "browse" => {
            let nodes: usize = if cfg.scenario == "read-batch" {
                cfg.opts.nodes
            } else {
                1
            };
            let scenario = cfg.scenario.clone();
            let storm = Storm::new(cfg)?;
            let storm2 = storm.clone();
            let plan = move |cfg: &RunConfig,
                             r: &Running|
                  -> Result<(Plan, Vec<(String, Value)>), String> {
                let url = endpoint(r);
                let sec = secure(cfg, &url)?;
                let mut params = storm2.start(cfg, r, &url)?;
                let (inflight, scenario) = (cfg.inflight, scenario.clone());
                let (rate, clients) = (cfg.opts.rate, cfg.clients.max(1));
                let factory = Arc::new(move |i: usize| -> DynDriver {
                    let start = (i as u32).wrapping_mul(37);
                    let work: Box<dyn Workload> = match scenario.as_str() {
                        "write" => Box::new(WriteWork::new(inflight, start)),
                        "browse" => Box::new(BrowseWork { inflight }),
                        _ if rate > 0.0 => {
                            Box::new(ReadWork::new(inflight, nodes, start).open_loop(
                                rate / clients as f64,
                                i,
                                clients,
                            ))
                        }
                        _ => Box::new(ReadWork::new(inflight, nodes, start)),
                    };
                    Box::new(UaDriver::new(&url, work, inflight, sec.clone()))
                });
                if nodes > 1 {
                    params.push(("nodes".to_string(), json!(nodes)));
                }
                if rate > 0.0 {
                    params.push(("rate".to_string(), json!(rate)));
                }
                Ok((
                    Plan::Ring {
                        conns: cfg.clients,
                        factory,
                    },
                    params,
                ))
            };
            // The storm ends before the server is stopped: a handshake cut by the server's
            // shutdown is not a server error.
            let r = crate::run::run_with_guard_and(cfg, &[], &plan, &|| {
                storm.stop();
            });
            let (sessions, errors, seconds) = storm.stop();
            let last_error = storm.last_error();
            let mut o = r?;
            if storm.threads > 0 {
                o.insert("storm_sessions".into(), json!(sessions));
                o.insert("storm_errors".into(), json!(errors));
                if let Some(e) = last_error {
                    o.insert("storm_last_error".into(), json!(e));
                }
                o.insert(
                    "storm_sessions_per_s".into(),
                    json!(if seconds > 0.0 {
                        (sessions as f64 / seconds).round()
                    } else {
                        0.0
                    }),
                );
            }
            Ok(o)
        }
        "sub" | "events" => run_sub(cfg),
        "connect" => run_connect(cfg),
        other => Err(format!("scenario {other} is not an OPC UA load scenario")),
    }
}

/// Nice value of the storm threads.
const STORM_NICE: i32 = 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_ratio() {
        let mut c = CounterSeen::default();
        assert!(c.ratio(10.0).is_none());
        c.see(100, 1_000_000_000);
        assert!(c.ratio(10.0).is_none());
        c.see(298, 3_000_000_000);
        let (r, e) = c.ratio(10.0).unwrap();
        assert_eq!(e, 200.0);
        assert!((r - 0.99).abs() < 1e-9);
    }

    #[test]
    fn stamps_wrap() {
        let t = 5_000_000_000u64; // 5 s
        let s = stamp_us(t);
        assert_eq!(stamp_age_ns(s, t + 250_000), 250_000);
        // Across the 2^31 µs wrap.
        let before = ((1u64 << 31) - 10) * 1000;
        let s = stamp_us(before);
        assert_eq!(stamp_age_ns(s, before + 30_000), 30_000);
    }

    #[test]
    fn read_requests_round_robin() {
        let mut w = ReadWork::new(2, 3, 98);
        let Some(Request::Read(r)) = w.next(0) else {
            panic!()
        };
        let ids: Vec<NodeId> = r.nodes_to_read.iter().map(|x| x.node_id.clone()).collect();
        assert_eq!(
            ids,
            vec![
                NodeId::numeric(1, 1099),
                NodeId::numeric(1, 1100),
                NodeId::numeric(1, 1001)
            ]
        );
        assert_eq!(r.nodes_to_read[0].attribute_id, attr::VALUE);
    }

    /// `--rate`: nothing is in flight at the start; a request is due every period from the
    /// first timer; `inflight` caps what is out, and a freed slot takes a request that is
    /// already due (late), which keeps the time it was due.
    #[test]
    fn open_loop_reads_follow_the_schedule_under_the_cap() {
        const MS: u64 = 1_000_000;
        let t0 = 10 * MS;
        let mut w = ReadWork::new(2, 1, 0).open_loop(1000.0, 0, 1);
        let mut ctx_stats = crate::uring::ThreadStats::default();
        let shared = crate::uring::Shared::default();
        let mut ctx = Ctx::new(crate::uring::PHASE_MEASURE, &mut ctx_stats, &shared);
        assert_eq!(w.initial(), 0);
        assert_eq!(w.deadline(), Some(0), "the first timer starts the schedule");
        assert!(
            w.on_timer(t0 - MS / 2, &mut ctx).is_empty(),
            "the schedule starts at the next multiple of the period"
        );
        assert_eq!(w.deadline(), Some(t0));
        assert_eq!(
            w.on_timer(t0, &mut ctx).len(),
            1,
            "one request is due at the start"
        );
        w.on_sent(1);
        assert_eq!(w.deadline(), Some(t0 + MS));
        assert!(
            w.next(t0 + MS / 2).is_none(),
            "nothing is due before its time"
        );
        // 3.5 ms later three are due, but one slot is free.
        assert_eq!(w.on_timer(t0 + 3 * MS + MS / 2, &mut ctx).len(), 1);
        w.on_sent(2);
        assert_eq!(
            w.deadline(),
            None,
            "at the cap the next answer sends what is due"
        );
        assert_eq!(w.starts[&1].1, t0);
        assert_eq!(w.starts[&2].1, t0 + MS);
        // An answer frees a slot: the request due at +2 ms goes, late, with its due time.
        w.starts.remove(&1);
        assert!(w.next(t0 + 4 * MS).is_some());
        w.on_sent(3);
        assert_eq!(w.starts[&3].1, t0 + 2 * MS);
        // Connection 1 of 4 falls a quarter period later.
        let mut q = ReadWork::new(1, 1, 0).open_loop(1000.0, 1, 4);
        assert!(q.on_timer(t0 - MS / 2, &mut ctx).is_empty());
        assert_eq!(q.deadline(), Some(t0 + MS / 4));
        // The closed loop is unchanged: `inflight` requests at the start, one per answer.
        let mut c = ReadWork::new(3, 1, 0);
        assert_eq!(c.initial(), 3);
        assert_eq!(c.deadline(), None);
        assert!(c.next(0).is_some());
        assert!(c.on_timer(t0, &mut ctx).is_empty());
    }

    #[test]
    fn pacer_steps_from_the_next_period() {
        const MS: u64 = 1_000_000;
        let mut p = Pacer::new(1000.0, 1, 4);
        assert_eq!(p.take(10 * MS), None, "not started");
        p.start(10 * MS + MS / 2);
        assert_eq!(p.next_due, 11 * MS + MS / 4);
        assert_eq!(p.take(11 * MS), None);
        assert_eq!(p.take(13 * MS), Some(11 * MS + MS / 4));
        assert_eq!(
            p.take(13 * MS),
            Some(12 * MS + MS / 4),
            "late ones keep their due time"
        );
        assert_eq!(p.take(13 * MS), None);
    }

    #[test]
    fn subscriber_setup_sequence() {
        let mut w = SubscriberWork::new(SubKind::Changes, 2, 5, 0, 100.0, 10.0, 1);
        let r0 = w.setup(0, None).unwrap().unwrap();
        assert!(matches!(r0, Request::CreateSubscription(_)));
        let resp = Response::CreateSubscription(Box::new(CreateSubscriptionResponse {
            subscription_id: 7,
            ..Default::default()
        }));
        assert!(matches!(
            w.setup(1, Some(&resp)).unwrap(),
            Some(Request::CreateSubscription(_))
        ));
        let resp2 = Response::CreateSubscription(Box::new(CreateSubscriptionResponse {
            subscription_id: 8,
            ..Default::default()
        }));
        let Some(Request::CreateMonitoredItems(m)) = w.setup(2, Some(&resp2)).unwrap() else {
            panic!()
        };
        assert_eq!(m.subscription_id, 7);
        assert_eq!(m.items_to_create.len(), 5);
        let done = Response::CreateMonitoredItems(Box::default());
        let Some(Request::CreateMonitoredItems(m)) = w.setup(3, Some(&done)).unwrap() else {
            panic!()
        };
        assert_eq!(m.subscription_id, 8);
        assert!(w.setup(4, Some(&done)).unwrap().is_none());
    }
}
