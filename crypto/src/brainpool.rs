//! The brainpoolP256r1 and brainpoolP384r1 arithmetic of the ECC_brainpoolP256r1 and
//! ECC_brainpoolP384r1 policies, with RustCrypto's `bp256` / `bp384` (0.14) and `ecdsa`
//! (0.17): aws-lc-rs, the engine of every other policy here, has no Brainpool curve.
//!
//! Why these crates (written down in docs/Security.md too): they are the RustCrypto project's
//! (maintained, released with the rest of its elliptic-curve crates); their field arithmetic
//! is synthesized by fiat-crypto (formally verified, constant time), the point formulas are the
//! complete Renes–Costello–Batina ones (`primeorder`), and a scalar multiplication by a secret
//! (ECDH, key generation, signing) walks a fixed window with constant-time table selection;
//! only verification, whose inputs are public, uses the variable-time multiplication. ECDSA
//! signatures are deterministic (RFC 6979). Against them: no published audit, few users, and a
//! newer generation of RustCrypto's traits (`der` 0.8, `digest` 0.11) beside the one the rest
//! of this crate uses; and they are slow next to AWS-LC's assembly (about 0.2 ms per signature,
//! verification or ECDH on P-256 here, against 20–50 µs for NIST P-256), so a Brainpool
//! handshake costs about what an RSA-2048 one does. The policies are offered only where their
//! certificate exists (`uaring cert generate --type brainpoolP256r1`).
//!
//! Points are uncompressed (`04 ‖ x ‖ y`), signatures the fixed `r ‖ s` of the ECC policies or
//! DER (certificates, CRLs, signing requests), as for the NIST curves.

use ecdsa::signature::hazmat::{PrehashSigner, PrehashVerifier};
use ecdsa::signature::{Signer, Verifier};
use elliptic_curve::point::AffineCoordinates;
use elliptic_curve::sec1::{FromSec1Point, ToSec1Point};
use elliptic_curve::Generate;
use pkcs8::{DecodePrivateKey, EncodePrivateKey};
use zeroize::Zeroizing;

use crate::status;

/// One of the two Brainpool curves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bp {
    P256,
    P384,
}

/// A Brainpool ECDSA key.
#[derive(Clone)]
pub(crate) enum BpSigningKey {
    P256(ecdsa::SigningKey<bp256::r1::BrainpoolP256r1>),
    P384(ecdsa::SigningKey<bp384::r1::BrainpoolP384r1>),
}

/// A Brainpool ephemeral ECDH scalar.
pub(crate) enum BpScalar {
    P256(bp256::r1::NonZeroScalar),
    P384(bp384::r1::NonZeroScalar),
}

/// Runs `$e` with `$c` the curve type of `$bp` (the two curves' code is the same but for it).
macro_rules! with_curve {
    ($bp:expr, $c:ident => $e:expr) => {
        match $bp {
            Bp::P256 => {
                type $c = bp256::r1::BrainpoolP256r1;
                $e
            }
            Bp::P384 => {
                type $c = bp384::r1::BrainpoolP384r1;
                $e
            }
        }
    };
}

impl BpSigningKey {
    /// A fresh key (OS randomness) and its PKCS#8 DER.
    pub(crate) fn generate(bp: Bp) -> Result<(Self, Zeroizing<Vec<u8>>), u32> {
        let der = with_curve!(bp, C => {
            let sk = elliptic_curve::SecretKey::<C>::generate();
            sk.to_pkcs8_der().map_err(|_| status::BAD_INTERNAL_ERROR)?
        });
        let der = Zeroizing::new(der.as_bytes().to_vec());
        let key = Self::from_pkcs8_der(&der).ok_or(status::BAD_INTERNAL_ERROR)?;
        Ok((key, der))
    }

    /// A PKCS#8 DER key of either curve.
    pub(crate) fn from_pkcs8_der(der: &[u8]) -> Option<Self> {
        if let Ok(sk) = bp256::r1::SecretKey::from_pkcs8_der(der) {
            return Some(BpSigningKey::P256(ecdsa::SigningKey::from(&sk)));
        }
        bp384::r1::SecretKey::from_pkcs8_der(der)
            .ok()
            .map(|sk| BpSigningKey::P384(ecdsa::SigningKey::from(&sk)))
    }

    pub(crate) fn curve(&self) -> Bp {
        match self {
            BpSigningKey::P256(_) => Bp::P256,
            BpSigningKey::P384(_) => Bp::P384,
        }
    }

    /// The public key, uncompressed.
    pub(crate) fn public_point(&self) -> Vec<u8> {
        match self {
            BpSigningKey::P256(k) => k.verifying_key().to_sec1_point(false).as_bytes().to_vec(),
            BpSigningKey::P384(k) => k.verifying_key().to_sec1_point(false).as_bytes().to_vec(),
        }
    }

