//! UA SecureConversation (Part 6 §6.7): chunk headers, sequence numbers, chunk
//! splitting and assembly, security tokens, and the [`SecurityPolicy`] trait with the
//! None policy.

// Input reaches this module from the network: no panic on any path (issue 10). Spots
// proven safe carry an `#[allow]` with the reason.

pub mod chunk;
pub mod policy;

pub use chunk::{
    max_body_per_chunk, open_chunk, parse_chunk_head, parse_symmetric_head, write_abort_chunk,
    write_chunks, write_message_with, Assembly, ChunkHead, ChunkLimits, MessageAssembler,
    OpenedChunk, SecurityHeader, SequenceChecker, SequenceCounter, SEQUENCE_HEADER_LEN,
};
pub use policy::{
    AsymmetricSecurityHeader, ChunkCrypto, CryptoLayout, EndpointSecurity, NonePolicy,
    PendingToken, PlainCrypto, Role, SecurityPolicy, SecurityProvider, SessionEphemeralKey,
    UserAuthenticator, UserTokenSettings, SECURITY_POLICY_NONE_URI,
};
