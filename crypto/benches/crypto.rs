//! Symmetric chunk security per message size and policy, RSA operations per second, and one
//! handshake's asymmetric work per policy (RSA-2048 beside ECC_nistP256 / ECC_nistP384:
//! `-- handshake`).
//!
//! `cargo bench -p uaring-crypto` (with `-- --quick` for a short run; `-- read-floor` for the
//! symmetric work of one SignAndEncrypt Read).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use uaring_crypto::{
    asym_decrypt, asym_encrypt, asym_sign, asym_verify, derive_channel_keys, generate_self_signed,
    padding_len, write_padding, CertificateRequest, PolicyId, SecurityMode,
};

const SIZES: [usize; 4] = [64, 1024, 8 * 1024, 64 * 1024];
const POLICIES: [PolicyId; 3] = [
    PolicyId::Basic256Sha256,
    PolicyId::Aes128Sha256RsaOaep,
    PolicyId::Aes256Sha256RsaPss,
];
const HEADER: usize = 24; // message header + symmetric security header

fn chunk_for(policy: PolicyId, body: usize) -> (Vec<u8>, usize) {
    let sig = policy.symmetric_signature_len();
    let pad = padding_len(body, sig, 16, false);
    let mut chunk = vec![0xA5u8; HEADER + body + pad + sig];
    write_padding(&mut chunk[HEADER + body..HEADER + body + pad], false);
    (chunk, HEADER)
}

fn symmetric(c: &mut Criterion) {
    for policy in POLICIES {
        let keys = derive_channel_keys(policy, &[1u8; 32], &[2u8; 32]).unwrap();
        let mut g = c.benchmark_group(format!("sym/{}", policy.name()));
        g.measurement_time(Duration::from_secs(2))
            .warm_up_time(Duration::from_millis(500));
        for size in SIZES {
            g.throughput(Throughput::Bytes(size as u64));
            let (template, enc_from) = chunk_for(policy, size);
            let mut buf = template.clone();
            g.bench_with_input(BenchmarkId::new("sign+encrypt", size), &size, |b, _| {
                b.iter(|| {
                    keys.client
                        .seal_chunk(&mut buf, enc_from, SecurityMode::SignAndEncrypt)
                        .unwrap();
                })
            });
            let mut sealed = template.clone();
            keys.client
                .seal_chunk(&mut sealed, enc_from, SecurityMode::SignAndEncrypt)
                .unwrap();
            let mut work = sealed.clone();
            g.bench_with_input(BenchmarkId::new("decrypt+verify", size), &size, |b, _| {
                b.iter(|| {
                    work.copy_from_slice(&sealed);
                    keys.client
                        .open_chunk(&mut work, enc_from, SecurityMode::SignAndEncrypt)
                        .unwrap();
                })
            });
            let mut signed = template.clone();
            g.bench_with_input(BenchmarkId::new("sign-only", size), &size, |b, _| {
                b.iter(|| {
                    keys.client
                        .seal_chunk(&mut signed, enc_from, SecurityMode::Sign)
                        .unwrap()
                })
            });
        }
        g.finish();
    }
}

fn rsa(c: &mut Criterion) {
    let (cert, key) = generate_self_signed(&CertificateRequest::new(
        "urn:bench",
        "bench",
        1_700_000_000,
    ))
    .unwrap();
    let mut g = c.benchmark_group("rsa2048");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(1));
    for policy in [PolicyId::Basic256Sha256, PolicyId::Aes256Sha256RsaPss] {
        let plain = [7u8; 32];
        let mut ct = Vec::new();
        asym_encrypt(policy, &cert, &plain, &mut ct).unwrap();
        let mut out = Vec::with_capacity(256);
        g.bench_function(format!("oaep-decrypt/{}", policy.name()), |b| {
            b.iter(|| {
                out.clear();
                asym_decrypt(policy, &key, &ct, &mut out).unwrap()
            })
        });
        g.bench_function(format!("oaep-encrypt/{}", policy.name()), |b| {
            b.iter(|| {
                out.clear();
                asym_encrypt(policy, &cert, &plain, &mut out).unwrap()
            })
        });
        let data = vec![3u8; 1024];
        g.bench_function(format!("sign/{}", policy.name()), |b| {
            b.iter(|| asym_sign(policy, &key, &data).unwrap())
        });
        let sig = asym_sign(policy, &key, &data).unwrap();
        g.bench_function(format!("verify/{}", policy.name()), |b| {
            b.iter(|| asym_verify(policy, &cert, &data, &sig).unwrap())
        });
    }
    g.finish();
}

