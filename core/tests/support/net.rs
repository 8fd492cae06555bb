//! A ClientConnection and a ServerConnection on a real ServiceState, talking in memory (no
//! sockets): the set-up of the in-memory service tests and of the allocation count.
#![allow(dead_code)]

#[path = "content.rs"]
mod content;
use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{
    ActivateSessionRequest, AnonymousIdentityToken, CreateSessionRequest, UserTokenType,
};
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::server::service_state::ServiceState;
use uaring_core::types::{ByteString, ExtensionObject};
use uaring_core::Now;

pub struct Net {
    pub state: ServiceState,
    pub server: ServerConnection,
    pub client: ClientConnection,
    /// Bytes on their way from the client to the server, and back.
    pub c2s: Vec<u8>,
    pub s2c: Vec<u8>,
    /// The clock every call here uses.
    pub now: Now,
}

impl Net {
    /// A fresh shard and a client connection with its secure channel open (SecurityPolicy None).
    pub fn connected(now: Now) -> Net {
        Net::connected_with(ServerConfig::default(), now)
    }

    /// [`Net::connected`] to a server with `config`.
    pub fn connected_with(config: ServerConfig, now: Now) -> Net {
        Net::connected_to(content::new(config, now).expect("server"), now)
    }

    /// [`Net::connected`] to a server with the default content and what `extend` adds.
    pub fn connected_with_and(
        config: ServerConfig,
        now: Now,
        extend: impl FnMut(&mut uaring_core::address_space::AddressSpaceBuilder) -> Result<(), String>,
    ) -> Net {
        Net::connected_to(content::new_and(config, now, extend).expect("server"), now)
    }

    /// [`Net::connected`] to `shared`.
    pub fn connected_to(
        shared: std::sync::Arc<uaring_core::shared::ServerShared>,
        now: Now,
    ) -> Net {
        let mut shard = ServiceState::new(
            shared,
            0,
            Box::new(uaring_core::random::ChaCha::from_u64(1)),
        );
        let server = ServerConnection::new(&mut shard, None, now);
        let config = ClientConfig::new("opc.tcp://localhost:4840/uaring");
        let mut client =
            ClientConnection::new(config, Box::new(uaring_core::random::ChaCha::from_u64(2)));
        let mut c2s = Vec::new();
        client.start(now, &mut c2s);
        let mut n = Net {
            state: shard,
            server,
            client,
            c2s,
            s2c: Vec::new(),
            now,
        };
        n.pump();
        n
    }

    /// CreateSession (with `session_timeout_ms` and `max_response_message_size`, 0 = none) and
    /// an anonymous ActivateSession; the client then sends the session's token.
    pub fn activate_anonymous_session(
        &mut self,
        session_timeout_ms: f64,
        max_response_message_size: u32,
    ) {
        let Response::CreateSession(cs) =
            self.call(Request::CreateSession(Box::new(CreateSessionRequest {
                session_name: "t".into(),
                client_nonce: ByteString::from(vec![1u8; 32]),
                requested_session_timeout: session_timeout_ms,
                max_response_message_size,
                ..Default::default()
            })))
        else {
            panic!("CreateSession failed")
        };
        self.client
            .set_authentication_token(cs.authentication_token.clone());
        let policy_id = cs
            .server_endpoints
            .iter()
            .flat_map(|e| &e.user_identity_tokens)
            .find(|p| p.token_type == UserTokenType::Anonymous)
            .map(|p| p.policy_id.clone())
            .unwrap_or_default();
        let act = self.call(Request::ActivateSession(Box::new(ActivateSessionRequest {
            user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                policy_id,
            }),
            ..Default::default()
        })));
        assert!(act.response_header().service_result.is_good(), "{act:?}");
    }

    /// Moves bytes both ways until neither side has anything to say.
    pub fn pump(&mut self) {
        for _ in 0..100 {
            if self.c2s.is_empty() && self.s2c.is_empty() {
                return;
            }
            let data = std::mem::take(&mut self.c2s);
            assert_eq!(
                self.server
                    .on_recv(&mut self.state, self.now, &data, &mut self.s2c),
                ConnStatus::Open
            );
            let data = std::mem::take(&mut self.s2c);
            self.client
                .on_recv(self.now, &data, &mut self.c2s)
                .expect("client");
        }
    }

    /// Sends `r` and returns its response (which must be the next one).
    pub fn call(&mut self, r: Request) -> Response {
        let id = self
            .client
            .send_request(r, self.now, &mut self.c2s)
            .expect("send");
        self.pump();
        let (rid, resp) = self.client.poll_response().expect("response");
        assert_eq!(rid, id);
        assert_eq!(resp.response_header().request_handle, id);
        resp
    }
}
