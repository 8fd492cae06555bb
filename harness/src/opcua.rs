//! OPC UA scenarios over core's client role (`uaring_core::client`): the
//! harness never encodes or decodes OPC UA itself.
//!
//! Each connection is a [`UaDriver`]: core's sans-IO `ClientConnection`
//! (HEL/ACK, OpenSecureChannel, chunking) plus the session sequence
//! (CreateSession, ActivateSession), then a [`Workload`]'s setup steps
//! (subscriptions, monitored items) and its measured requests.

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
    /// The request id of the CloseSession sent, and its answer's service result.
    close_id: Option<u32>,
    close_result: Option<StatusCode>,
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
            close_id: None,
            close_result: None,
        }
    }

    /// Activates the session with a UserName token (the password in clear: only accepted
    /// inside a SignAndEncrypt channel).
    pub fn with_user(mut self, user: Option<(String, String)>) -> UaDriver {
        self.user = user;
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
                let token_type = if self.user.is_some() {
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
                        UaString::from(if self.user.is_some() {
                            "username"
                        } else {
                            "anonymous"
                        })
                    });
                let user_identity_token = match &self.user {
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
        if self.stage == Stage::Running
            && self.work.deadline().is_some_and(|d| d <= now)
            && !ctx.stopping()
        {
            for req in self.work.on_timer(now, ctx) {
                self.send_work(req, now, out, ctx)?;
            }
        }
        Ok(())
    }

    fn next_deadline(&self) -> Option<u64> {
        let a = self.conn.next_deadline();
        let b = if self.stage == Stage::Running {
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

fn bench_node(i: u32) -> NodeId {
    NodeId::numeric(1, FIRST_NODE + i % NODE_COUNT)
}

pub(crate) fn read_value_id(node: NodeId, attribute_id: u32) -> ReadValueId {
    ReadValueId {
        node_id: node,
        attribute_id,
        index_range: UaString::default(),
        data_encoding: QualifiedName::default(),
    }
}

/// `read` and `read-batch`: Read of `nodes` values per request, round robin
/// over the benchmark variables, TimestampsToReturn Neither, MaxAge 0. Every
/// value must be what the contract says: a Good Int32 equal to the
/// variable's index (`ns=1;i=1001+k` holds k; nobody writes during a read run).
///
/// Closed loop by default (`inflight` requests always out, each answer sends the next); with
/// [`ReadWork::open_loop`] a request is due every `period` and `inflight` only caps what is
/// out, and latency runs from when a request was due (see `--rate`).
pub struct ReadWork {
    pub inflight: usize,
    pub nodes: usize,
    cursor: u32,
    /// First variable index and due time (open loop; 0 in a closed loop) of each request
    /// built and not yet sent, in order (`on_sent` takes them).
    built: std::collections::VecDeque<(u32, u64)>,
    /// First variable index and due time of every request in flight, by request id (a map:
    /// servers may answer far out of order).
    starts: rustc_hash::FxHashMap<u32, (u32, u64)>,
    /// Open loop: ns between two requests of this connection.
    period_ns: Option<u64>,
    /// Open loop: where in the period this connection's requests fall (ns), so the
    /// connections of a run arrive evenly spread rather than in step.
    offset_ns: u64,
    /// Open loop: when the next request is due (0: the loop has not started).
    next_due: u64,
}

impl ReadWork {
    pub fn new(inflight: usize, nodes: usize, start: u32) -> Self {
        ReadWork {
            inflight,
            nodes: nodes.max(1),
            cursor: start,
            built: std::collections::VecDeque::with_capacity(inflight),
            starts: rustc_hash::FxHashMap::with_capacity_and_hasher(
                inflight * 2,
                Default::default(),
            ),
            period_ns: None,
            offset_ns: 0,
            next_due: 0,
        }
    }

    /// An open loop of `per_second` requests a second on this connection (> 0), connection
    /// `index` of `of`: request k is due at the k-th multiple of the period on the monotonic
    /// clock (from the first after the session is ready), shifted by `index / of` of a period.
    pub fn open_loop(mut self, per_second: f64, index: usize, of: usize) -> Self {
        let period = ((1e9 / per_second) as u64).max(1);
        self.period_ns = Some(period);
        self.offset_ns = (period as u128 * (index % of.max(1)) as u128 / of.max(1) as u128) as u64;
        self
    }

    /// Checks a Read response to a request whose first variable index was `start`.
    pub fn check(&self, resp: &Response, start: Option<u32>) -> Result<(), String> {
        let Response::Read(r) = resp else {
            return Err(format!(
                "Read answered with {} {}",
                resp.name(),
                status_name(service_result(resp))
            ));
        };
        if r.response_header.service_result.is_bad() {
            return Err(format!(
                "Read: {}",
                status_name(r.response_header.service_result)
            ));
        }
        if r.results.len() != self.nodes {
            return Err(format!(
                "Read: {} results for {} nodes",
                r.results.len(),
                self.nodes
            ));
        }
        for (j, dv) in r.results.iter().enumerate() {
            let expected = start.map(|s| (s.wrapping_add(j as u32) % NODE_COUNT) as i32);
            match (&dv.value, expected) {
                (Variant::Int32(v), Some(e)) if dv.status_code().is_good() && *v == e => {}
                (Variant::Int32(_), None) if dv.status_code().is_good() => {}
                (v, e) => {
                    return Err(format!(
                        "Read: value {v:?} status {} (the contract says Int32 {e:?})",
                        status_name(dv.status_code())
                    ));
                }
            }
        }
        Ok(())
    }

    fn build(&mut self, due: u64) -> Request {
        let mut nodes_to_read = Vec::with_capacity(self.nodes);
        self.built.push_back((self.cursor % NODE_COUNT, due));
        for _ in 0..self.nodes {
            nodes_to_read.push(read_value_id(bench_node(self.cursor), attr::VALUE));
            self.cursor = self.cursor.wrapping_add(1);
        }
        Request::Read(Box::new(ReadRequest {
            max_age: 0.0,
            timestamps_to_return: TimestampsToReturn::Neither,
            nodes_to_read,
            ..Default::default()
        }))
    }

    /// Open loop: may another request go out (requests built or in flight below `inflight`)?
    fn has_slot(&self) -> bool {
        self.starts.len() + self.built.len() < self.inflight
    }

    /// Open loop: the next due request, if one is due at `now` (and takes its slot).
    fn next_due(&mut self, now: u64) -> Option<Request> {
        let period = self.period_ns?;
        if self.next_due == 0 || self.next_due > now {
            return None;
        }
        let due = self.next_due;
        self.next_due += period;
        Some(self.build(due))
    }
}

impl Workload for ReadWork {
    fn initial(&self) -> usize {
        if self.period_ns.is_some() {
            0
        } else {
            self.inflight
        }
    }
    fn next(&mut self, now: u64) -> Option<Request> {
        if self.period_ns.is_some() {
            // A slot was freed: a request already due (late) goes at once.
            return self.next_due(now);
        }
        Some(self.build(0))
    }
    fn on_sent(&mut self, id: u32) {
        if let Some(b) = self.built.pop_front() {
            self.starts.insert(id, b);
        }
    }
    fn deadline(&self) -> Option<u64> {
        // Only while a slot is free: otherwise the next answer sends what is due.
        self.period_ns
            .filter(|_| self.has_slot())
            .map(|_| self.next_due)
    }
    fn on_timer(&mut self, now: u64, _ctx: &mut Ctx) -> Vec<Request> {
        let Some(period) = self.period_ns else {
            return Vec::new();
        };
        if self.next_due == 0 {
            self.next_due = (now / period + 1) * period + self.offset_ns;
        }
        let mut out = Vec::new();
        while self.has_slot() {
            match self.next_due(now) {
                Some(r) => out.push(r),
                None => break,
            }
        }
        out
    }
    fn on_response(
        &mut self,
        id: u32,
        resp: &Response,
        sent: u64,
        now: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        let start = self.starts.remove(&id);
        self.check(resp, start.map(|s| s.0))?;
        let Some((_, due)) = start else {
            return Err(format!(
                "Read: response to request {id}, which is not in flight"
            ));
        };
        // Open loop: from when it was due (it may have waited for a slot); closed: from the send.
        let from = if self.period_ns.is_some() { due } else { sent };
        ctx.complete(now.saturating_sub(from));
        Ok(())
    }
}

/// `write`: Write of one Int32 value per request, round robin.
pub struct WriteWork {
    pub inflight: usize,
    cursor: u32,
    value: i32,
}

impl WriteWork {
    pub fn new(inflight: usize, start: u32) -> Self {
        WriteWork {
            inflight,
            cursor: start,
            value: 0,
        }
    }
}

fn write_request(node: NodeId, value: i32) -> Request {
    Request::Write(Box::new(WriteRequest {
        nodes_to_write: vec![WriteValue {
            node_id: node,
            attribute_id: attr::VALUE,
            index_range: UaString::default(),
            value: DataValue::new(Variant::Int32(value)),
        }],
        ..Default::default()
    }))
}

fn check_write(resp: &Response) -> Result<(), String> {
    let Response::Write(r) = resp else {
        return Err(format!(
            "Write answered with {} {}",
            resp.name(),
            status_name(service_result(resp))
        ));
    };
    if r.response_header.service_result.is_bad() {
        return Err(format!(
            "Write: {}",
            status_name(r.response_header.service_result)
        ));
    }
    match r.results.first() {
        Some(s) if s.is_good() => Ok(()),
        Some(s) => Err(format!("Write: {}", status_name(*s))),
        None => Err("Write: no result".into()),
    }
}

impl Workload for WriteWork {
    fn initial(&self) -> usize {
        self.inflight
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        self.cursor = self.cursor.wrapping_add(1);
        self.value = self.value.wrapping_add(1);
        Some(write_request(bench_node(self.cursor), self.value))
    }
    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        sent: u64,
        now: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        check_write(resp)?;
        ctx.complete(now.saturating_sub(sent));
        Ok(())
    }
}

/// `browse`: Browse of the Server object's hierarchical references.
pub struct BrowseWork {
    pub inflight: usize,
}

impl Workload for BrowseWork {
    fn initial(&self) -> usize {
        self.inflight
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        Some(Request::Browse(Box::new(BrowseRequest {
            requested_max_references_per_node: 0,
            nodes_to_browse: vec![BrowseDescription {
                node_id: NodeId::ns0(SERVER_OBJECT),
                browse_direction: BrowseDirection::Forward,
                reference_type_id: NodeId::ns0(HIERARCHICAL_REFERENCES),
                include_subtypes: true,
                node_class_mask: 0,
                result_mask: 63,
            }],
            ..Default::default()
        })))
    }
    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        sent: u64,
        now: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        let Response::Browse(r) = resp else {
            return Err(format!(
                "Browse answered with {} {}",
                resp.name(),
                status_name(service_result(resp))
            ));
        };
        match r.results.first() {
            Some(b) if b.status_code.is_good() && !b.references.is_empty() => {
                ctx.complete(now.saturating_sub(sent));
                Ok(())
            }
            Some(b) => Err(format!(
                "Browse: {} with {} references",
                status_name(b.status_code),
                b.references.len()
            )),
            None => Err(format!(
                "Browse: {}",
                status_name(r.response_header.service_result)
            )),
        }
    }
}

