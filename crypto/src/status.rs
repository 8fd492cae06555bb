//! OPC UA status codes used by this crate, as plain `u32` values.
//!
//! Values are taken from the OPC Foundation `StatusCode.csv` (spec 1.05.03). The crate does not depend
//! on `uaring-core`, so the codes are repeated here; core's adapter can pass them through unchanged.

/// The operation succeeded.
pub const GOOD: u32 = 0x0000_0000;
/// An internal error occurred as a result of a programming or configuration error.
pub const BAD_INTERNAL_ERROR: u32 = 0x8002_0000;
/// Decoding halted because of invalid data in the stream.
pub const BAD_DECODING_ERROR: u32 = 0x8007_0000;
/// Certificate is invalid (structure, signature).
pub const BAD_CERTIFICATE_INVALID: u32 = 0x8012_0000;
/// An error occurred verifying security.
pub const BAD_SECURITY_CHECKS_FAILED: u32 = 0x8013_0000;
/// The Certificate does not meet the requirements of the security policy.
pub const BAD_CERTIFICATE_POLICY_CHECK_FAILED: u32 = 0x8114_0000;
/// The Certificate has expired or is not yet valid.
pub const BAD_CERTIFICATE_TIME_INVALID: u32 = 0x8014_0000;
/// An Issuer Certificate has expired or is not yet valid.
pub const BAD_CERTIFICATE_ISSUER_TIME_INVALID: u32 = 0x8015_0000;
/// The HostName used to connect to a Server does not match a HostName in the Certificate.
pub const BAD_CERTIFICATE_HOST_NAME_INVALID: u32 = 0x8016_0000;
/// The URI specified in the ApplicationDescription does not match the URI in the Certificate.
pub const BAD_CERTIFICATE_URI_INVALID: u32 = 0x8017_0000;
/// The Certificate may not be used for the requested operation.
pub const BAD_CERTIFICATE_USE_NOT_ALLOWED: u32 = 0x8018_0000;
/// The Issuer Certificate may not be used for the requested operation.
pub const BAD_CERTIFICATE_ISSUER_USE_NOT_ALLOWED: u32 = 0x8019_0000;
/// The Certificate is not trusted.
pub const BAD_CERTIFICATE_UNTRUSTED: u32 = 0x801A_0000;
/// It was not possible to determine if the Certificate has been revoked.
pub const BAD_CERTIFICATE_REVOCATION_UNKNOWN: u32 = 0x801B_0000;
/// It was not possible to determine if the Issuer Certificate has been revoked.
pub const BAD_CERTIFICATE_ISSUER_REVOCATION_UNKNOWN: u32 = 0x801C_0000;
/// The Certificate has been revoked.
pub const BAD_CERTIFICATE_REVOKED: u32 = 0x801D_0000;
/// The Issuer Certificate has been revoked.
pub const BAD_CERTIFICATE_ISSUER_REVOKED: u32 = 0x801E_0000;
/// The Certificate chain is incomplete.
pub const BAD_CERTIFICATE_CHAIN_INCOMPLETE: u32 = 0x810D_0000;
/// User does not have permission to perform the requested operation.
pub const BAD_USER_ACCESS_DENIED: u32 = 0x801F_0000;
/// The user identity token is not valid.
pub const BAD_IDENTITY_TOKEN_INVALID: u32 = 0x8020_0000;
/// The user identity token is valid but the server has rejected it.
pub const BAD_IDENTITY_TOKEN_REJECTED: u32 = 0x8021_0000;
/// The nonce does appear to be not a random value or it is not the correct length.
pub const BAD_NONCE_INVALID: u32 = 0x8024_0000;
/// The requested operation is not supported.
pub const BAD_NOT_SUPPORTED: u32 = 0x803D_0000;
/// The security mode does not meet the requirements set by the server.
pub const BAD_SECURITY_MODE_REJECTED: u32 = 0x8054_0000;
/// The security policy does not meet the requirements set by the server.
pub const BAD_SECURITY_POLICY_REJECTED: u32 = 0x8055_0000;
/// The user token signature is missing or invalid.
pub const BAD_USER_SIGNATURE_INVALID: u32 = 0x8057_0000;
/// The signature generated with the client certificate is missing or invalid.
pub const BAD_APPLICATION_SIGNATURE_INVALID: u32 = 0x8058_0000;
/// Too many operations / attempts: used by the failed-login limiter.
pub const BAD_TOO_MANY_OPERATIONS: u32 = 0x8010_0000;
/// One or more arguments are invalid.
pub const BAD_INVALID_ARGUMENT: u32 = 0x80AB_0000;

/// The symbolic name of a status code defined in this module (for logs and the CLI).
pub fn name(code: u32) -> &'static str {
    match code {
        GOOD => "Good",
        BAD_INTERNAL_ERROR => "BadInternalError",
        BAD_DECODING_ERROR => "BadDecodingError",
        BAD_CERTIFICATE_INVALID => "BadCertificateInvalid",
        BAD_SECURITY_CHECKS_FAILED => "BadSecurityChecksFailed",
        BAD_CERTIFICATE_POLICY_CHECK_FAILED => "BadCertificatePolicyCheckFailed",
        BAD_CERTIFICATE_TIME_INVALID => "BadCertificateTimeInvalid",
        BAD_CERTIFICATE_ISSUER_TIME_INVALID => "BadCertificateIssuerTimeInvalid",
        BAD_CERTIFICATE_HOST_NAME_INVALID => "BadCertificateHostNameInvalid",
        BAD_CERTIFICATE_URI_INVALID => "BadCertificateUriInvalid",
        BAD_CERTIFICATE_USE_NOT_ALLOWED => "BadCertificateUseNotAllowed",
        BAD_CERTIFICATE_ISSUER_USE_NOT_ALLOWED => "BadCertificateIssuerUseNotAllowed",
        BAD_CERTIFICATE_UNTRUSTED => "BadCertificateUntrusted",
        BAD_CERTIFICATE_REVOCATION_UNKNOWN => "BadCertificateRevocationUnknown",
        BAD_CERTIFICATE_ISSUER_REVOCATION_UNKNOWN => "BadCertificateIssuerRevocationUnknown",
        BAD_CERTIFICATE_REVOKED => "BadCertificateRevoked",
        BAD_CERTIFICATE_ISSUER_REVOKED => "BadCertificateIssuerRevoked",
        BAD_CERTIFICATE_CHAIN_INCOMPLETE => "BadCertificateChainIncomplete",
        BAD_USER_ACCESS_DENIED => "BadUserAccessDenied",
        BAD_IDENTITY_TOKEN_INVALID => "BadIdentityTokenInvalid",
        BAD_IDENTITY_TOKEN_REJECTED => "BadIdentityTokenRejected",
        BAD_NONCE_INVALID => "BadNonceInvalid",
        BAD_NOT_SUPPORTED => "BadNotSupported",
        BAD_SECURITY_MODE_REJECTED => "BadSecurityModeRejected",
        BAD_SECURITY_POLICY_REJECTED => "BadSecurityPolicyRejected",
        BAD_USER_SIGNATURE_INVALID => "BadUserSignatureInvalid",
        BAD_APPLICATION_SIGNATURE_INVALID => "BadApplicationSignatureInvalid",
        BAD_TOO_MANY_OPERATIONS => "BadTooManyOperations",
        BAD_INVALID_ARGUMENT => "BadInvalidArgument",
        _ => "Unknown",
    }
}
