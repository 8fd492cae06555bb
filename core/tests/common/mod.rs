//! Shared by the transport / secure channel / client / in-memory tests: a small
//! ConnectionHost with a test-only dispatcher, a clock, and a seeded PRNG.
#![allow(dead_code)]

use uaring_core::config::TransportLimits;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{
    ActivateSessionResponse, CreateSessionResponse, EndpointDescription, GetEndpointsResponse,
    MessageSecurityMode, ReadResponse, ResponseHeader, ServiceFault, UserTokenPolicy,
    UserTokenType,
};
use uaring_core::secure_channel::SecurityProvider;
use uaring_core::server::context::{ConnectionHost, RequestContext};
use uaring_core::types::{ByteString, DataValue, DateTime, NodeId, StatusCode, Variant};
use uaring_core::Now;

pub struct TestHost {
    pub limits: TransportLimits,
    pub security: SecurityProvider,
    pub next_channel_id: u32,
    pub open_channels: Vec<u32>,
    pub closed_channels: Vec<u32>,
    pub dispatched: usize,
    /// Every Read value is a ByteString of this many bytes (to force large responses).
    pub read_value_len: usize,
    pub random: uaring_core::random::ChaCha,
}

impl TestHost {
    pub fn new() -> Self {
        TestHost::with_limits(TransportLimits::default())
    }
    pub fn with_limits(limits: TransportLimits) -> Self {
        limits.validate().unwrap();
        TestHost {
            limits,
            security: SecurityProvider::none_only(),
            next_channel_id: 1,
            open_channels: Vec::new(),
            closed_channels: Vec::new(),
            dispatched: 0,
            read_value_len: 0,
            random: uaring_core::random::ChaCha::from_u64(1),
        }
    }
}

fn header(handle: u32, now: Now) -> ResponseHeader {
    ResponseHeader {
        timestamp: now.utc,
        request_handle: handle,
        service_result: StatusCode::Good,
        ..Default::default()
    }
}

impl ConnectionHost for TestHost {
    fn transport_limits(&self) -> &TransportLimits {
        &self.limits
    }
    fn random(&mut self) -> &mut dyn uaring_core::random::Random {
        &mut self.random
    }
    fn security(&self) -> &SecurityProvider {
        &self.security
    }
    fn open_channel(&mut self) -> Result<u32, StatusCode> {
        if self.open_channels.len() >= self.limits.max_channels_per_shard as usize {
            return Err(StatusCode::BadTcpNotEnoughResources);
        }
        let id = self.next_channel_id;
        self.next_channel_id += 1;
        self.open_channels.push(id);
        Ok(id)
    }
    fn channel_closed(&mut self, channel_id: u32) {
        let before = self.open_channels.len();
        self.open_channels.retain(|&c| c != channel_id);
        assert_eq!(
            before,
            self.open_channels.len() + 1,
            "channel {channel_id} reported closed twice or never opened"
        );
        self.closed_channels.push(channel_id);
    }
    fn dispatch(&mut self, ctx: &RequestContext<'_>, request: Request, now: Now) -> Response {
        assert_eq!(ctx.security_mode, MessageSecurityMode::None);
        self.dispatched += 1;
        let h = request.request_header().request_handle;
        match request {
            Request::Read(r) => {
                let results = r
                    .nodes_to_read
                    .iter()
                    .map(|_| {
                        if self.read_value_len > 0 {
                            DataValue::new(Variant::ByteString(ByteString::from(
                                vec![7u8; self.read_value_len],
                            )))
                        } else {
                            DataValue::new(Variant::Int32(42))
                        }
                    })
                    .collect();
                Response::Read(Box::new(ReadResponse {
                    response_header: header(h, now),
                    results,
                    diagnostic_infos: vec![],
                }))
            }
            Request::GetEndpoints(_) => Response::GetEndpoints(Box::new(GetEndpointsResponse {
                response_header: header(h, now),
                endpoints: vec![EndpointDescription {
                    endpoint_url: ctx.endpoint_url.into(),
                    security_mode: MessageSecurityMode::None,
                    security_policy_uri: ctx.security_policy_uri.into(),
                    user_identity_tokens: vec![UserTokenPolicy {
                        policy_id: "anon".into(),
                        token_type: UserTokenType::Anonymous,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            })),
            Request::CreateSession(_) => Response::CreateSession(Box::new(CreateSessionResponse {
                response_header: header(h, now),
                authentication_token: NodeId::byte_string(0, vec![1, 2, 3]),
                revised_session_timeout: 60_000.0,
                server_nonce: ByteString::from(vec![0u8; 32]),
                ..Default::default()
            })),
            Request::ActivateSession(_) => {
                Response::ActivateSession(Box::new(ActivateSessionResponse {
                    response_header: header(h, now),
                    server_nonce: ByteString::from(vec![0u8; 32]),
                    ..Default::default()
                }))
            }
            _ => Response::ServiceFault(Box::new(ServiceFault {
                response_header: ResponseHeader {
                    service_result: StatusCode::BadServiceUnsupported,
                    ..header(h, now)
                },
            })),
        }
    }
}

/// A fixed starting instant for simulated time.
pub fn t0() -> Now {
    Now::new(
        1_000_000_000,
        DateTime::from_unix_nanos(1_700_000_000_000_000_000),
    )
}

/// xorshift64*: tiny, seeded, deterministic.
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The ERR status in `out`, if `out` ends with (or is) an ERR message.
pub fn find_err(out: &[u8]) -> Option<StatusCode> {
    let mut i = 0;
    while i + 8 <= out.len() {
        let size = u32::from_le_bytes([out[i + 4], out[i + 5], out[i + 6], out[i + 7]]) as usize;
        if &out[i..i + 3] == b"ERR" && i + 12 <= out.len() {
            return Some(StatusCode(u32::from_le_bytes([
                out[i + 8],
                out[i + 9],
                out[i + 10],
                out[i + 11],
            ])));
        }
        if size < 8 {
            return None;
        }
        i += size;
    }
    None
}
