//! Symmetric chunk security per message size and policy, and RSA operations per second.
//!
//! `cargo bench -p uaring-crypto` (with `-- --quick` for a short run).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use uaring_crypto::{
    asym_decrypt, asym_encrypt, asym_sign, asym_verify, derive_channel_keys, generate_self_signed,
    padding_len, write_padding, CertificateRequest, PolicyId, SecurityMode,
};

const SIZES: [usize; 4] = [64, 1024, 8 * 1024, 64 * 1024];
const POLICIES: [PolicyId; 3] =
    [PolicyId::Basic256Sha256, PolicyId::Aes128Sha256RsaOaep, PolicyId::Aes256Sha256RsaPss];
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
        g.measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
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
            keys.client.seal_chunk(&mut sealed, enc_from, SecurityMode::SignAndEncrypt).unwrap();
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
                b.iter(|| keys.client.seal_chunk(&mut signed, enc_from, SecurityMode::Sign).unwrap())
            });
        }
        g.finish();
    }
}

fn rsa(c: &mut Criterion) {
    let (cert, key) =
        generate_self_signed(&CertificateRequest::new("urn:bench", "bench", 1_700_000_000)).unwrap();
    let mut g = c.benchmark_group("rsa2048");
    g.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
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

criterion_group!(benches, symmetric, rsa);
criterion_main!(benches);
