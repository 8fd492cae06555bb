//! Library side of the command-line helpers the `uaring` binary exposes:
//! `uaring cert generate|show|trust` and `uaring hash-password`. The binary parses the command
//! line (clap, in shards/src/cli.rs) and calls these typed entry points.

use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::path::Path;

use crate::cert::{
    generate_self_signed, generate_self_signed_ecc, to_hex, Certificate, CertificateRequest,
};
use crate::pki::{Pki, PkiConfig};
use crate::status;
use crate::user::hash_password;

fn now_unix_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The machine's host name (from /proc, else "localhost").
pub fn system_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Key sizes `uaring cert generate --bits` accepts.
pub const KEY_BITS_ALLOWED: [usize; 3] = [2048, 3072, 4096];
/// The longest validity `uaring cert generate --days` accepts.
pub const VALIDITY_DAYS_MAX: u32 = 36_500;

/// Options of `uaring cert generate` (the binary parses them with clap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerateOptions {
    /// ApplicationUri in the subjectAltName; default `urn:<host>:uaring`.
    pub uri: Option<String>,
    /// Common name; default `uaring@<host>`.
    pub name: Option<String>,
    /// DNS names; default the machine's host name.
    pub hosts: Vec<String>,
    /// IP addresses; default 127.0.0.1.
    pub ips: Vec<IpAddr>,
    /// Validity in days, 1..=[`VALIDITY_DAYS_MAX`].
    pub days: u32,
    /// RSA key size, one of [`KEY_BITS_ALLOWED`] (RSA certificates only).
    pub bits: usize,
    /// The certificate type: `None` the RSA application certificate (own/certs/uaring.der),
    /// an ECC curve the certificate of its ECC policy (own/certs/uaring_<type>.der).
    pub ecc: Option<crate::ecc::EccCurve>,
    /// Replace an existing own certificate.
    pub force: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            uri: None,
            name: None,
            hosts: Vec::new(),
            ips: Vec::new(),
            days: 5 * 365,
            bits: 2048,
            ecc: None,
            force: false,
        }
    }
}

fn open_pki(pki_dir: &Path, err: &mut dyn Write) -> Option<Pki> {
    match Pki::open(pki_dir, PkiConfig::default()) {
        Ok(p) => Some(p),
        Err(e) => {
            let _ = writeln!(err, "cannot open PKI directory {}: {e}", pki_dir.display());
            None
        }
    }
}

/// `uaring cert show [FILE]`: describes FILE, or the own certificate without one.
/// Exit code 0, or 1 when the file is missing or not a certificate.
pub fn cert_show(
    file: Option<&Path>,
    pki_dir: &Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let path = match file {
        Some(p) => p.to_path_buf(),
        None => match open_pki(pki_dir, err) {
            Some(pki) => pki.own_cert_path(),
            None => return 1,
        },
    };
    match std::fs::read(&path) {
        Ok(bytes) => match Certificate::from_pem_or_der(&bytes) {
            Ok(cert) => {
                let _ = write!(out, "{}", describe(&cert));
                0
            }
            Err(code) => {
                let _ = writeln!(
                    err,
                    "{}: not a certificate ({})",
                    path.display(),
                    status::name(code)
                );
                1
            }
        },
        Err(e) => {
            let _ = writeln!(err, "{}: {e}", path.display());
            1
        }
    }
}

/// `uaring cert show --type nistP256|…|brainpoolP384r1`: describes the own certificate of an ECC
/// certificate type (`None`: the RSA one, as [`cert_show`] without a file).
pub fn cert_show_type(
    ecc: Option<crate::ecc::EccCurve>,
    pki_dir: &Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let Some(curve) = ecc else {
        return cert_show(None, pki_dir, out, err);
    };
    match open_pki(pki_dir, err) {
        Some(pki) => cert_show(Some(&pki.own_ecc_cert_path(curve)), pki_dir, out, err),
        None => 1,
    }
}

/// `uaring cert trust FILE`: copies a certificate into trusted/certs. Exit code 0 or 1.
pub fn cert_trust(file: &Path, pki_dir: &Path, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let Some(mut pki) = open_pki(pki_dir, err) else {
        return 1;
    };
    match pki.trust_file(file) {
        Ok(cert) => {
            let _ = writeln!(
                out,
                "trusted {} ({}) in {}",
                cert.subject(),
                cert.thumbprint_hex(),
                pki.dir("trusted/certs").display()
            );
            0
        }
        Err(e) => {
            let _ = writeln!(err, "{e}");
            1
        }
    }
}

