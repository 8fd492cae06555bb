//! User authentication: encrypted UserName secrets, X.509 user tokens, configured users with
//! argon2id password hashes.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::asymmetric::{asym_decrypt, asym_encrypt, asym_verify, PrivateKey};
use crate::cert::Certificate;
use crate::pki::{CertRole, Pki};
use crate::policy::PolicyId;
use crate::status;

/// Longest password accepted in a UserName token (bytes).
pub const PASSWORD_LEN_MAX: usize = 1024;
/// Longest user name accepted in configuration (bytes).
pub const USER_NAME_LEN_MAX: usize = 256;

/// Client side: encrypts `password` for a UserNameIdentityToken with the token policy
/// (legacy format, OPC 10000-4 §7.41.2.2): `length (u32 LE, = password + nonce) ‖ password ‖
/// serverNonce`, RSA-encrypted to the server certificate. Returns the token's `password` bytes;
/// the token's `encryptionAlgorithm` is [`PolicyId::asym_encryption_algorithm_uri`].
pub fn encrypt_user_password(
    policy: PolicyId,
    server_cert: &Certificate,
    password: &[u8],
    server_nonce: &[u8],
) -> Result<Vec<u8>, u32> {
    if password.len() > PASSWORD_LEN_MAX {
        return Err(status::BAD_INVALID_ARGUMENT);
    }
    let mut plain = Zeroizing::new(Vec::with_capacity(4 + password.len() + server_nonce.len()));
    let len = (password.len() + server_nonce.len()) as u32;
    plain.extend_from_slice(&len.to_le_bytes());
    plain.extend_from_slice(password);
    plain.extend_from_slice(server_nonce);
    let mut out = Vec::new();
    asym_encrypt(policy, server_cert, &plain, &mut out)?;
    Ok(out)
}

/// Server side: decrypts a UserNameIdentityToken password and checks the server nonce.
///
/// `encryption_algorithm` is the token's encryptionAlgorithm URI; it must be the token policy's.
/// Returns the password. A wrong algorithm, bad ciphertext, bad length, padding after the
/// secret that is not zeros, or a nonce that is not `server_nonce` is
/// `BadIdentityTokenInvalid` (the nonce comparison is constant time).
pub fn decrypt_user_password(
    policy: PolicyId,
    own_key: &PrivateKey,
    encryption_algorithm: &str,
    ciphertext: &[u8],
    server_nonce: &[u8],
) -> Result<Zeroizing<Vec<u8>>, u32> {
    if policy.asym_encryption_algorithm_uri() != Some(encryption_algorithm) {
        return Err(status::BAD_IDENTITY_TOKEN_INVALID);
    }
    let mut plain = Zeroizing::new(Vec::new());
    asym_decrypt(policy, own_key, ciphertext, &mut plain)
        .map_err(|_| status::BAD_IDENTITY_TOKEN_INVALID)?;
    let Some((length, body)) = plain.split_first_chunk::<4>() else {
        return Err(status::BAD_IDENTITY_TOKEN_INVALID);
    };
    let declared = u32::from_le_bytes(*length) as usize;
    // A client may pad the plaintext to whole RSA blocks; the padding must be zeros (Part 4
    // §7.41.2.2, 1.04 errata). open62541 pads.
    let Some((body, padding)) = body.split_at_checked(declared) else {
        return Err(status::BAD_IDENTITY_TOKEN_INVALID);
    };
    if padding.iter().any(|b| *b != 0) || server_nonce.is_empty() {
        return Err(status::BAD_IDENTITY_TOKEN_INVALID);
    }
    let Some((password, nonce)) = declared
        .checked_sub(server_nonce.len())
        .and_then(|n| body.split_at_checked(n))
    else {
        return Err(status::BAD_IDENTITY_TOKEN_INVALID);
    };
    if !bool::from(nonce.ct_eq(server_nonce)) {
        return Err(status::BAD_IDENTITY_TOKEN_INVALID);
    }
    if password.len() > PASSWORD_LEN_MAX {
        return Err(status::BAD_IDENTITY_TOKEN_INVALID);
    }
    Ok(Zeroizing::new(password.to_vec()))
}

/// Data signed for ActivateSession and X.509 user tokens: `cert ‖ nonce`.
pub fn signature_data(cert_der: &[u8], nonce: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(cert_der.len() + nonce.len());
    v.extend_from_slice(cert_der);
    v.extend_from_slice(nonce);
    v
}

