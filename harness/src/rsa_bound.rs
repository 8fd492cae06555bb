//! The RSA bound of session establishment, measured in the same run as the establishments.
//!
//! With an RSA security policy, every establishment costs the server RSA private-key
//! operations it cannot avoid: one OAEP decryption per RSA block of the client's
//! OpenSecureChannel request, the signature of its OpenSecureChannel response and the
//! serverSignature of CreateSession (anonymous logins add none). The `connect` scenario counts
//! the blocks in the bytes it sends (so the count holds for any server), measures aws-lc-rs's
//! decryption and signature on the server's CPUs — on all of them at once, as a saturated
//! server would use them — while the server idles before the warm-up and again after the
//! window, and reports (with the mean of the two; `rsa_bound_drift` is how far they differ)
//!
//! * `rsa_private_ops_per_op`: decryptions + signatures per establishment;
//! * `rsa_bound_us_per_op`: their cost at the measured rate (the bound per establishment);
//! * `rsa_bound_ops_per_core_s`: 1 / that, the establishments one server core could make;
//! * `rsa_bound_share`: bound ÷ the server's CPU per establishment (1.0 = nothing but the RSA
//!   private operations).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::report::round;
use uaring_crypto::{
    asym_decrypt, asym_encrypt, asym_sign, generate_self_signed, Certificate, CertificateRequest,
    PolicyId,
};

/// The length of the encrypted part (everything after the asymmetric security header) of an
/// OpenSecureChannel chunk at the start of `bytes`; None if `bytes` does not start with a whole one.
pub fn opn_encrypted_len(bytes: &[u8]) -> Option<usize> {
    if bytes.get(..3)? != b"OPN" {
        return None;
    }
    let size = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
    let chunk = bytes.get(..size)?;
    let mut pos = 12; // message header + SecureChannelId
    for _ in 0..3 {
        // SecurityPolicyUri, SenderCertificate, ReceiverCertificateThumbprint
        let len = i32::from_le_bytes(chunk.get(pos..pos + 4)?.try_into().ok()?);
        pos += 4;
        if len > 0 {
            pos = pos.checked_add(len as usize)?;
        }
    }
    chunk.len().checked_sub(pos)
}

/// aws-lc-rs's private-key operations on the given CPUs at once.
#[derive(Clone, Debug)]
pub struct Calibration {
    pub cpus: Vec<usize>,
    pub key_bits: usize,
    /// CPU time of one OAEP decryption of one block, mean over the CPUs.
    pub decrypt_us: f64,
    /// CPU time of one signature of 1 KiB, mean over the CPUs.
    pub sign_us: f64,
}

impl Calibration {
    /// The mean of two calibrations on the same CPUs and key size.
    pub fn mean_with(&self, other: &Calibration) -> Calibration {
        Calibration {
            cpus: self.cpus.clone(),
            key_bits: self.key_bits,
            decrypt_us: (self.decrypt_us + other.decrypt_us) / 2.0,
            sign_us: (self.sign_us + other.sign_us) / 2.0,
        }
    }