/// `uaring cert generate`: a self-signed application instance certificate and key in the PKI
/// directory. Exit code 0; 1 when one exists already (without `force`) or generation fails; 2 for
/// options out of range.
pub fn cert_generate(
    opts: &GenerateOptions,
    pki_dir: &Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    if !KEY_BITS_ALLOWED.contains(&opts.bits) {
        let _ = writeln!(err, "--bits {}: expected 2048, 3072 or 4096", opts.bits);
        return 2;
    }
    if !(1..=VALIDITY_DAYS_MAX).contains(&opts.days) {
        let _ = writeln!(
            err,
            "--days {}: expected 1..={VALIDITY_DAYS_MAX}",
            opts.days
        );
        return 2;
    }
    let Some(pki) = open_pki(pki_dir, err) else {
        return 1;
    };
    let host = system_hostname();
    let (cert_path, key_path) = match opts.ecc {
        None => (pki.own_cert_path(), pki.own_key_path()),
        Some(c) => (pki.own_ecc_cert_path(c), pki.own_ecc_key_path(c)),
    };
    if !opts.force && (cert_path.exists() || key_path.exists()) {
        let _ = writeln!(
            err,
            "{} already exists; pass --force to replace it",
            cert_path.display()
        );
        return 1;
    }
    let mut hosts = opts.hosts.clone();
    if hosts.is_empty() {
        hosts.push(host.clone());
    }
    let mut ips = opts.ips.clone();
    if ips.is_empty() {
        ips.push(IpAddr::from([127, 0, 0, 1]));
    }
    let uri = opts
        .uri
        .clone()
        .unwrap_or_else(|| format!("urn:{host}:uaring"));
    let name = opts
        .name
        .clone()
        .unwrap_or_else(|| format!("uaring@{host}"));
    let mut req = CertificateRequest::new(&uri, &name, now_unix_s());
    req.dns_names = hosts;
    req.ip_addresses = ips;
    req.validity_days = opts.days;
    req.key_bits = opts.bits;
    let written = match opts.ecc {
        None => {
            generate_self_signed(&req).map(|(cert, key)| pki.write_own(&cert, &key).map(|()| cert))
        }
        Some(curve) => generate_self_signed_ecc(&req, curve)
            .map(|(cert, key)| pki.write_own_ecc(&cert, &key).map(|()| cert)),
    };
    let cert = match written {
        Ok(Ok(cert)) => cert,
        Ok(Err(e)) => {
            let _ = writeln!(err, "{e}");
            return 1;
        }
        Err(code) => {
            let _ = writeln!(err, "certificate generation failed: {}", status::name(code));
            return 1;
        }
    };
    let _ = writeln!(
        out,
        "wrote {} and {}",
        cert_path.display(),
        key_path.display()
    );
    let _ = write!(out, "{}", describe(&cert));
    0
}

fn fmt_time(unix_s: i64) -> String {
    match time::OffsetDateTime::from_unix_timestamp(unix_s) {
        Ok(t) => {
            let f = time::format_description::well_known::Rfc3339;
            t.format(&f).unwrap_or_else(|_| unix_s.to_string())
        }
        Err(_) => unix_s.to_string(),
    }
}

/// Human-readable description of a certificate (the `cert show` output).
pub fn describe(cert: &Certificate) -> String {
    let mut s = String::new();
    s.push_str(&format!("subject:         {}\n", cert.subject()));
    s.push_str(&format!("issuer:          {}\n", cert.issuer()));
    s.push_str(&format!("serial:          {}\n", to_hex(cert.serial())));
    s.push_str(&format!("thumbprint:      {}\n", cert.thumbprint_hex()));
    s.push_str(&format!(
        "valid from:      {}\n",
        fmt_time(cert.not_before_unix_s())
    ));
    s.push_str(&format!(
        "valid to:        {}\n",
        fmt_time(cert.not_after_unix_s())
    ));
    match cert.ec_curve() {
        Some(c) => s.push_str(&format!("key:             EC {}\n", c.type_name())),
        None => s.push_str(&format!("key:             RSA {} bits\n", cert.key_bits())),
    }
    s.push_str(&format!("signature:       {:?}\n", cert.signature_alg()));
    s.push_str(&format!(
        "application uri: {}\n",
        cert.application_uri().unwrap_or("(none)")
    ));
    if !cert.dns_names().is_empty() {
        s.push_str(&format!(
            "dns names:       {}\n",
            cert.dns_names().join(", ")
        ));
    }
    if !cert.ip_addresses().is_empty() {
        let ips: Vec<String> = cert.ip_addresses().iter().map(|i| i.to_string()).collect();
        s.push_str(&format!("ip addresses:    {}\n", ips.join(", ")));
    }
    if let Some(ku) = cert.key_usage() {
        let mut names = Vec::new();
        for (on, n) in [
            (ku.digital_signature, "digitalSignature"),
            (ku.non_repudiation, "nonRepudiation"),
            (ku.key_encipherment, "keyEncipherment"),
            (ku.data_encipherment, "dataEncipherment"),
            (ku.key_cert_sign, "keyCertSign"),
            (ku.crl_sign, "cRLSign"),
        ] {
            if on {
                names.push(n);
            }
        }
        s.push_str(&format!("key usage:       {}\n", names.join(", ")));
    }
    if let Some(ca) = cert.is_ca() {
        s.push_str(&format!("ca:              {ca}\n"));
    }
    s
}

/// `uaring hash-password`: reads one password line on stdin, prints its argon2id PHC string.
pub fn hash_password_command() -> i32 {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    hash_password_command_io(&mut stdin.lock(), &mut stdout.lock(), &mut stderr.lock())
}

/// Testable form of [`hash_password_command`].
pub fn hash_password_command_io(
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let mut line = zeroize::Zeroizing::new(String::new());
    match input.read_line(&mut line) {
        Ok(0) => {
            let _ = writeln!(err, "no password on standard input");
            return 1;
        }
        Ok(_) => {}
        Err(e) => {
            let _ = writeln!(err, "cannot read standard input: {e}");
            return 1;
        }
    }
    let password = line.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        let _ = writeln!(err, "empty password");
        return 1;
    }
    if password.len() > crate::user::PASSWORD_LEN_MAX {
        let _ = writeln!(
            err,
            "password longer than {} bytes",
            crate::user::PASSWORD_LEN_MAX
        );
        return 1;
    }
    match hash_password(password) {
        Ok(phc) => {
            let _ = writeln!(out, "{phc}");
            0
        }
        Err(code) => {
            let _ = writeln!(err, "hashing failed: {}", status::name(code));
            1
        }
    }
}