    /// ECDSA over `data` with the curve's hash (SHA-256 / SHA-384), `r ‖ s`.
    pub(crate) fn sign_fixed(&self, data: &[u8]) -> Vec<u8> {
        match self {
            BpSigningKey::P256(k) => {
                let s: ecdsa::Signature<_> = k.sign(data);
                s.to_bytes().to_vec()
            }
            BpSigningKey::P384(k) => {
                let s: ecdsa::Signature<_> = k.sign(data);
                s.to_bytes().to_vec()
            }
        }
    }

    /// ECDSA over an already computed `digest`, DER (certificates, signing requests).
    pub(crate) fn sign_prehash_der(&self, digest: &[u8]) -> Result<Vec<u8>, u32> {
        let bad = |_| status::BAD_INTERNAL_ERROR;
        Ok(match self {
            BpSigningKey::P256(k) => {
                let s: ecdsa::Signature<_> = k.sign_prehash(digest).map_err(bad)?;
                s.to_der().as_bytes().to_vec()
            }
            BpSigningKey::P384(k) => {
                let s: ecdsa::Signature<_> = k.sign_prehash(digest).map_err(bad)?;
                s.to_der().as_bytes().to_vec()
            }
        })
    }
}

/// Verifies a fixed-size (`r ‖ s`) ECDSA signature over `data` (the curve's hash) by the key
/// `point` (uncompressed).
pub(crate) fn verify_fixed(bp: Bp, point: &[u8], data: &[u8], signature: &[u8]) -> bool {
    with_curve!(bp, C => {
        let Ok(key) = ecdsa::VerifyingKey::<C>::from_sec1_bytes(point) else {
            return false;
        };
        ecdsa::Signature::<C>::from_slice(signature).is_ok_and(|s| key.verify(data, &s).is_ok())
    })
}

/// Verifies a DER ECDSA signature over `digest` (certificates and CRLs: the hash is the
/// signature algorithm's, not the curve's) by the key `point`.
pub(crate) fn verify_prehash_der(bp: Bp, point: &[u8], digest: &[u8], signature: &[u8]) -> bool {
    with_curve!(bp, C => {
        let Ok(key) = ecdsa::VerifyingKey::<C>::from_sec1_bytes(point) else {
            return false;
        };
        ecdsa::Signature::<C>::from_der(signature)
            .is_ok_and(|s| key.verify_prehash(digest, &s).is_ok())
    })
}

impl BpScalar {
    /// A fresh ephemeral scalar.
    pub(crate) fn generate(bp: Bp) -> Self {
        match bp {
            Bp::P256 => BpScalar::P256(bp256::r1::NonZeroScalar::generate()),
            Bp::P384 => BpScalar::P384(bp384::r1::NonZeroScalar::generate()),
        }
    }

    /// The scalar of `bytes` (big-endian, the coordinate length; known-answer tests).
    pub(crate) fn from_bytes(bp: Bp, bytes: &[u8]) -> Option<Self> {
        Some(match bp {
            Bp::P256 => BpScalar::P256(
                bp256::r1::SecretKey::from_slice(bytes)
                    .ok()?
                    .to_nonzero_scalar(),
            ),
            Bp::P384 => BpScalar::P384(
                bp384::r1::SecretKey::from_slice(bytes)
                    .ok()?
                    .to_nonzero_scalar(),
            ),
        })
    }

    /// The public point, uncompressed.
    pub(crate) fn public_point(&self) -> Vec<u8> {
        match self {
            BpScalar::P256(s) => (bp256::r1::ProjectivePoint::GENERATOR * **s)
                .to_affine()
                .to_sec1_point(false)
                .as_bytes()
                .to_vec(),
            BpScalar::P384(s) => (bp384::r1::ProjectivePoint::GENERATOR * **s)
                .to_affine()
                .to_sec1_point(false)
                .as_bytes()
                .to_vec(),
        }
    }

    /// The ECDH shared secret (x coordinate) with the peer's uncompressed point; `None` for a
    /// point that is not on the curve.
    pub(crate) fn agree(&self, peer: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
        match self {
            BpScalar::P256(s) => {
                let enc = bp256::r1::Sec1Point::from_bytes(peer).ok()?;
                let p: Option<bp256::r1::AffinePoint> =
                    bp256::r1::AffinePoint::from_sec1_point(&enc).into();
                let shared = (bp256::r1::ProjectivePoint::from(p?) * **s).to_affine();
                Some(Zeroizing::new(shared.x().to_vec()))
            }
            BpScalar::P384(s) => {
                let enc = bp384::r1::Sec1Point::from_bytes(peer).ok()?;
                let p: Option<bp384::r1::AffinePoint> =
                    bp384::r1::AffinePoint::from_sec1_point(&enc).into();
                let shared = (bp384::r1::ProjectivePoint::from(p?) * **s).to_affine();
                Some(Zeroizing::new(shared.x().to_vec()))
            }
        }
    }
}
