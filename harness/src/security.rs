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
use uaring_crypto::{generate_self_signed, CertificateRequest, OwnIdentity, PolicyId, RsaPolicy};

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

pub fn parse_policy(s: &str) -> Result<PolicyId, String> {
    let all = [
        PolicyId::Basic256Sha256,
        PolicyId::Aes128Sha256RsaOaep,
        PolicyId::Aes256Sha256RsaPss,
    ];
    let norm = |x: &str| x.to_ascii_lowercase().replace(['-', '_'], "");
    all.into_iter()
        .find(|p| norm(p.name()) == norm(s) || p.uri() == s)
        .ok_or_else(|| format!("--security-policy {s:?}: one of Basic256Sha256, Aes128_Sha256_RsaOaep, Aes256_Sha256_RsaPss"))
}

/// Builds the secured configuration, or `None` for mode None.
pub fn prepare(url: &str, mode: &str, policy: &str) -> Result<Option<Arc<Security>>, String> {
    let mode = parse_mode(mode)?;
    if mode == MessageSecurityMode::None {
        return Ok(None);
    }
    let id = parse_policy(policy)?;
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let req = CertificateRequest::new(CLIENT_URI, "uaring-bench", now_s - 3600);
    let (cert, key) =
        generate_self_signed(&req).map_err(|e| format!("client certificate: 0x{e:08X}"))?;
    let own = OwnIdentity::new(cert, key)?;
    let client_certificate = own.cert.der().to_vec();
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
    let policy: Arc<dyn SecurityPolicy> = RsaPolicy::client(id, own)?;
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
            parse_policy("Basic256Sha256").unwrap(),
            PolicyId::Basic256Sha256
        );
        assert_eq!(
            parse_policy("aes256-sha256-rsapss").unwrap(),
            PolicyId::Aes256Sha256RsaPss
        );
        assert!(parse_policy("Basic128Rsa15").is_err());
    }
}