/// Server side of an X509IdentityToken: checks the algorithm URI, verifies the user's signature
/// over `server_cert ‖ server_nonce` and validates the user certificate against the PKI.
/// Returns the user certificate. A bad signature is `BadUserSignatureInvalid`; certificate
/// problems keep their validation status.
pub fn verify_x509_user_token(
    pki: &Pki,
    policy: PolicyId,
    user_cert_der: &[u8],
    signature_algorithm: &str,
    signature: &[u8],
    server_cert_der: &[u8],
    server_nonce: &[u8],
    now_unix_s: i64,
) -> Result<Certificate, u32> {
    if policy.asym_signature_algorithm_uri() != Some(signature_algorithm) {
        return Err(status::BAD_USER_SIGNATURE_INVALID);
    }
    let chain = Certificate::parse_chain(user_cert_der)?;
    let data = signature_data(server_cert_der, server_nonce);
    let leaf = chain.first().ok_or(status::BAD_CERTIFICATE_INVALID)?;
    asym_verify(policy, leaf, &data, signature).map_err(|_| status::BAD_USER_SIGNATURE_INVALID)?;
    pki.validate(user_cert_der, CertRole::User, None, now_unix_s)
}

fn argon2() -> Argon2<'static> {
    // argon2id v19 with the crate defaults (m = 19 MiB, t = 2, p = 1: the OWASP baseline).
    Argon2::default()
}

/// Hashes a password for the configuration file: a PHC string `$argon2id$v=19$m=…,t=…,p=…$salt$hash`.
pub fn hash_password(password: &str) -> Result<String, u32> {
    let mut salt = [0u8; 16];
    crate::asymmetric::random_bytes(&mut salt)?;
    let salt = SaltString::encode_b64(&salt).map_err(|_| status::BAD_INTERNAL_ERROR)?;
    argon2()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|_| status::BAD_INTERNAL_ERROR)
}

/// Verifies a password against a PHC hash (constant-time comparison inside `password-hash`).
/// An unparseable hash or a non-argon2 algorithm verifies as false.
pub fn verify_password(password: &[u8], phc: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    if parsed.algorithm.as_str() != "argon2id" {
        return false;
    }
    argon2().verify_password(password, &parsed).is_ok()
}

/// Users from the configuration file: name → argon2id PHC hash.
#[derive(Clone, Debug, Default)]
pub struct UserStore {
    users: Vec<(String, String)>,
    dummy_hash: String,
}

impl UserStore {
    /// Builds the store; rejects malformed hashes, non-argon2id hashes, duplicates and over-long
    /// names, naming the offending user.
    pub fn new(users: Vec<(String, String)>) -> Result<Self, String> {
        for (i, (name, phc)) in users.iter().enumerate() {
            if name.is_empty() || name.len() > USER_NAME_LEN_MAX {
                return Err(format!(
                    "user #{i}: name must be 1..={USER_NAME_LEN_MAX} bytes"
                ));
            }
            match PasswordHash::new(phc) {
                Ok(h) if h.algorithm.as_str() == "argon2id" => {}
                Ok(_) => return Err(format!("user {name:?}: hash is not argon2id")),
                Err(e) => return Err(format!("user {name:?}: bad PHC hash: {e}")),
            }
            if users.iter().take(i).any(|(n, _)| n == name) {
                return Err(format!("user {name:?} is configured twice"));
            }
        }
        // Unknown users are checked against this hash so they cost the same time as known ones.
        let dummy_hash =
            hash_password("uaring-dummy-password").map_err(|c| status::name(c).to_string())?;
        Ok(UserStore { users, dummy_hash })
    }

    /// Number of configured users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether no user is configured.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Checks a user name and password. Unknown users run a full argon2 verification too, so
    /// timing does not reveal which names exist. Returns `Err(BadUserAccessDenied)` on failure.
    pub fn authenticate(&self, user: &str, password: &[u8]) -> Result<(), u32> {
        let entry = self
            .users
            .iter()
            .find(|(n, _)| n.as_bytes().ct_eq(user.as_bytes()).into());
        match entry {
            Some((_, phc)) => {
                if verify_password(password, phc) {
                    Ok(())
                } else {
                    Err(status::BAD_USER_ACCESS_DENIED)
                }
            }
            None => {
                let _ = verify_password(password, &self.dummy_hash);
                Err(status::BAD_USER_ACCESS_DENIED)
            }
        }
    }
}
