//! `write_message_with` (the response body encoded straight into the output buffer and
//! sealed there) writes exactly the bytes `write_chunks` writes from a separate body, for
//! every security mode, in one chunk and in several, and fails the same way.

use uaring_core::generated::types::MessageSecurityMode;
use uaring_core::secure_channel::{
    write_chunks, write_message_with, ChunkCrypto, ChunkLimits, PlainCrypto, Role, SecurityHeader,
    SecurityPolicy, SequenceCounter,
};
use uaring_core::transport::MessageType;
use uaring_core::StatusCode;
use uaring_crypto::{generate_self_signed, CertificateRequest, OwnIdentity, PolicyId, RsaPolicy};

fn both(
    body: &[u8],
    mode: MessageSecurityMode,
    limits: &ChunkLimits,
) -> (Result<Vec<u8>, StatusCode>, Result<Vec<u8>, StatusCode>) {
    let (cert, key) =
        generate_self_signed(&CertificateRequest::new("urn:w", "w", 1_700_000_000)).unwrap();
    let policy = RsaPolicy::client(
        PolicyId::Basic256Sha256,
        OwnIdentity::new(cert, key).unwrap(),
    )
    .unwrap();
    let crypto: Box<dyn ChunkCrypto> = match mode {
        MessageSecurityMode::None => Box::new(PlainCrypto),
        _ => policy
            .symmetric(Role::Server, mode, &[1u8; 32], &[2u8; 32])
            .unwrap(),
    };
    let header = SecurityHeader::Symmetric { token_id: 3 };
    let run = |direct: bool| {
        let mut seq = SequenceCounter::new(false);
        let mut out = vec![0xEE; 5]; // bytes already queued stay untouched
        let r = if direct {
            let mut scratch = Vec::new();
            let encode = |o: &mut Vec<u8>| o.extend_from_slice(body);
            write_message_with(
                MessageType::Message,
                9,
                &header,
                11,
                encode,
                &*crypto,
                &mut seq,
                limits,
                &mut out,
                &mut scratch,
            )
        } else {
            write_chunks(
                MessageType::Message,
                9,
                &header,
                11,
                body,
                &*crypto,
                &mut seq,
                limits,
                &mut out,
            )
        };
        // The next sequence number shows how many were taken.
        match r {
            Ok(_) => {
                out.extend_from_slice(&seq.take().to_le_bytes());
                Ok(out)
            }
            Err(e) => {
                assert_eq!(out, vec![0xEE; 5], "output changed on error");
                Err(e)
            }
        }
    };
    (run(true), run(false))
}

#[test]
fn same_bytes_as_write_chunks() {
    let modes = [
        MessageSecurityMode::None,
        MessageSecurityMode::Sign,
        MessageSecurityMode::SignAndEncrypt,
    ];
    let limits = ChunkLimits {
        max_chunk_size: 8192,
        max_message_size: 0,
        max_chunk_count: 0,
    };
    for mode in modes {
        for len in [0usize, 1, 42, 104, 1000, 8000, 8192, 20_000] {
            let body: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let (direct, chunked) = both(&body, mode, &limits);
            assert_eq!(
                direct.unwrap(),
                chunked.unwrap(),
                "{mode:?}, {len}-byte body"
            );
        }
    }
}

#[test]
fn same_errors_as_write_chunks() {
    let body = vec![1u8; 20_000];
    for limits in [
        ChunkLimits {
            max_chunk_size: 8192,
            max_message_size: 10_000,
            max_chunk_count: 0,
        },
        ChunkLimits {
            max_chunk_size: 8192,
            max_message_size: 0,
            max_chunk_count: 2,
        },
    ] {
        let (direct, chunked) = both(&body, MessageSecurityMode::SignAndEncrypt, &limits);
        assert_eq!(direct.unwrap_err(), StatusCode::BadTcpMessageTooLarge);
        assert_eq!(chunked.unwrap_err(), StatusCode::BadTcpMessageTooLarge);
    }
}