/// The low 31 bits of monotonic microseconds: what writers write so that a
/// subscriber on any thread can compute write→notify latency.
fn stamp_us(mono: u64) -> i32 {
    ((mono / 1000) & 0x7fff_ffff) as i32
}

fn stamp_age_ns(stamp: i32, now: u64) -> u64 {
    let now_us = (now / 1000) & 0x7fff_ffff;
    let age = (now_us as i64 - stamp as i64).rem_euclid(1 << 31) as u64;
    age * 1000
}

/// Writers of the `sub` scenario: Writes at a fixed rate, each value the
/// send time, round robin over the benchmark variables.
pub struct WriterWork {
    period_ns: u64,
    next_at: u64,
    cursor: u32,
    writes: Arc<AtomicU64>,
}

impl Workload for WriterWork {
    fn initial(&self) -> usize {
        0
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        None
    }
    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        _sent: u64,
        _now: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        check_write(resp)?;
        ctx.count("write_responses", 1);
        Ok(())
    }
    fn deadline(&self) -> Option<u64> {
        Some(self.next_at)
    }
    fn on_timer(&mut self, now: u64, ctx: &mut Ctx) -> Vec<Request> {
        let mut v = Vec::new();
        if self.next_at == 0 {
            self.next_at = now;
        }
        // Catch up at most a few periods (a stalled loop does not burst).
        let mut n = 0;
        while self.next_at <= now && n < 8 {
            self.cursor = self.cursor.wrapping_add(1);
            v.push(write_request(bench_node(self.cursor), stamp_us(now)));
            self.next_at += self.period_ns;
            n += 1;
        }
        if self.next_at <= now {
            self.next_at = now + self.period_ns;
        }
        if ctx.measuring() {
            self.writes.fetch_add(v.len() as u64, Ordering::Relaxed);
            ctx.count("writes", v.len() as u64);
        }
        v
    }
}

