//! uaring-crypto: the cryptographic building blocks of OPC UA security for uaring.
//!
//! - [`PolicyId`]: security policies and their parameters (None, Basic256Sha256,
//!   Aes128_Sha256_RsaOaep, Aes256_Sha256_RsaPss; the deprecated Basic128Rsa15 and Basic256 are
//!   recognised but not supported end to end).
//! - [`derive_channel_keys`] / [`SymmetricKeys`]: P_SHA256 key derivation and in-place,
//!   allocation-free HMAC + AES-CBC chunk security.
//! - [`asym_encrypt`], [`asym_decrypt`], [`asym_sign`], [`asym_verify`]: RSA with aws-lc-rs.
//! - [`EccPolicy`], [`EccCurve`], [`ecc`]: the ECC policies ECC_nistP256 and ECC_nistP384
//!   (ECDH ephemeral keys, HKDF, ECDSA) with aws-lc-rs, ECC_brainpoolP256r1 and
//!   ECC_brainpoolP384r1 with RustCrypto's `bp256`/`bp384`; the crate choice is written down in
//!   [`ecc`]'s documentation. [`ecc_secret`]: UserName passwords over them (EccEncryptedSecret).
//! - [`Certificate`], [`generate_self_signed`], [`Pki`]: certificates and the PKI directory.
//! - [`encrypt_user_password`], [`decrypt_user_password`], [`UserStore`], [`LoginLimiter`]:
//!   user authentication.
//! - [`cert_generate`], [`cert_show`], [`cert_trust`], [`hash_password_command`]: the CLI helpers.
//!
//! Errors are OPC UA status codes as plain `u32` (see [`status`]). Nothing here reads a clock on
//! the request path: times are passed in.

#![forbid(unsafe_code)]
// No panic reachable from input: library code outside tests checks every access (the few
// proven-safe spots carry a narrow `allow` with the proof; docs/Fuzzing.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented
    )
)]
#![warn(missing_docs)]

pub mod asymmetric;
mod brainpool;
pub mod cert;
mod cert_build;
pub mod cli;
pub mod ecc;
pub mod ecc_policy;
pub mod ecc_secret;
pub mod kdf;
pub mod pki;
pub mod policy;
pub mod ratelimit;
pub mod status;
pub mod symmetric;
pub mod uasc;
pub mod user;

pub use asymmetric::{
    asym_decrypt, asym_encrypt, asym_sign, asym_sign_into, asym_verify, cipher_text_block_size,
    encrypted_len, new_nonce, plain_text_block_size, random_bytes, PrivateKey,
};
pub use cert::{
    generate_self_signed, generate_self_signed_ecc, signing_request_der, signing_request_der_ecc,
    thumbprint, Certificate, CertificateRequest, SigningRequest,
};
pub use cli::{
    cert_generate, cert_show, cert_show_type, cert_trust, hash_password_command, GenerateOptions,
};
pub use ecc::{EccCurve, EccPrivateKey};
pub use ecc_policy::{EccIdentity, EccPolicy};
pub use kdf::{p_hash, p_sha1, p_sha256};
pub use pki::{CertRole, Crl, Pki, PkiConfig, ACCEPT_ALL_WARNING};
pub use policy::{check_padding, padding_len, write_padding, PolicyId, SecurityMode};
pub use ratelimit::{LoginLimiter, LoginLimiterConfig};
pub use symmetric::{derive_channel_keys, derive_keys, ChannelKeys, SymmetricKeys};
pub use uasc::{
    opn_certificate_status, AddressLimits, ConfiguredUsers, HandshakeLimits, OwnIdentity,
    RsaPolicy, ShardTrust, UserDirectory, UserEntry,
};
pub use user::{
    decrypt_user_password, encrypt_user_password, hash_password, signature_data, verify_password,
    verify_x509_user_token, UserStore,
};