/// The real path: core's chunk writer and opener through this crate's `RsaPolicy`
/// (`ChunkCrypto`), one 1 KiB MSG chunk per SignAndEncrypt / Sign, and a whole
/// OpenSecureChannel chunk (client seals with RSA, server opens: decrypt + verify).
fn uasc(c: &mut Criterion) {
    use uaring_core::generated::types::MessageSecurityMode;
    use uaring_core::secure_channel::{
        open_chunk, write_chunks, ChunkLimits, Role, SecurityHeader, SecurityPolicy,
        SequenceCounter,
    };
    use uaring_core::transport::MessageType;
    use uaring_crypto::{OwnIdentity, RsaPolicy};
    let id = |n: &str| {
        let (cert, key) = generate_self_signed(&CertificateRequest::new(
            &format!("urn:{n}"),
            n,
            1_700_000_000,
        ))
        .unwrap();
        OwnIdentity::new(cert, key).unwrap()
    };
    let (server, client) = (id("server"), id("client"));
    let policy = RsaPolicy::client(PolicyId::Basic256Sha256, client.clone()).unwrap();
    let limits = ChunkLimits {
        max_chunk_size: 65536,
        max_message_size: 0,
        max_chunk_count: 0,
    };
    let mut g = c.benchmark_group("uasc/Basic256Sha256");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let body = vec![0x5Au8; 1024];
    for mode in [
        MessageSecurityMode::SignAndEncrypt,
        MessageSecurityMode::Sign,
    ] {
        let crypto = policy
            .symmetric(Role::Client, mode, &[1u8; 32], &[2u8; 32])
            .unwrap();
        let header = SecurityHeader::Symmetric { token_id: 1 };
        let mut seq = SequenceCounter::new(true);
        let mut out = Vec::with_capacity(4096);
        let name = format!("{mode:?}");
        g.throughput(Throughput::Bytes(1024));
        g.bench_function(format!("write-chunk-1KiB/{name}"), |b| {
            b.iter(|| {
                out.clear();
                write_chunks(
                    MessageType::Message,
                    7,
                    &header,
                    1,
                    &body,
                    &*crypto,
                    &mut seq,
                    &limits,
                    &mut out,
                )
                .unwrap()
            })
        });
        // The peer's view: keys of the other role open what the client sealed.
        let peer = RsaPolicy::client(PolicyId::Basic256Sha256, client.clone()).unwrap();
        let opener = peer
            .symmetric(Role::Server, mode, &[2u8; 32], &[1u8; 32])
            .unwrap();
        out.clear();
        write_chunks(
            MessageType::Message,
            7,
            &header,
            1,
            &body,
            &*crypto,
            &mut seq,
            &limits,
            &mut out,
        )
        .unwrap();
        let sealed = out.clone();
        let mut scratch = Vec::with_capacity(4096);
        g.bench_function(format!("open-chunk-1KiB/{name}"), |b| {
            b.iter(|| {
                open_chunk(&sealed, 12 + header.encoded_len(), &*opener, &mut scratch)
                    .unwrap()
                    .body
                    .len()
            })
        });
    }
    // OPN: client side seals (RSA encrypt to the server + RSA sign), server side opens (RSA
    // decrypt + verify). The server side is what a handshake flood costs.
    let asym = policy
        .asymmetric(Role::Client, Some(server.cert.der()), None, bench_now())
        .unwrap();
    let header = SecurityHeader::Asymmetric(policy.asymmetric_header(Some(server.cert.der())));
    let opn_body = vec![0x11u8; 120];
    let mut seq = SequenceCounter::new(true);
    let mut out = Vec::with_capacity(8192);
    g.throughput(Throughput::Elements(1));
    g.bench_function("opn-client-seal", |b| {
        b.iter(|| {
            out.clear();
            write_chunks(
                MessageType::OpenSecureChannel,
                0,
                &header,
                1,
                &opn_body,
                &*asym,
                &mut seq,
                &limits,
                &mut out,
            )
            .unwrap()
        })
    });
    out.clear();
    write_chunks(
        MessageType::OpenSecureChannel,
        0,
        &header,
        1,
        &opn_body,
        &*asym,
        &mut seq,
        &limits,
        &mut out,
    )
    .unwrap();
    let sealed = out.clone();
    let server_side = RsaPolicy::client(PolicyId::Basic256Sha256, server.clone()).unwrap();
    let server_asym = server_side
        .asymmetric(Role::Client, Some(client.cert.der()), None, bench_now())
        .unwrap();
    let seq_offset = 12 + header.encoded_len();
    let mut scratch = Vec::with_capacity(8192);
    g.bench_function("opn-server-open", |b| {
        b.iter(|| {
            open_chunk(&sealed, seq_offset, &*server_asym, &mut scratch)
                .unwrap()
                .body
                .len()
        })
    });
    g.finish();
}