/// What a subscriber subscribes to.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum SubKind {
    /// Data changes of the benchmark variables, values are writer stamps.
    Changes,
    /// Counters ns=1;i=1..N: values are sample counts.
    Counters,
    /// Events of the Server object.
    Events,
    /// Values an application pushes into a server of the plant contract (`push`):
    /// `s=Plant.V<i>` in the plant namespace, sampling interval 0.
    Push,
}

/// One counters subscriber's per-item observations, shared with the search.
type SeenCell = Arc<std::sync::Mutex<Vec<CounterSeen>>>;

/// What a counters subscriber saw of one item.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CounterSeen {
    pub first: Option<(u64, i128)>,
    pub last: Option<(u64, i128)>,
}

impl CounterSeen {
    pub fn see(&mut self, value: u64, t_ns: i128) {
        if !matches!(self.first, Some((_, t)) if t_ns >= t) {
            self.first = Some((value, t_ns));
        }
        if !matches!(self.last, Some((_, t)) if t_ns < t) {
            self.last = Some((value, t_ns));
        }
    }

    /// (samples seen / samples expected, expected) between the first and the
    /// last report; `None` with fewer than two distinct reports.
    pub fn ratio(&self, sampling_ms: f64) -> Option<(f64, f64)> {
        let ((v0, t0), (v1, t1)) = (self.first?, self.last?);
        if t1 <= t0 {
            return None;
        }
        let expected = (t1 - t0) as f64 / 1e6 / sampling_ms;
        Some((v1.saturating_sub(v0) as f64 / expected, expected))
    }
}

/// Publish requests a subscriber keeps in flight for `subs` subscriptions.
pub fn publish_inflight(subs: usize) -> usize {
    (subs * 2).clamp(4, 64)
}

/// Subscriber: creates `subs` subscriptions with `items` monitored items
/// each, then keeps Publish requests in flight and counts notifications.
pub struct SubscriberWork {
    pub kind: SubKind,
    pub subs: usize,
    pub items: usize,
    /// First item index (spreads sessions over the nodes).
    pub offset: usize,
    pub publishing_ms: f64,
    pub sampling_ms: f64,
    pub queue: u32,
    pub publish_inflight: usize,
    sub_ids: Vec<u32>,
    acks: Vec<SubscriptionAcknowledgement>,
    /// Counters: per item the first and the last (value, time ns) seen in
    /// the measured window; the time is the value's source timestamp when
    /// the server sends one, else the arrival time.
    pub counter_seen: Arc<std::sync::Mutex<Vec<CounterSeen>>>,
    /// Push: the namespace, the items' variables and their sequences of pushed values.
    pub push: Option<crate::push::PushItems>,
}

impl SubscriberWork {
    pub fn new(
        kind: SubKind,
        subs: usize,
        items: usize,
        offset: usize,
        publishing_ms: f64,
        sampling_ms: f64,
        queue: u32,
    ) -> Self {
        SubscriberWork {
            kind,
            subs: subs.max(1),
            items,
            offset,
            publishing_ms,
            sampling_ms,
            queue,
            publish_inflight: publish_inflight(subs),
            sub_ids: Vec::new(),
            acks: Vec::new(),
            counter_seen: Arc::new(std::sync::Mutex::new(vec![
                CounterSeen::default();
                if kind == SubKind::Counters {
                    items
                } else {
                    0
                }
            ])),
            push: None,
        }
    }

    /// A `push` subscriber: one subscription of `p.params.items` items, sampling interval 0,
    /// the queue size of the run; setup reads the server's NamespaceArray first.
    pub fn push(p: crate::push::PushItems) -> Self {
        let pp = p.params;
        let mut w = SubscriberWork::new(
            SubKind::Push,
            1,
            pp.items,
            0,
            pp.publishing_ms,
            0.0,
            pp.queue_size,
        );
        w.push = Some(p);
        w
    }

    /// Setup steps before the subscriptions: the NamespaceArray Read of `push`.
    fn setup_pre(&self) -> usize {
        usize::from(self.kind == SubKind::Push)
    }

    fn item_node(&self, j: usize) -> NodeId {
        match self.kind {
            SubKind::Changes => bench_node((self.offset + j) as u32),
            SubKind::Counters => NodeId::numeric(1, 1 + j as u32),
            SubKind::Events => NodeId::ns0(SERVER_OBJECT),
            SubKind::Push => self
                .push
                .as_ref()
                .map(|p| p.node(j))
                .unwrap_or(NodeId::NULL),
        }
    }

    /// CreateMonitoredItems calls per subscription: at most `ITEMS_PER_CALL` items each (a
    /// server may cap MaxMonitoredItemsPerCall; uaring's contract mode allows 100,000).
    fn calls_per_sub(&self) -> usize {
        self.items.div_ceil(ITEMS_PER_CALL).max(1)
    }

