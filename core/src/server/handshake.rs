//! Handshake jobs: the expensive part of OpenSecureChannel, CreateSession and ActivateSession
//! (RSA private-key operations, certificate validation that may read the PKI directory,
//! argon2id password checks), described as a [`HandshakeJob`] so the runtime can run it off the
//! shard thread. Core stays sans-IO: it hands a job out and later takes its [`JobDone`] back as a
//! state of the connection ([`crate::server::connection::ServerConnection::take_job`],
//! [`crate::server::connection::ServerConnection::on_job_done`]); it never waits and never
//! starts a thread.
//!
//! One job is not a handshake's: the decoding of a service request whose body is over 64 KiB
//! ([`JobKind::Decode`]), expensive work of one connection for the same reason (0.3–0.7 ms for
//! an AddNodes of 1,000 Variables, in one piece that the shard's other connections would wait
//! behind). A refused one answers that request alone with a ServiceFault
//! BadResourceUnavailable.
//!
//! While a connection's job is out, its input is held (the runtime stops reading it) and its
//! deferred responses wait; every other connection of the shard is served as usual.
//!
//! A job is a closure over owned data (certificates, nonces, `Arc`s of the policy and the user
//! authenticator) that touches no shard state. What the shard needs afterwards travels with the
//! job ([`Carry`]) and comes back with the result, also when the runtime refuses the job because
//! its queue is full ([`HandshakeJob::refuse`]): the connection then answers ERR
//! BadTcpNotEnoughResources (OpenSecureChannel) or a ServiceFault BadTooManyOperations
//! (CreateSession, ActivateSession).
//!
//! Without a pool ([`crate::server::context::ConnectionHost::offload_handshakes`] false, the
//! default) every job runs inline at once, exactly where the work used to be done.

use std::sync::Arc;

use crate::generated::types::{
    ActivateSessionRequest, AdditionalParametersType, CreateSessionRequest, EphemeralKeyType,
    KeyValuePair, MessageSecurityMode, SignatureData,
};
use crate::secure_channel::{ChunkCrypto, SecurityPolicy, SequenceCounter, SessionEphemeralKey};
use crate::server::service_state::{EphemeralPrivateKey, UserIdentity};
use crate::session::SessionKey;
use crate::transport::ChunkType;
use crate::types::{ByteString, ExtensionObject, QualifiedName, StatusCode, Variant};

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobKind {
    /// An OpenSecureChannel request chunk: client certificate validation (PKI), RSA
    /// decryption and signature verification. For a connection's first OpenSecureChannel
    /// (Issue, one chunk) also the response's RSA signature and encryption: one job instead
    /// of two.
    OpenRequest,
    /// The response to an OpenSecureChannel the shard assembled itself (a renewal, or a
    /// request in several chunks): RSA signature (private key) and encryption.
    OpenResponse,
    /// CreateSession: client certificate validation (PKI) and the server signature (and an
    /// ephemeral key for an EccEncryptedSecret when the client asks for one). No job when the
    /// signature is as cheap as the hand-off and the certificate validated already (P-256).
    CreateSession,
    /// ActivateSession: user token decryption (RSA private key, or ECDH for an
    /// EccEncryptedSecret), argon2id or the X.509 user certificate (PKI), with the client
    /// signature, and the next ephemeral key when the client asks for them. An activation
    /// that needs none of these (anonymous) checks the client signature on the shard and
    /// makes no job.
    ActivateSession,
    /// A service request larger than `DECODE_OFF_LOOP_BYTES` (64 KiB): its decoding (a
    /// NodeManagement request of 1,000 nodes, a CreateMonitoredItems of thousands of items),
    /// not a handshake, but expensive work of one connection that would otherwise stall the
    /// loop's other connections in one piece.
    Decode,
}

impl JobKind {
    /// The status a refused job is answered with.
    pub fn refusal(self) -> StatusCode {
        match self {
            JobKind::OpenRequest | JobKind::OpenResponse => StatusCode::BadTcpNotEnoughResources,
            JobKind::CreateSession | JobKind::ActivateSession => StatusCode::BadTooManyOperations,
            JobKind::Decode => StatusCode::BadResourceUnavailable,
        }
    }

    /// A short name for logs and statistics.
    pub fn name(self) -> &'static str {
        match self {
            JobKind::OpenRequest => "open-request",
            JobKind::OpenResponse => "open-response",
            JobKind::CreateSession => "create-session",
            JobKind::ActivateSession => "activate-session",
            JobKind::Decode => "decode",
        }
    }
}

/// A decrypted and verified OpenSecureChannel chunk.
pub(crate) struct OpenedRequest {
    /// The asymmetric protection (kept for the response).
    pub crypto: Box<dyn ChunkCrypto>,
    pub sequence_number: u32,
    pub request_id: u32,
    pub body: Vec<u8>,
}

/// A connection's first OpenSecureChannel (Issue, in one chunk) done in one job: the request
/// decrypted, verified and decoded, the channel's keys derived, and the response signed and
/// encrypted. The shard then only checks the sequence number and the security mode and
/// installs the channel.
pub(crate) struct Issued {
    pub sequence_number: u32,
    pub mode: MessageSecurityMode,
    pub lifetime_ms: u32,
    /// The channel's first token's symmetric protection.
    pub crypto: Box<dyn ChunkCrypto>,
    /// The response chunks, ready to send.
    pub response: Vec<u8>,
    /// The send sequence counter advanced past them.
    pub send_seq: SequenceCounter,
}

