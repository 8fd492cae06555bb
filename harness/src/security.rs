//! Secured channels for the load client: a client identity (self-signed,
//! generated per run by uaring-crypto), the server certificate from the
//! server's own GetEndpoints, and crypto's RSA policy plugged into core's
//! `ClientConfig`. The session is then created with the client certificate
//! and activated with the client signature over server certificate + nonce.

use std::sync::Arc;
use std::time::Duration;

use crate::blocking::Client;
use uaring_core::client::ClientConfig;
use uaring_core::generated::types::MessageSecurityMode;
use uaring_core::secure_channel::SecurityPolicy;
use uaring_crypto::{
    generate_self_signed, generate_self_signed_ecc, CertificateRequest, EccCurve, EccIdentity,
    EccPolicy, OwnIdentity, PolicyId, RsaPolicy,
};

/// A security policy the load client speaks: one of the RSA policies, or an ECC curve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientPolicy {
    Rsa(PolicyId),
    Ecc(EccCurve),
}

impl ClientPolicy {
    pub fn uri(self) -> &'static str {
        match self {
            ClientPolicy::Rsa(p) => p.uri(),
            ClientPolicy::Ecc(c) => c.policy_uri(),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            ClientPolicy::Rsa(p) => p.name(),
            ClientPolicy::Ecc(c) => c.policy_name(),
        }
    }
}

pub struct Security {
    pub policy: Arc<dyn SecurityPolicy>,
    pub mode: MessageSecurityMode,
    pub server_certificate: Vec<u8>,
    pub client_certificate: Vec<u8>,
}

impl Security {
    pub fn apply(&self, cfg: &mut ClientConfig) {
        cfg.policy = self.policy.clone();
        cfg.mode = self.mode;
        cfg.server_certificate = Some(self.server_certificate.clone());
    }
}

pub const CLIENT_URI: &str = "urn:uaring:bench";

/// `none`, `sign`, `sign-encrypt` (also `SignAndEncrypt`, `Sign`, `None`).
pub fn parse_mode(s: &str) -> Result<MessageSecurityMode, String> {
    match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
        "none" => Ok(MessageSecurityMode::None),
        "sign" => Ok(MessageSecurityMode::Sign),
        "signencrypt" | "signandencrypt" => Ok(MessageSecurityMode::SignAndEncrypt),
        _ => Err(format!("--security {s:?}: one of none, sign, sign-encrypt")),
    }
}

/// Any policy the load client speaks: the three RSA ones and the four ECC ones.
pub fn parse_client_policy(s: &str) -> Result<ClientPolicy, String> {
    let all = [
        ClientPolicy::Rsa(PolicyId::Basic256Sha256),
        ClientPolicy::Rsa(PolicyId::Aes128Sha256RsaOaep),
        ClientPolicy::Rsa(PolicyId::Aes256Sha256RsaPss),
        ClientPolicy::Ecc(EccCurve::NistP256),
        ClientPolicy::Ecc(EccCurve::NistP384),
        ClientPolicy::Ecc(EccCurve::BrainpoolP256r1),
        ClientPolicy::Ecc(EccCurve::BrainpoolP384r1),
    ];
    let norm = |x: &str| x.to_ascii_lowercase().replace(['-', '_'], "");
    all.into_iter()
        .find(|p| norm(p.name()) == norm(s) || p.uri() == s)
        .ok_or_else(|| format!("--security-policy {s:?}: one of Basic256Sha256, Aes128_Sha256_RsaOaep, Aes256_Sha256_RsaPss, ECC_nistP256, ECC_nistP384, ECC_brainpoolP256r1, ECC_brainpoolP384r1"))
}

/// Builds the secured configuration, or `None` for mode None.
pub fn prepare(url: &str, mode: &str, policy: &str) -> Result<Option<Arc<Security>>, String> {
    let mode = parse_mode(mode)?;
    if mode == MessageSecurityMode::None {
        return Ok(None);
    }
    let id = parse_client_policy(policy)?;
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let req = CertificateRequest::new(CLIENT_URI, "uaring-bench", now_s - 3600);
    let (policy, client_certificate): (Arc<dyn SecurityPolicy>, Vec<u8>) = match id {
        ClientPolicy::Rsa(p) => {
            let (cert, key) =
                generate_self_signed(&req).map_err(|e| format!("client certificate: 0x{e:08X}"))?;
            let own = OwnIdentity::new(cert, key)?;
            let der = own.cert.der().to_vec();
            (RsaPolicy::client(p, own)?, der)
        }
        ClientPolicy::Ecc(curve) => {
            let (cert, key) = generate_self_signed_ecc(&req, curve)
                .map_err(|e| format!("client certificate: 0x{e:08X}"))?;
            let der = cert.der().to_vec();
            (EccPolicy::client(EccIdentity::new(cert, key)?), der)
        }
    };
    let mut c = Client::connect(url, Duration::from_secs(10))
        .map_err(|e| format!("GetEndpoints connect: {e:?}"))?;
    let eps = c
        .get_endpoints()
        .map_err(|e| format!("GetEndpoints: {e:?}"))?;
    let _ = c.close();
    let ep = eps
        .iter()
        .find(|e| e.security_policy_uri.as_str() == id.uri() && e.security_mode == mode)
        .ok_or_else(|| format!("the server offers no endpoint {} {:?}", id.name(), mode))?;
    let server_certificate = ep.server_certificate.as_bytes().to_vec();
    if server_certificate.is_empty() {
        return Err("the endpoint has no server certificate".into());
    }
    Ok(Some(Arc::new(Security {
        policy,
        mode,
        server_certificate,
        client_certificate,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            parse_mode("sign-encrypt").unwrap(),
            MessageSecurityMode::SignAndEncrypt
        );
        assert_eq!(parse_mode("None").unwrap(), MessageSecurityMode::None);
        assert!(parse_mode("x").is_err());
        assert_eq!(
            parse_client_policy("Basic256Sha256").unwrap(),
            ClientPolicy::Rsa(PolicyId::Basic256Sha256)
        );
        assert_eq!(
            parse_client_policy("aes256-sha256-rsapss").unwrap(),
            ClientPolicy::Rsa(PolicyId::Aes256Sha256RsaPss)
        );
        assert!(parse_client_policy("Basic128Rsa15").is_err());
        assert_eq!(
            parse_client_policy("ECC_nistP256").unwrap(),
            ClientPolicy::Ecc(EccCurve::NistP256)
        );
        assert_eq!(
            parse_client_policy("ecc-nistp384").unwrap().name(),
            "ECC_nistP384"
        );
    }
}