/// The symmetric work one single-value Read costs a server under SignAndEncrypt, at the real
/// sizes (issue 12's "cryptographic floor"): verify + decrypt the request chunk, sign + encrypt
/// the response chunk. Bodies after the sequence header: 104 bytes for the ReadRequest of one
/// Int32 (the request is 128 bytes on the wire in None), 42 for its ReadResponse (66 bytes in
/// None); the harness's `bytes_out_per_op`/`bytes_in_per_op` of a None run give these sizes.
/// `primitives` is this crate's in-place chunk functions alone; `core-path` is the same work
/// through core's chunk writer and opener with this crate's `RsaPolicy`, as the server runs it.
fn read_floor(c: &mut Criterion) {
    use uaring_core::generated::types::MessageSecurityMode;
    use uaring_core::secure_channel::{
        open_chunk, write_chunks, ChunkLimits, Role, SecurityHeader, SecurityPolicy,
        SequenceCounter,
    };
    use uaring_core::transport::MessageType;
    use uaring_crypto::{OwnIdentity, RsaPolicy};
    const REQUEST_BODY: usize = 104;
    const RESPONSE_BODY: usize = 42;
    let mut g = c.benchmark_group("read-floor");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(1));
    for policy in POLICIES {
        let keys = derive_channel_keys(policy, &[1u8; 32], &[2u8; 32]).unwrap();
        // The client seals the request with its keys; the server opens it with the same set.
        let (req_template, enc_from) = chunk_for(policy, REQUEST_BODY);
        let mut sealed_req = req_template.clone();
        keys.client
            .seal_chunk(&mut sealed_req, enc_from, SecurityMode::SignAndEncrypt)
            .unwrap();
        let mut work = sealed_req.clone();
        let (resp_template, _) = chunk_for(policy, RESPONSE_BODY);
        let mut resp = resp_template.clone();
        g.bench_function(format!("primitives/{}", policy.name()), |b| {
            b.iter(|| {
                work.copy_from_slice(&sealed_req);
                keys.client
                    .open_chunk(&mut work, enc_from, SecurityMode::SignAndEncrypt)
                    .unwrap();
                resp.copy_from_slice(&resp_template);
                keys.server
                    .seal_chunk(&mut resp, enc_from, SecurityMode::SignAndEncrypt)
                    .unwrap();
            })
        });
    }
    let (cert, key) = generate_self_signed(&CertificateRequest::new(
        "urn:floor",
        "floor",
        1_700_000_000,
    ))
    .unwrap();
    let id = OwnIdentity::new(cert, key).unwrap();
    let limits = ChunkLimits {
        max_chunk_size: 65536,
        max_message_size: 0,
        max_chunk_count: 0,
    };
    let header = SecurityHeader::Symmetric { token_id: 1 };
    let mode = MessageSecurityMode::SignAndEncrypt;
    let policy = RsaPolicy::client(PolicyId::Basic256Sha256, id.clone()).unwrap();
    let client = policy
        .symmetric(Role::Client, mode, &[1u8; 32], &[2u8; 32])
        .unwrap();
    let server = policy
        .symmetric(Role::Server, mode, &[2u8; 32], &[1u8; 32])
        .unwrap();
    let mut seq = SequenceCounter::new(true);
    let mut request = Vec::with_capacity(1024);
    write_chunks(
        MessageType::Message,
        7,
        &header,
        1,
        &[0x5Au8; REQUEST_BODY],
        &*client,
        &mut seq,
        &limits,
        &mut request,
    )
    .unwrap();
    let response_body = [0xA5u8; RESPONSE_BODY];
    let mut scratch = Vec::with_capacity(1024);
    let mut out = Vec::with_capacity(1024);
    let seq_offset = 12 + header.encoded_len();
    g.bench_function(
        format!("core-path/{}", PolicyId::Basic256Sha256.name()),
        |b| {
            b.iter(|| {
                let n = open_chunk(&request, seq_offset, &*server, &mut scratch)
                    .unwrap()
                    .body
                    .len();
                out.clear();
                write_chunks(
                    MessageType::Message,
                    7,
                    &header,
                    1,
                    &response_body,
                    &*server,
                    &mut seq,
                    &limits,
                    &mut out,
                )
                .unwrap();
                n
            })
        },
    );
    g.finish();
}