    /// How much slower (positive) or faster `later` ran, relative to the mean of both.
    pub fn drift_to(&self, later: &Calibration) -> f64 {
        let (a, b) = (
            self.decrypt_us + self.sign_us,
            later.decrypt_us + later.sign_us,
        );
        if a + b <= 0.0 {
            return 0.0;
        }
        ((b - a) / ((a + b) / 2.0) * 1000.0).round() / 1000.0
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs decryptions, then signatures, for `seconds` in all (half each) on one pinned thread per CPU,
/// all CPUs at once, with a fresh key of `key_bits` and `policy`'s padding and hash.
pub fn calibrate(
    policy: PolicyId,
    key_bits: usize,
    cpus: &[usize],
    seconds: f64,
) -> Result<Calibration, String> {
    let mut req = CertificateRequest::new("urn:uaring:bench:rsa-bound", "rsa-bound", 1_700_000_000);
    req.key_bits = key_bits;
    let (cert, key) =
        generate_self_signed(&req).map_err(|e| format!("calibration key: 0x{e:08X}"))?;
    let mut ct = Vec::new();
    asym_encrypt(policy, &cert, &[7u8; 32], &mut ct)
        .map_err(|e| format!("calibration encrypt: 0x{e:08X}"))?;
    if ct.len() != key_bits / 8 {
        return Err("calibration: one block expected".into());
    }
    let key = Arc::new(key);
    let ct = Arc::new(ct);
    let half = Duration::from_secs_f64((seconds / 2.0).max(0.05));
    let start = Arc::new(std::sync::Barrier::new(cpus.len()));
    let mut threads = Vec::new();
    for &cpu in cpus {
        let (key, ct, start) = (key.clone(), ct.clone(), start.clone());
        threads.push(std::thread::spawn(move || -> Result<(f64, f64), String> {
            uaring_affinity::pin_current_thread(&[cpu]).map_err(|e| e.to_string())?;
            start.wait();
            let mut out = Vec::with_capacity(256);
            let (t0, c0) = (Instant::now(), thread_cpu_ns());
            let mut n = 0u64;
            while t0.elapsed() < half || n == 0 {
                out.clear();
                asym_decrypt(policy, &key, &ct, &mut out)
                    .map_err(|e| format!("decrypt: 0x{e:08X}"))?;
                n += 1;
            }
            let decrypt = (thread_cpu_ns() - c0) as f64 / 1000.0 / n as f64;
            let data = [3u8; 1024];
            let (t0, c0) = (Instant::now(), thread_cpu_ns());
            let mut n = 0u64;
            while t0.elapsed() < half || n == 0 {
                asym_sign(policy, &key, &data).map_err(|e| format!("sign: 0x{e:08X}"))?;
                n += 1;
            }
            let sign = (thread_cpu_ns() - c0) as f64 / 1000.0 / n as f64;
            Ok((decrypt, sign))
        }));
    }
    let (mut d, mut s) = (0.0, 0.0);
    for t in threads {
        let (a, b) = t
            .join()
            .map_err(|_| "calibration thread panicked".to_string())??;
        d += a;
        s += b;
    }
    let k = cpus.len().max(1) as f64;
    Ok(Calibration {
        cpus: cpus.to_vec(),
        key_bits,
        decrypt_us: d / k,
        sign_us: s / k,
    })
}

/// The key size of a DER certificate (the server's, from its endpoint).
pub fn key_bits_of(cert_der: &[u8]) -> Result<usize, String> {
    let cert =
        Certificate::from_der(cert_der).map_err(|e| format!("server certificate: 0x{e:08X}"))?;
    match cert.key_bits() {
        0 => Err("the server certificate has no RSA key".into()),
        n => Ok(n),
    }
}

/// Adds the bound to a `connect` result: the calibration, the decryptions of the client's
/// OpenSecureChannel request (`opn_encrypted_bytes`, its [`opn_encrypted_len`] as sent in this
/// run; 0 if none was seen), the two signatures, and the share of the server's CPU per
/// establishment they account for.
pub fn add_to(o: &mut Map<String, Value>, cal: &Calibration, opn_encrypted_bytes: u64) {
    let key_bytes = (cal.key_bits / 8).max(1) as u64;
    if opn_encrypted_bytes == 0 || !opn_encrypted_bytes.is_multiple_of(key_bytes) {
        o.insert(
            "rsa_bound_error".into(),
            json!("no OpenSecureChannel request of whole RSA blocks was seen"),
        );
        return;
    }
    let decrypts = opn_encrypted_bytes / key_bytes;
    let signs = 2u64; // OpenSecureChannel response, CreateSession serverSignature
    let bound_us = decrypts as f64 * cal.decrypt_us + signs as f64 * cal.sign_us;
    o.insert(
        "rsa_calibration_cpus".into(),
        json!(cal
            .cpus
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")),
    );
    o.insert("rsa_key_bits".into(), json!(cal.key_bits));
    o.insert("rsa_decrypt_us".into(), json!(round(cal.decrypt_us, 1)));
    o.insert("rsa_sign_us".into(), json!(round(cal.sign_us, 1)));
    o.insert(
        "rsa_private_ops_per_op".into(),
        json!(format!("{decrypts} decrypt + {signs} sign")),
    );
    o.insert("rsa_bound_us_per_op".into(), json!(round(bound_us, 1)));
    o.insert(
        "rsa_bound_ops_per_core_s".into(),
        json!(round(1e6 / bound_us, 1)),
    );
    if let Some(cpu) = o
        .get("server_cpu_us_per_op")
        .and_then(Value::as_f64)
        .filter(|c| *c > 0.0)
    {
        o.insert("rsa_bound_share".into(), json!(round(bound_us / cpu, 3)));
    }
}

/// The ECC counterpart of the bound: the server's private-key work of one ECC establishment —
/// an ephemeral key, the ECDH with the client's ephemeral key, and two ECDSA signatures (the
/// OpenSecureChannel response and CreateSession's serverSignature) — timed on one pinned thread
/// per CPU of `cpus`, all at once, for `seconds`. Returns µs of one establishment's such work.
pub fn calibrate_ecc(
    curve: uaring_crypto::EccCurve,
    cpus: &[usize],
    seconds: f64,
) -> Result<f64, String> {
    use uaring_crypto::ecc::EphemeralKey;
    let peer = EphemeralKey::generate(curve).map_err(|e| format!("peer key: 0x{e:08X}"))?;
    let peer_nonce = Arc::new(peer.nonce().to_vec());
    let key = Arc::new(
        uaring_crypto::EccPrivateKey::generate(curve).map_err(|e| format!("key: 0x{e:08X}"))?,
    );
    let for_ = Duration::from_secs_f64(seconds.max(0.1));
    let start = Arc::new(std::sync::Barrier::new(cpus.len().max(1)));
    let mut threads = Vec::new();
    for &cpu in cpus {
        let (key, peer_nonce, start) = (key.clone(), peer_nonce.clone(), start.clone());
        threads.push(std::thread::spawn(move || -> Result<f64, String> {
            uaring_affinity::pin_current_thread(&[cpu]).map_err(|e| e.to_string())?;
            start.wait();
            let data = [7u8; 128];
            let (t0, c0) = (Instant::now(), thread_cpu_ns());
            let mut n = 0u64;
            while t0.elapsed() < for_ || n == 0 {
                let e = EphemeralKey::generate(curve).map_err(|e| format!("0x{e:08X}"))?;
                let s = e
                    .shared_secret(&peer_nonce)
                    .map_err(|e| format!("0x{e:08X}"))?;
                std::hint::black_box(&s);
                for _ in 0..2 {
                    std::hint::black_box(key.sign(&data).map_err(|e| format!("0x{e:08X}"))?);
                }
                n += 1;
            }
            Ok((thread_cpu_ns() - c0) as f64 / 1e3 / n as f64)
        }));
    }
    let mut each = Vec::new();
    for t in threads {
        each.push(t.join().map_err(|_| "ECC calibration thread panicked")??);
    }
    Ok(each.iter().sum::<f64>() / each.len().max(1) as f64)
}

/// Adds the ECC bound (µs of private-key work per establishment, [`calibrate_ecc`]) to a
/// `connect` result, with its share of the server's CPU per establishment.
pub fn add_ecc_to(o: &mut Map<String, Value>, bound_us: f64) {
    o.insert(
        "ecc_private_ops_per_op".into(),
        json!("1 ephemeral key + 1 ECDH + 2 sign"),
    );
    o.insert("ecc_bound_us_per_op".into(), json!(round(bound_us, 1)));
    o.insert(
        "ecc_bound_ops_per_core_s".into(),
        json!(round(1e6 / bound_us.max(1e-3), 1)),
    );
    if let Some(cpu) = o
        .get("server_cpu_us_per_op")
        .and_then(Value::as_f64)
        .filter(|c| *c > 0.0)
    {
        o.insert("ecc_bound_share".into(), json!(round(bound_us / cpu, 3)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(uri: &[u8], cert: Option<&[u8]>, thumb: &[u8], rest: usize) -> Vec<u8> {
        let mut b = b"OPNF".to_vec();
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&0u32.to_le_bytes());
        for f in [Some(uri), cert, Some(thumb)] {
            match f {
                Some(f) => {
                    b.extend_from_slice(&(f.len() as i32).to_le_bytes());
                    b.extend_from_slice(f);
                }
                None => b.extend_from_slice(&(-1i32).to_le_bytes()),
            }
        }
        b.extend(std::iter::repeat_n(0xAAu8, rest));
        let size = b.len() as u32;
        b[4..8].copy_from_slice(&size.to_le_bytes());
        b
    }

    #[test]
    fn encrypted_part_of_an_opn_chunk() {
        let c = chunk(
            b"http://opcfoundation.org/UA/SecurityPolicy#Basic256Sha256",
            Some(&[1; 900]),
            &[2; 20],
            512,
        );
        assert_eq!(opn_encrypted_len(&c), Some(512));
        let c = chunk(b"x", None, &[], 256);
        assert_eq!(opn_encrypted_len(&c), Some(256));
        assert_eq!(
            opn_encrypted_len(&c[..c.len() - 1]),
            None,
            "a partial chunk"
        );
        assert_eq!(opn_encrypted_len(b"MSGF\0\0\0\0"), None);
        let mut bad = chunk(b"x", None, &[], 16);
        bad[12..16].copy_from_slice(&1000i32.to_le_bytes());
        assert_eq!(
            opn_encrypted_len(&bad),
            None,
            "a field longer than the chunk"
        );
    }

    #[test]
    fn two_calibrations_bracket_the_window() {
        let a = Calibration {
            cpus: vec![0, 1],
            key_bits: 2048,
            decrypt_us: 300.0,
            sign_us: 300.0,
        };
        let b = Calibration {
            cpus: vec![0, 1],
            key_bits: 2048,
            decrypt_us: 400.0,
            sign_us: 300.0,
        };
        let m = a.mean_with(&b);
        assert_eq!((m.decrypt_us, m.sign_us, m.cpus.len()), (350.0, 300.0, 2));
        assert_eq!(a.drift_to(&b), 0.154);
        assert_eq!(b.drift_to(&a), -0.154);
    }

    #[test]
    fn bound_from_a_calibration() {
        let cal = Calibration {
            cpus: vec![0],
            key_bits: 2048,
            decrypt_us: 300.0,
            sign_us: 350.0,
        };
        let mut o = Map::new();
        o.insert("server_cpu_us_per_op".into(), json!(2000.0));
        add_to(
            &mut o,
            &cal,
            opn_encrypted_len(&chunk(b"x", None, &[], 512)).unwrap() as u64,
        );
        assert_eq!(o["rsa_private_ops_per_op"], json!("2 decrypt + 2 sign"));
        assert_eq!(o["rsa_bound_us_per_op"], json!(1300.0));
        assert_eq!(o["rsa_bound_share"], json!(0.65));
        assert_eq!(o["rsa_bound_ops_per_core_s"], json!(769.2));
        // No request seen, or one that is no whole number of RSA blocks: no bound.
        for seen in [0, 500] {
            let mut o = Map::new();
            add_to(&mut o, &cal, seen);
            assert!(
                o.contains_key("rsa_bound_error") && !o.contains_key("rsa_bound_us_per_op"),
                "{seen}: {o:?}"
            );
        }
    }
}