    fn create_items(&self, sub_id: u32, sub_index: usize, part: usize) -> Request {
        let range = (part * ITEMS_PER_CALL)..((part + 1) * ITEMS_PER_CALL).min(self.items);
        let mut items_to_create = Vec::with_capacity(range.len());
        for j in range {
            let (attr, filter) = match self.kind {
                SubKind::Events => {
                    let field = |name: &str| SimpleAttributeOperand {
                        type_definition_id: NodeId::ns0(BASE_EVENT_TYPE),
                        browse_path: vec![QualifiedName::new(0, name)],
                        attribute_id: attr::VALUE,
                        index_range: UaString::default(),
                    };
                    let f = EventFilter {
                        select_clauses: vec![field("EventId"), field("Time"), field("Message")],
                        ..Default::default()
                    };
                    (ATTR_EVENT_NOTIFIER, ExtensionObject::from_struct(&f))
                }
                _ => (attr::VALUE, ExtensionObject::null()),
            };
            items_to_create.push(MonitoredItemCreateRequest {
                item_to_monitor: read_value_id(self.item_node(j), attr),
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: (sub_index * self.items + j) as u32,
                    sampling_interval: self.sampling_ms,
                    filter,
                    // Events: 0 asks for the server's default event queue (Part 4 §5.12.1.5);
                    // a queue of one would keep one event per publishing interval.
                    queue_size: if self.kind == SubKind::Events {
                        0
                    } else {
                        self.queue
                    },
                    discard_oldest: true,
                },
            });
        }
        Request::CreateMonitoredItems(Box::new(CreateMonitoredItemsRequest {
            subscription_id: sub_id,
            timestamps_to_return: TimestampsToReturn::Both,
            items_to_create,
            ..Default::default()
        }))
    }

    fn publish(&mut self) -> Request {
        let acks = std::mem::take(&mut self.acks);
        Request::Publish(Box::new(PublishRequest {
            subscription_acknowledgements: acks,
            ..Default::default()
        }))
    }
}

impl Workload for SubscriberWork {
    fn setup(&mut self, step: usize, prev: Option<&Response>) -> Result<Option<Request>, String> {
        // Steps: (push: a Read of the NamespaceArray), CreateSubscription × subs, then
        // CreateMonitoredItems × subs.
        if let Some(p) = prev {
            match p {
                Response::Read(r) if self.kind == SubKind::Push => {
                    let dv = r.results.first().ok_or("NamespaceArray: no result")?;
                    if dv.status_code().is_bad() {
                        return Err(format!("NamespaceArray: {}", status_name(dv.status_code())));
                    }
                    self.push
                        .as_mut()
                        .ok_or("push state")?
                        .set_namespace(&dv.value)?;
                }
                Response::CreateSubscription(r) => {
                    self.sub_ids.push(r.subscription_id);
                    if let Some(p) = &self.push {
                        p.setup.subscription(r.revised_publishing_interval);
                    }
                }
                Response::CreateMonitoredItems(r) => {
                    if let Some((j, bad)) = r
                        .results
                        .iter()
                        .enumerate()
                        .find(|(_, x)| x.status_code.is_bad())
                    {
                        let node = if self.kind == SubKind::Push {
                            format!(" {}", self.item_node(j))
                        } else {
                            String::new()
                        };
                        return Err(format!(
                            "CreateMonitoredItems{node}: {}",
                            status_name(bad.status_code)
                        ));
                    }
                    if let Some(p) = &self.push {
                        for x in &r.results {
                            p.setup
                                .item(x.revised_queue_size, x.revised_sampling_interval);
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "unexpected {} during subscription setup",
                        other.name()
                    ))
                }
            }
        }
        let pre = self.setup_pre();
        if step < pre {
            return Ok(Some(Request::Read(Box::new(ReadRequest {
                max_age: 0.0,
                timestamps_to_return: TimestampsToReturn::Neither,
                nodes_to_read: vec![read_value_id(
                    NodeId::ns0(crate::push::NAMESPACE_ARRAY),
                    attr::VALUE,
                )],
                ..Default::default()
            }))));
        }
        let step = step - pre;
        if step < self.subs {
            return Ok(Some(Request::CreateSubscription(Box::new(
                CreateSubscriptionRequest {
                    requested_publishing_interval: self.publishing_ms,
                    requested_lifetime_count: 10_000,
                    requested_max_keep_alive_count: 10,
                    max_notifications_per_publish: 0,
                    publishing_enabled: true,
                    priority: 0,
                    ..Default::default()
                },
            ))));
        }
        let k = step - self.subs;
        let per = self.calls_per_sub();
        if k < self.subs * per {
            return Ok(Some(self.create_items(
                self.sub_ids[k / per],
                k / per,
                k % per,
            )));
        }
        Ok(None)
    }

    fn initial(&self) -> usize {
        self.publish_inflight
    }