/// One handshake's asymmetric work on the server (OpenSecureChannel + CreateSession +
/// ActivateSession), RSA-2048 Basic256Sha256 beside ECC_nistP256 and ECC_nistP384.
///
/// `private`: the private-key operations. RSA: two OAEP decryptions (the OPN request's
/// encrypted part, sequence header + body + a 256-byte signature, is two 214-byte blocks) and
/// two signatures (the OPN response, CreateSession's serverSignature). ECC: one ephemeral key
/// pair, one ECDH agreement with the client's nonce and the HKDF of both key sets, and the
/// same two ECDSA signatures. `all`: with the public-key checks too (the OPN request's and
/// ActivateSession's client signatures: two verifications each way).
fn handshake(c: &mut Criterion) {
    use uaring_crypto::ecc::{derive_ecc_keys, ecdsa_verify, EphemeralKey};
    use uaring_crypto::{generate_self_signed_ecc, EccCurve};
    let req = CertificateRequest::new("urn:bench", "bench", 1_700_000_000);
    let mut g = c.benchmark_group("handshake");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(1));
    let data = vec![3u8; 1024];

    let policy = PolicyId::Basic256Sha256;
    let (rsa_cert, rsa_key) = generate_self_signed(&req).unwrap();
    let block = [7u8; 214];
    let mut ct = Vec::new();
    asym_encrypt(policy, &rsa_cert, &block, &mut ct).unwrap();
    let rsa_sig = asym_sign(policy, &rsa_key, &data).unwrap();
    let mut out = Vec::with_capacity(256);
    let rsa_private = |out: &mut Vec<u8>| {
        for _ in 0..2 {
            out.clear();
            asym_decrypt(policy, &rsa_key, &ct, out).unwrap();
        }
        for _ in 0..2 {
            std::hint::black_box(asym_sign(policy, &rsa_key, &data).unwrap());
        }
    };
    g.bench_function("private/rsa2048-Basic256Sha256", |b| {
        b.iter(|| rsa_private(&mut out))
    });
    g.bench_function("all/rsa2048-Basic256Sha256", |b| {
        b.iter(|| {
            rsa_private(&mut out);
            for _ in 0..2 {
                asym_verify(policy, &rsa_cert, &data, &rsa_sig).unwrap();
            }
        })
    });

    for curve in EccCurve::ALL {
        let (cert, key) = generate_self_signed_ecc(&req, curve).unwrap();
        let client = EphemeralKey::generate(curve).unwrap();
        let sig = key.sign(&data).unwrap();
        let private = || {
            let eph = EphemeralKey::generate(curve).unwrap();
            let shared = eph.shared_secret(client.nonce()).unwrap();
            std::hint::black_box(
                derive_ecc_keys(curve, true, &shared, client.nonce(), eph.nonce()).unwrap(),
            );
            for _ in 0..2 {
                std::hint::black_box(key.sign(&data).unwrap());
            }
        };
        g.bench_function(format!("private/{}", curve.policy_name()), |b| {
            b.iter(private)
        });
        g.bench_function(format!("all/{}", curve.policy_name()), |b| {
            b.iter(|| {
                private();
                for _ in 0..2 {
                    ecdsa_verify(curve, &cert, &data, &sig).unwrap();
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, symmetric, rsa, uasc, read_floor, handshake);
criterion_main!(benches);

/// The time given to the policies (a client role validates nothing against it).
fn bench_now() -> uaring_core::Now {
    uaring_core::Now::new(1_000_000_000, uaring_core::DateTime::from_unix_nanos(0))
}