/// The key name of the SecurityPolicyUri of an ephemeral key (request and response header).
pub const ECDH_POLICY_URI_KEY: &str = "ECDHPolicyUri";
/// The key name of the ephemeral key (EphemeralKeyType or StatusCode) in a response header.
pub const ECDH_KEY_KEY: &str = "ECDHKey";

/// An ephemeral key made for a session response, or why not.
pub struct EcdhKey {
    pub(crate) uri: String,
    pub(crate) key: Result<SessionEphemeralKey, StatusCode>,
}

impl EcdhKey {
    pub(crate) fn new(uri: String, key: Result<SessionEphemeralKey, StatusCode>) -> EcdhKey {
        EcdhKey { uri, key }
    }

    /// The response header's AdditionalHeader (`ECDHPolicyUri`, `ECDHKey`) and the private
    /// half for the session (none when refused).
    pub(crate) fn into_header(self) -> (ExtensionObject, Option<EphemeralPrivateKey>) {
        let (value, private) = match self.key {
            Ok(k) => (
                Variant::ExtensionObject(Box::new(ExtensionObject::from_struct(
                    &EphemeralKeyType {
                        public_key: ByteString::from(k.public_key),
                        signature: ByteString::from(k.signature),
                    },
                ))),
                Some(EphemeralPrivateKey(k.private)),
            ),
            Err(s) => (Variant::StatusCode(s), None),
        };
        let params = AdditionalParametersType {
            parameters: vec![
                KeyValuePair {
                    key: QualifiedName::new(0, ECDH_POLICY_URI_KEY),
                    value: Variant::String(self.uri.as_str().into()),
                },
                KeyValuePair {
                    key: QualifiedName::new(0, ECDH_KEY_KEY),
                    value,
                },
            ],
        };
        (ExtensionObject::from_struct(&params), private)
    }
}

/// What a job computed.
pub(crate) enum Output {
    OpenRequest(Result<OpenedRequest, StatusCode>),
    /// The error's reason is the ERR's text.
    OpenIssued(Result<Issued, (StatusCode, &'static str)>),
    /// The response chunks, and the send sequence counter advanced past them.
    OpenResponse(Result<Vec<u8>, StatusCode>, SequenceCounter),
    /// CreateSession's signature, and the ephemeral key the client asked for.
    Signature(Result<SignatureData, StatusCode>, Option<EcdhKey>),
    /// ActivateSession's user, and the next ephemeral key.
    Identity(Result<UserIdentity, StatusCode>, Option<EcdhKey>),
    /// A decoded service request, or (its request handle, why not).
    Request(Result<crate::generated::messages::Request, (u32, StatusCode)>),
}

/// What the shard needs again when the job is done.
pub(crate) enum Carry {
    None,
    Open {
        chunk_type: ChunkType,
        policy: Arc<dyn SecurityPolicy>,
        client_certificate: Option<Vec<u8>>,
    },
    CreateSession {
        key: SessionKey,
        req: Box<CreateSessionRequest>,
    },
    ActivateSession {
        key: SessionKey,
        req: Box<ActivateSessionRequest>,
        server_nonce: ByteString,
    },
}

type Work = Box<dyn FnOnce() -> Output + Send>;

/// Expensive handshake work of one connection. Run it anywhere ([`HandshakeJob::run`]) or
/// refuse it ([`HandshakeJob::refuse`]); hand the [`JobDone`] back to the connection.
pub struct HandshakeJob {
    kind: JobKind,
    work: Work,
    carry: Carry,
}

impl std::fmt::Debug for HandshakeJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandshakeJob")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl HandshakeJob {
    pub(crate) fn new(
        kind: JobKind,
        carry: Carry,
        work: impl FnOnce() -> Output + Send + 'static,
    ) -> HandshakeJob {
        HandshakeJob {
            kind,
            work: Box::new(work),
            carry,
        }
    }

    pub fn kind(&self) -> JobKind {
        self.kind
    }

    /// Does the work (CPU, and PKI file reads) on the calling thread.
    pub fn run(self) -> JobDone {
        JobDone {
            kind: self.kind,
            output: Some((self.work)()),
            carry: self.carry,
        }
    }

    /// Gives the job back undone (the runtime's queue is full): the connection answers with
    /// [`JobKind::refusal`].
    pub fn refuse(self) -> JobDone {
        JobDone {
            kind: self.kind,
            output: None,
            carry: self.carry,
        }
    }
}

/// A job's result, for the connection that handed the job out.
pub struct JobDone {
    pub(crate) kind: JobKind,
    /// `None`: refused.
    pub(crate) output: Option<Output>,
    pub(crate) carry: Carry,
}

impl std::fmt::Debug for JobDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobDone")
            .field("kind", &self.kind)
            .field("refused", &self.output.is_none())
            .finish()
    }
}

impl JobDone {
    pub fn kind(&self) -> JobKind {
        self.kind
    }

    /// The job was refused, not run.
    pub fn is_refused(&self) -> bool {
        self.output.is_none()
    }
}