    fn next(&mut self, _now: u64) -> Option<Request> {
        Some(self.publish())
    }

    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        _sent: u64,
        now: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        let Response::Publish(r) = resp else {
            return Err(format!(
                "Publish answered with {} {}",
                resp.name(),
                status_name(service_result(resp))
            ));
        };
        let sr = r.response_header.service_result;
        if sr.is_bad() {
            // BadTooManyPublishRequests and BadNoSubscription are not data loss.
            return Err(format!("Publish: {}", status_name(sr)));
        }
        let msg = &r.notification_message;
        if !msg.notification_data.is_empty() {
            self.acks.push(SubscriptionAcknowledgement {
                subscription_id: r.subscription_id,
                sequence_number: msg.sequence_number,
            });
        } else {
            ctx.count("keepalives", 1);
        }
        let limits = DecodeLimits::default();
        // Push: the wall time of the receipt (when the loop reaped the message's last bytes),
        // for the latency from each SourceTimestamp.
        let received = crate::push::Receipt {
            received_unix_ns: if self.kind == SubKind::Push {
                unix_ns_at(now)
            } else {
                0
            },
            published_unix_ns: Some(msg.publish_time)
                .filter(|t| !t.is_null())
                .map(|t| t.unix_nanos()),
        };
        let mut item_error: Option<String> = None;
        for ext in &msg.notification_data {
            if let Some(dc) = ext.decode_as::<DataChangeNotification>(limits) {
                let dc = dc.map_err(|e| format!("DataChangeNotification: {e:?}"))?;
                for item in &dc.monitored_items {
                    match (self.kind, &item.value.value) {
                        (SubKind::Push, _) => {
                            let j = item.client_handle as usize;
                            let p = self.push.as_mut().ok_or("push state")?;
                            if j >= p.seq.len() {
                                return Err(format!(
                                    "push: a notification for client handle {j} of {} items",
                                    p.seq.len()
                                ));
                            }
                            // The message's other items are still accounted for (no false gaps).
                            if let Err(e) = crate::push::see_notification(p, j, item, received, ctx)
                            {
                                item_error.get_or_insert(e);
                            }
                        }
                        (SubKind::Changes, Variant::Int32(stamp)) => {
                            ctx.complete(stamp_age_ns(*stamp, now));
                            ctx.count("notifications", 1);
                        }
                        (SubKind::Counters, v) => {
                            let n = match v {
                                Variant::UInt64(x) => *x,
                                Variant::UInt32(x) => *x as u64,
                                Variant::Int64(x) => *x as u64,
                                Variant::Int32(x) => *x as u64,
                                _ => continue,
                            };
                            ctx.count("notifications", 1);
                            if ctx.measuring() {
                                let idx = item.client_handle as usize % self.items.max(1);
                                let t = match item.value.source_timestamp {
                                    Some(ts) if !ts.is_null() => ts.unix_nanos(),
                                    _ => realtime_ns(),
                                };
                                self.counter_seen.lock().unwrap()[idx].see(n, t);
                            }
                            ctx.complete(0);
                        }
                        _ => ctx.count("notifications_other", 1),
                    }
                }
            } else if let Some(ev) = ext.decode_as::<EventNotificationList>(limits) {
                let ev = ev.map_err(|e| format!("EventNotificationList: {e:?}"))?;
                for e in &ev.events {
                    let lat = match e.event_fields.get(1) {
                        Some(Variant::DateTime(t)) => {
                            (realtime_ns() - t.unix_nanos()).max(0) as u64
                        }
                        _ => 0,
                    };
                    ctx.complete(lat);
                    ctx.count("events", 1);
                }
            }
        }
        match item_error {
            Some(e) => Err(e),
            None => Ok(()),
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

/// A connect storm beside a measured scenario (`--storm N`): N threads on the client CPUs
/// open a SignAndEncrypt channel, create and activate a session (anonymous or `--storm-user`)
/// and close it, back to back, for as long as the run lasts.
#[derive(Clone)]
struct Storm {
    threads: usize,
    user: Option<(String, String)>,
    state: Arc<std::sync::Mutex<StormState>>,
}

#[derive(Default)]
struct StormState {
    stop: Arc<std::sync::atomic::AtomicBool>,
    sessions: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    last_error: Arc<std::sync::Mutex<Option<String>>>,
    started: Option<std::time::Instant>,
    /// How long the last storm ran (kept once it stopped: stopping again returns it).
    seconds: f64,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl StormState {
    /// Stops and joins the threads; (sessions, errors, seconds) of this storm, the same again
    /// when it has stopped already.
    fn halt(&mut self) -> (u64, u64, f64) {
        self.stop.store(true, Ordering::SeqCst);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
        if let Some(t) = self.started.take() {
            self.seconds = t.elapsed().as_secs_f64();
        }
        (
            self.sessions.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
            self.seconds,
        )
    }
}

impl Storm {
    fn new(cfg: &RunConfig) -> Result<Storm, String> {
        let user = match &cfg.opts.storm_user {
            None => None,
            Some(s) => {
                let (n, p) = s.split_once(':').ok_or("--storm-user: name:password")?;
                Some((n.to_string(), p.to_string()))
            }
        };
        Ok(Storm {
            threads: cfg.opts.storm,
            user,
            state: Arc::default(),
        })
    }

    /// Starts the threads against this run's server (a repeated run stops the old ones first).
    fn start(
        &self,
        cfg: &RunConfig,
        r: &Running,
        url: &str,
    ) -> Result<Vec<(String, Value)>, String> {
        if self.threads == 0 {
            return Ok(Vec::new());
        }
        let mut st = self.state.lock().map_err(|_| "storm state poisoned")?;
        st.halt();
        st.stop = Arc::default();
        st.sessions = Arc::default();
        st.errors = Arc::default();
        st.seconds = 0.0;
        let sec = security::prepare(url, "sign-encrypt", &cfg.opts.security_policy)?;
        let addr = r.addr;
        for _ in 0..self.threads {
            let (stop, sessions, errors, last) = (
                st.stop.clone(),
                st.sessions.clone(),
                st.errors.clone(),
                st.last_error.clone(),
            );
            let (sec, url, user, cpus) = (
                sec.clone(),
                url.to_string(),
                self.user.clone(),
                cfg.client_cpus.clone(),
            );
            st.handles.push(std::thread::spawn(move || {
                let _ = uaring_affinity::pin_current_thread(&cpus);
                // Below the measured client threads (nice 0) on the shared client CPUs, so the
                // storm loads the server rather than the measuring client.
                // SAFETY: setpriority on the calling thread (a Linux thread id is a pid here).
                unsafe {
                    libc::setpriority(
                        libc::PRIO_PROCESS,
                        libc::syscall(libc::SYS_gettid) as libc::id_t,
                        STORM_NICE,
                    )
                };
                while !stop.load(Ordering::Relaxed) {
                    match connect_once_as(addr, &url, sec.clone(), user.clone()) {
                        Ok(_) => sessions.fetch_add(1, Ordering::Relaxed),
                        Err(e)
                            if e.contains("Connection refused")
                                || e.contains("BadServerHalted") =>
                        {
                            // The run ended and its server is gone (or going) before the storm was told.
                            break;
                        }
                        Err(e) => {
                            if !stop.load(Ordering::Relaxed) {
                                if let Ok(mut l) = last.lock() {
                                    *l = Some(e);
                                }
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                            std::thread::sleep(Duration::from_millis(10));
                            0
                        }
                    };
                }
            }));
        }
        st.started = Some(std::time::Instant::now());
        Ok(vec![
            ("storm_threads".to_string(), json!(self.threads)),
            ("storm_user".to_string(), json!(self.user.is_some())),
            (
                "storm_security_policy".to_string(),
                json!(cfg.opts.security_policy),
            ),
        ])
    }

    fn last_error(&self) -> Option<String> {
        self.state
            .lock()
            .ok()
            .and_then(|st| st.last_error.lock().ok().and_then(|l| l.clone()))
    }

    fn stop(&self) -> (u64, u64, f64) {
        match self.state.lock() {
            Ok(mut st) => st.halt(),
            Err(_) => (0, 0, 0.0),
        }
    }
}

/// `sub`: sessions × subscriptions × items plus writer sessions; ops are
/// delivered notifications, latency is write→notify. `events`: sessions ×
/// subscriptions × event items on the Server object; ops are events.
/// Most items in one CreateMonitoredItems request of the subscribing workloads.
const ITEMS_PER_CALL: usize = 10_000;

fn run_sub(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    let events = cfg.scenario == "events";
    let o = &cfg.opts;
    let sessions: usize = o.sessions.unwrap_or(cfg.clients.max(1));
    let subs: usize = o.subscriptions;
    let items: usize = o.items.unwrap_or(if events { 1 } else { 100 });
    let writers: usize = if events { 0 } else { o.writers };
    let write_rate: f64 = o.write_rate;
    let publishing_ms: f64 = o.publishing_ms.unwrap_or(100.0);
    let sampling_ms: f64 = o.sampling_ms;
    let writes = Arc::new(AtomicU64::new(0));
    let w2 = writes.clone();
    let plan = move |cfg: &RunConfig,
                     r: &Running|
          -> Result<(Plan, Vec<(String, Value)>), String> {
        let url = endpoint(r);
        let sec = secure(cfg, &url)?;
        let writes = w2.clone();
        let factory = Arc::new(move |i: usize| -> DynDriver {
            if i < sessions {
                let kind = if events {
                    SubKind::Events
                } else {
                    SubKind::Changes
                };
                let w =
                    SubscriberWork::new(kind, subs, items, i * 7, publishing_ms, sampling_ms, 1);
                let inflight = w.publish_inflight;
                Box::new(UaDriver::new(&url, Box::new(w), inflight, sec.clone()))
            } else {
                let period_ns = (1e9 / write_rate.max(0.001)) as u64;
                let w = WriterWork {
                    period_ns,
                    next_at: 0,
                    cursor: (i * 13) as u32,
                    writes: writes.clone(),
                };
                Box::new(UaDriver::new(&url, Box::new(w), 64, sec.clone()))
            }
        });
        let params = vec![
            ("sessions".to_string(), json!(sessions)),
            ("subscriptions".to_string(), json!(subs)),
            ("items".to_string(), json!(items)),
            ("writers".to_string(), json!(writers)),
            ("write_rate".to_string(), json!(write_rate)),
            ("publishing_ms".to_string(), json!(publishing_ms)),
            ("sampling_ms".to_string(), json!(sampling_ms)),
        ];
        Ok((
            Plan::Ring {
                conns: sessions + writers,
                factory,
            },
            params,
        ))
    };
    let mut o = run_with_guard(cfg, &[], &plan)?;
    if !events {
        // Each write changes one variable; every monitored item on it should
        // report it once (queue 1: a faster writer than the sampling loses
        // intermediate values, which is correct behaviour, not loss).
        let total_items = (sessions * subs * items) as f64;
        let per_node = total_items / NODE_COUNT as f64;
        let w = o.get("writes").and_then(|v| v.as_f64()).unwrap_or(0.0);
        let expected = (w * per_node).round();
        let delivered = o
            .get("notifications")
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0);
        o.insert("expected_notifications".into(), json!(expected));
        o.insert(
            "delivered_ratio".into(),
            json!(if expected > 0.0 {
                (delivered / expected * 1000.0).round() / 1000.0
            } else {
                0.0
            }),
        );
    }
    let _ = writes;
    Ok(o)
}

/// `connect`: full OpenSecureChannel + CreateSession + ActivateSession +
/// Close per iteration, one blocking client per client thread.
fn run_connect(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    // With an RSA policy, aws-lc-rs's private-key operations are timed on the server's CPUs
    // while the server idles before the warm-up (and after the window, below): the bound the
    // establishments are quoted beside. The decryptions it counts come from the
    // OpenSecureChannel requests the clients of the same run send.
    // With an ECC policy the bound is the ECC private-key work instead
    // (`rsa_bound::calibrate_ecc`), timed once before the run.
    let client_policy = security::parse_client_policy(&cfg.opts.security_policy)?;
    let ecc_curve = match client_policy {
        security::ClientPolicy::Ecc(c) => Some(c),
        security::ClientPolicy::Rsa(_) => None,
    };
    let policy = match client_policy {
        security::ClientPolicy::Rsa(p) => p,
        security::ClientPolicy::Ecc(_) => uaring_crypto::PolicyId::Basic256Sha256,
    };
    let ecc_bound: Arc<std::sync::Mutex<Option<f64>>> = Arc::default();
    let ecc_b = ecc_bound.clone();
    let calibration: Arc<std::sync::Mutex<Option<crate::rsa_bound::Calibration>>> = Arc::default();
    let opn_encrypted = Arc::new(AtomicU64::new(0));
    let (cal, opn) = (calibration.clone(), opn_encrypted.clone());
    let plan =
        move |cfg: &RunConfig, r: &Running| -> Result<(Plan, Vec<(String, Value)>), String> {
            let url = endpoint(r);
            let sec = secure(cfg, &url)?;
            opn.store(0, Ordering::Relaxed);
            if let (Some(_), Some(curve)) = (&sec, ecc_curve) {
                let us = crate::rsa_bound::calibrate_ecc(curve, &cfg.server_cpus, 2.0)?;
                *ecc_b.lock().map_err(|_| "calibration lock".to_string())? = Some(us);
            } else if let Some(s) = &sec {
                let bits = crate::rsa_bound::key_bits_of(&s.server_certificate)?;
                let c = crate::rsa_bound::calibrate(policy, bits, &cfg.server_cpus, 2.0)?;
                *cal.lock().map_err(|_| "calibration lock".to_string())? = Some(c);
            }
            let opn = opn.clone();
            let body = Arc::new(
                move |_i: usize,
                      addr: std::net::SocketAddr,
                      shared: &crate::uring::Shared,
                      stats: &mut crate::uring::ThreadStats| {
                    shared.ready.fetch_add(1, Ordering::SeqCst);
                    loop {
                        let phase = shared.phase.load(Ordering::Relaxed);
                        if phase == crate::uring::PHASE_STOP {
                            break;
                        }
                        let t0 = mono_ns();
                        let r = connect_once(addr, &url, sec.clone());
                        let mut ctx = Ctx::new(phase, stats, shared);
                        match r {
                            Ok(sent) => {
                                if let Some(n) = sent.opn_encrypted_len {
                                    let _ = opn.compare_exchange(
                                        0,
                                        n as u64,
                                        Ordering::Relaxed,
                                        Ordering::Relaxed,
                                    );
                                }
                                ctx.complete(mono_ns() - t0)
                            }
                            Err(e) => {
                                ctx.error(|| e);
                                std::thread::sleep(Duration::from_millis(10));
                            }
                        }
                    }
                },
            );
            Ok((
                Plan::Threads {
                    count: cfg.clients,
                    body,
                },
                vec![("security_policy".into(), json!(cfg.opts.security_policy))],
            ))
        };
    // The machine's speed drifts: the calibration runs again after the window (the server
    // has stopped) and the bound is the mean of the two, which bracket the window. A run whose
    // two calibrations differ by more than RSA_DRIFT_MAX is repeated, like one with foreign load
    // (up to --max-repeats), and flagged `rsa_bound_unsteady` if the repeats run out.
    const RSA_DRIFT_MAX: f64 = 0.10;
    let mut repeated = 0u32;
    let mut o = loop {
        let mut o = run_with_guard(cfg, &[], &plan)?;
        if let Some(us) = ecc_bound
            .lock()
            .map_err(|_| "calibration lock".to_string())?
            .take()
        {
            crate::rsa_bound::add_ecc_to(&mut o, us);
        }
        let Some(before) = calibration
            .lock()
            .map_err(|_| "calibration lock".to_string())?
            .take()
        else {
            break o;
        };
        let after = crate::rsa_bound::calibrate(policy, before.key_bits, &before.cpus, 2.0)?;
        let drift = before.drift_to(&after);
        crate::rsa_bound::add_to(
            &mut o,
            &before.mean_with(&after),
            opn_encrypted.load(Ordering::Relaxed),
        );
        o.insert("rsa_bound_drift".into(), json!(drift));
        if drift.abs() <= RSA_DRIFT_MAX {
            break o;
        }
        if repeated >= cfg.max_repeats {
            o.insert("rsa_bound_unsteady".into(), json!(true));
            break o;
        }
        repeated += 1;
        eprintln!("uaring-bench: the RSA rate drifted {drift:+.3} across the run: run repeated ({repeated}/{})", cfg.max_repeats);
    };
    if repeated > 0 {
        let d = o.get("discarded_runs").and_then(Value::as_u64).unwrap_or(0);
        o.insert("discarded_runs".into(), json!(d + u64::from(repeated)));
    }
    Ok(o)
}

/// A struct that does nothing after the session is active.
struct NoWork;

impl Workload for NoWork {
    fn initial(&self) -> usize {
        0
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        None
    }
    fn on_response(
        &mut self,
        _id: u32,
        _resp: &Response,
        _sent: u64,
        _now: u64,
        _ctx: &mut Ctx,
    ) -> Result<(), String> {
        Ok(())
    }
}

/// One blocking OpenSecureChannel + CreateSession + ActivateSession +
/// CloseSession + CloseSecureChannel through the same driver as the load.
pub fn connect_once(
    addr: std::net::SocketAddr,
    url: &str,
    sec: Option<Arc<Security>>,
) -> Result<Sent, String> {
    connect_once_as(addr, url, sec, None)
}

/// [`connect_once`] with a UserName login (`user`: name, password) or anonymously.
pub fn connect_once_as(
    addr: std::net::SocketAddr,
    url: &str,
    sec: Option<Arc<Security>>,
    user: Option<(String, String)>,
) -> Result<Sent, String> {
    let mut d = UaDriver::new(url, Box::new(NoWork), 4, sec).with_user(user);
    run_session_blocking(addr, &mut d, UaDriver::is_running)
}

/// What a blocking session sent that a run may count.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sent {
    /// [`crate::rsa_bound::opn_encrypted_len`] of its first OpenSecureChannel request.
    pub opn_encrypted_len: Option<usize>,
}

/// Drives one session over a blocking socket: connect, run `d` until `time_to_close` says
/// so, CloseSession, then close the channel. Used where a whole session is the operation
/// (session establishment, the soak's churn, the connect storm).
pub fn run_session_blocking(
    addr: std::net::SocketAddr,
    d: &mut UaDriver,
    time_to_close: impl Fn(&UaDriver) -> bool,
) -> Result<Sent, String> {
    BlockingSession::open(addr, d, time_to_close)?.close(d)
}

/// One session's connection over a blocking socket (read timeout 10 s), driving a
/// [`UaDriver`] for [`run_session_blocking`].
struct BlockingSession {
    stream: std::net::TcpStream,
    /// What the driver wrote and the socket has not taken yet.
    out: Vec<u8>,
    buf: Vec<u8>,
    shared: crate::uring::Shared,
    stats: crate::uring::ThreadStats,
    sent: Sent,
}

impl BlockingSession {
    /// Connects and drives `d` until `ready(d)` says so after a response; what `d` wrote
    /// in answer is still queued (the next write sends it).
    pub fn open(
        addr: std::net::SocketAddr,
        d: &mut UaDriver,
        ready: impl Fn(&UaDriver) -> bool,
    ) -> Result<BlockingSession, String> {
        let stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .map_err(|e| format!("connect: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let mut s = BlockingSession {
            stream,
            out: Vec::with_capacity(4096),
            buf: vec![0u8; 65536],
            shared: crate::uring::Shared::default(),
            stats: crate::uring::ThreadStats::default(),
            sent: Sent::default(),
        };
        let mut ctx = Ctx::new(crate::uring::PHASE_WARMUP, &mut s.stats, &s.shared);
        d.start(mono_ns(), &mut s.out, &mut ctx)?;
        loop {
            s.flush()?;
            s.read_into(d)?;
            if ready(d) {
                return Ok(s);
            }
        }
    }

    /// Writes what `d` has queued.
    pub fn flush(&mut self) -> Result<(), String> {
        use std::io::Write;
        if !self.out.is_empty() {
            if self.sent.opn_encrypted_len.is_none() {
                self.sent.opn_encrypted_len = crate::rsa_bound::opn_encrypted_len(&self.out);
            }
            self.stream
                .write_all(&self.out)
                .map_err(|e| format!("send: {e}"))?;
            self.out.clear();
        }
        Ok(())
    }

    /// One read (waiting up to the read timeout), handed to `d`.
    fn read_into(&mut self, d: &mut UaDriver) -> Result<(), String> {
        use std::io::Read;
        let n = self
            .stream
            .read(&mut self.buf)
            .map_err(|e| format!("recv: {e}"))?;
        if n == 0 {
            return Err("connection closed by the server".into());
        }
        let mut ctx = Ctx::new(crate::uring::PHASE_WARMUP, &mut self.stats, &self.shared);
        d.on_recv(mono_ns(), &self.buf[..n], &mut self.out, &mut ctx)
    }

    /// CloseSession, its answer, then CloseSecureChannel.
    pub fn close(mut self, d: &mut UaDriver) -> Result<Sent, String> {
        use std::io::Write;
        d.close_session(mono_ns(), &mut self.out)?;
        loop {
            self.flush()?;
            if d.is_closed() {
                break;
            }
            self.read_into(d)?;
        }
        d.close_channel(mono_ns(), &mut self.out);
        let _ = self.stream.write_all(&self.out);
        Ok(self.sent)
    }
}

/// `counters`: the sampling-capacity search. Items double from
/// `--start-items` until a run fails, then bisect until the bracket is within
/// 10 %; pass = every item reaches ≥ 99 % of its expected samples.
pub fn run_counters(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    security_check(cfg)?;
    let start: usize = cfg.opts.start_items;
    let max: usize = cfg.opts.max_items;
    let sampling_ms: f64 = cfg.opts.sampling_ms;
    let publishing_ms: f64 = cfg.opts.publishing_ms.unwrap_or(1000.0);
    let sessions: usize = cfg.opts.sessions.unwrap_or(1);
    let mut cfg = cfg.clone();
    if let crate::run::Target::Uaring { args, .. } = &mut cfg.target {
        if !args.contains("{items}") {
            args.push_str(" --counters {items}");
        }
    }
    let mut steps: Vec<Value> = Vec::new();
    let mut pass: Option<usize> = None;
    let mut fail: Option<usize> = None;
    let mut n = start.max(1);
    let mut last: Option<Map<String, Value>> = None;
    for _ in 0..40 {
        let (ok, o) = counters_step(&cfg, n, sessions, sampling_ms, publishing_ms)?;
        steps.push(json!({"items": n, "pass": ok, "min_ratio": o.get("min_sample_ratio").cloned().unwrap_or(Value::Null)}));
        if ok {
            pass = Some(n);
            last = Some(o);
        } else {
            fail = Some(n);
            if last.is_none() {
                last = Some(o);
            }
        }
        n = match (pass, fail) {
            (Some(p), None) if p * 2 <= max => p * 2,
            (Some(_), None) => break,
            (None, Some(f)) if f > 1 => f / 2,
            (None, Some(_)) => break,
            (Some(p), Some(f)) => {
                if (f as f64 - p as f64) <= 0.1 * p as f64 || f <= p + 1 {
                    break;
                }
                (p + f) / 2
            }
            (None, None) => break,
        };
    }
    let mut o = last.unwrap_or_default();
    o.insert("scenario".into(), json!("counters"));
    o.insert("capacity_items".into(), json!(pass.unwrap_or(0)));
    o.insert("steps".into(), Value::Array(steps));
    Ok(o)
}

fn counters_step(
    cfg: &RunConfig,
    items: usize,
    sessions: usize,
    sampling_ms: f64,
    publishing_ms: f64,
) -> Result<(bool, Map<String, Value>), String> {
    let per_session = items.div_ceil(sessions.max(1));
    let seen: Arc<std::sync::Mutex<Vec<SeenCell>>> = Default::default();
    let seen2 = seen.clone();
    let plan =
        move |cfg: &RunConfig, r: &Running| -> Result<(Plan, Vec<(String, Value)>), String> {
            let url = endpoint(r);
            let sec = secure(cfg, &url)?;
            let seen = seen2.clone();
            seen.lock().unwrap().clear();
            let factory = Arc::new(move |i: usize| -> DynDriver {
                let n = per_session.min(items.saturating_sub(i * per_session));
                let mut w =
                    SubscriberWork::new(SubKind::Counters, 1, n, 0, publishing_ms, sampling_ms, 1);
                w.offset = i * per_session;
                seen.lock().unwrap().push(w.counter_seen.clone());
                let inflight = w.publish_inflight;
                Box::new(UaDriver::new(&url, Box::new(w), inflight, sec.clone()))
            });
            Ok((
                Plan::Ring {
                    conns: sessions,
                    factory,
                },
                vec![
                    ("items".into(), json!(items)),
                    ("sampling_ms".into(), json!(sampling_ms)),
                    ("publishing_ms".into(), json!(publishing_ms)),
                ],
            ))
        };
    let vars = [
        ("items", items.to_string()),
        ("sampling", format!("{sampling_ms}")),
    ];
    let mut o = run_with_guard(cfg, &vars, &plan)?;
    let seconds = o
        .get("seconds")
        .and_then(|v| v.as_f64())
        .unwrap_or(cfg.duration_s);
    // Expected samples per item over the window between the first and the
    // last publish seen: the window minus one publishing interval.
    let _ = seconds;
    let mut min_ratio = f64::INFINITY;
    let mut reported = 0usize;
    let mut expected_sum = 0.0;
    for s in seen.lock().unwrap().iter() {
        for c in s.lock().unwrap().iter() {
            match c.ratio(sampling_ms) {
                Some((ratio, expected)) => {
                    reported += 1;
                    expected_sum += expected;
                    min_ratio = min_ratio.min(ratio);
                }
                None => min_ratio = 0.0,
            }
        }
    }
    let expected = if reported > 0 {
        expected_sum / reported as f64
    } else {
        0.0
    };
    if !min_ratio.is_finite() {
        min_ratio = 0.0;
    }
    let ok = min_ratio >= 0.99
        && reported == items
        && o.get("errors").and_then(|v| v.as_u64()) == Some(0);
    o.insert(
        "expected_samples_per_item".into(),
        json!((expected * 10.0).round() / 10.0),
    );
    o.insert(
        "min_sample_ratio".into(),
        json!((min_ratio * 1000.0).round() / 1000.0),
    );
    o.insert("items_reporting".into(), json!(reported));
    o.insert("pass".into(), json!(ok));
    Ok((ok, o))
}

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
