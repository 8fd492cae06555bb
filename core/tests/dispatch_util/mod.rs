//! Shared test scaffolding for the session, view, discovery and dispatch tests: one shard
//! over a default server, requests dispatched on a chosen secure channel.
#![allow(dead_code)]

use std::sync::Arc;

use uaring_core::config::ServerConfig;

#[path = "../support/content.rs"]
pub mod content;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::context::RequestContext;
use uaring_core::server::service_state::ServiceState;
use uaring_core::services::dispatch;
use uaring_core::shared::ServerShared;
use uaring_core::{DateTime, ExtensionObject, NodeId, Now, StatusCode, UaString};

pub const NONE_URI: &str = "http://opcfoundation.org/UA/SecurityPolicy#None";
pub const HEL_URL: &str = "opc.tcp://hel-host:4840/uaring";

pub fn start() -> Now {
    Now::new(
        1_000_000_000_000,
        DateTime::from_unix_nanos(1_700_000_000_000_000_000),
    )
}

pub struct Harness {
    pub state: ServiceState,
    pub now: Now,
    /// The channel requests go out on by default.
    pub channel: u32,
    pub handle: u32,
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_config(ServerConfig::default())
    }

    pub fn with_config(config: ServerConfig) -> Harness {
        Harness::with_shard(config, 0)
    }

    pub fn with_shard(config: ServerConfig, shard_index: usize) -> Harness {
        Harness::with_content(config, &content::Content::default(), shard_index)
    }

    /// Shard `shard_index` of a server with `content` in namespace 1.
    pub fn with_content(
        config: ServerConfig,
        content: &content::Content,
        shard_index: usize,
    ) -> Harness {
        let shared: Arc<ServerShared> =
            content::new_with(config, start(), content).expect("server config");
        Harness::on_shared(shared, shard_index)
    }

    /// Shard `shard_index` of a server whose other shards are built on the same `shared`.
    pub fn on_shared(shared: Arc<ServerShared>, shard_index: usize) -> Harness {
        let now = start();
        let mut shard = ServiceState::new(
            shared,
            shard_index,
            Box::new(uaring_core::random::ChaCha::from_u64(1)),
        );
        let channel = shard.next_channel_id();
        Harness {
            state: shard,
            now,
            channel,
            handle: 0,
        }
    }

    pub fn ctx(channel: u32) -> RequestContext<'static> {
        RequestContext {
            channel_id: channel,
            security_policy_uri: NONE_URI,
            security_mode: MessageSecurityMode::None,
            client_certificate: None,
            peer: None,
            endpoint_url: HEL_URL,
        }
    }

    pub fn advance_ms(&mut self, ms: u64) {
        self.now = self.now.advance_ns(ms * 1_000_000);
    }

    /// A header with a fresh request handle.
    pub fn header(&mut self, token: &NodeId) -> RequestHeader {
        self.handle += 1;
        RequestHeader {
            authentication_token: token.clone(),
            timestamp: self.now.utc,
            request_handle: self.handle,
            timeout_hint: 10_000,
            ..RequestHeader::default()
        }
    }

    pub fn call(&mut self, req: Request) -> Response {
        let ch = self.channel;
        self.call_on(ch, req)
    }

    pub fn call_on(&mut self, channel: u32, req: Request) -> Response {
        let handle = req.request_header().request_handle;
        let ctx = Harness::ctx(channel);
        let resp = dispatch(&mut self.state, &ctx, req, self.now);
        assert_eq!(
            resp.response_header().request_handle,
            handle,
            "request handle echoed"
        );
        assert_eq!(
            resp.response_header().timestamp,
            self.now.utc,
            "response timestamp"
        );
        resp
    }

    pub fn create_session_on(&mut self, channel: u32, timeout_ms: f64) -> Response {
        let h = self.header(&NodeId::NULL);
        self.call_on(
            channel,
            Request::CreateSession(Box::new(CreateSessionRequest {
                request_header: h,
                client_description: ApplicationDescription {
                    application_uri: "urn:test:client".into(),
                    application_type: ApplicationType::Client,
                    ..ApplicationDescription::default()
                },
                endpoint_url: "opc.tcp://req-host:4840/uaring".into(),
                session_name: "test session".into(),
                requested_session_timeout: timeout_ms,
                max_response_message_size: 0,
                ..CreateSessionRequest::default()
            })),
        )
    }

    pub fn create_session(&mut self) -> CreateSessionResponse {
        let ch = self.channel;
        match self.create_session_on(ch, 60_000.0) {
            Response::CreateSession(r) => *r,
            other => panic!("CreateSession failed: {other:?}"),
        }
    }

    pub fn activate_on(
        &mut self,
        channel: u32,
        token: &NodeId,
        identity: ExtensionObject,
    ) -> Response {
        let h = self.header(token);
        self.call_on(
            channel,
            Request::ActivateSession(Box::new(ActivateSessionRequest {
                request_header: h,
                locale_ids: vec![UaString::from("en")],
                user_identity_token: identity,
                ..ActivateSessionRequest::default()
            })),
        )
    }

    pub fn anonymous() -> ExtensionObject {
        ExtensionObject::from_struct(&AnonymousIdentityToken {
            policy_id: "anonymous".into(),
        })
    }

    /// Creates and activates a session on the default channel; returns its token.
    pub fn open_session(&mut self) -> NodeId {
        let cs = self.create_session();
        let ch = self.channel;
        match self.activate_on(ch, &cs.authentication_token, Harness::anonymous()) {
            Response::ActivateSession(_) => {}
            other => panic!("ActivateSession failed: {other:?}"),
        }
        cs.authentication_token
    }

    pub fn browse_request(
        &mut self,
        token: &NodeId,
        max_refs: u32,
        nodes: Vec<BrowseDescription>,
    ) -> Request {
        let h = self.header(token);
        Request::Browse(Box::new(BrowseRequest {
            request_header: h,
            requested_max_references_per_node: max_refs,
            nodes_to_browse: nodes,
            ..BrowseRequest::default()
        }))
    }

    pub fn browse_next_request(
        &mut self,
        token: &NodeId,
        release: bool,
        cps: Vec<uaring_core::ByteString>,
    ) -> Request {
        let h = self.header(token);
        Request::BrowseNext(Box::new(BrowseNextRequest {
            request_header: h,
            release_continuation_points: release,
            continuation_points: cps,
        }))
    }

    pub fn read_request(&mut self, token: &NodeId, node: NodeId) -> Request {
        let h = self.header(token);
        Request::Read(Box::new(ReadRequest {
            request_header: h,
            max_age: 0.0,
            timestamps_to_return: TimestampsToReturn::Both,
            nodes_to_read: vec![ReadValueId {
                node_id: node,
                attribute_id: 13,
                ..ReadValueId::default()
            }],
        }))
    }
}

/// Forward hierarchical references of `node`, every class, every field.
pub fn hierarchical(node: NodeId) -> BrowseDescription {
    BrowseDescription {
        node_id: node,
        browse_direction: BrowseDirection::Forward,
        reference_type_id: NodeId::ns0(33),
        include_subtypes: true,
        node_class_mask: 0,
        result_mask: 63,
    }
}

/// The ServiceResult of a ServiceFault, or None for any other response.
pub fn fault_status(r: &Response) -> Option<StatusCode> {
    match r {
        Response::ServiceFault(f) => Some(f.response_header.service_result),
        _ => None,
    }
}
