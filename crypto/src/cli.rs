//! Library side of the command-line helpers the `uaring` binary exposes:
//! `uaring cert generate|show|trust` and `uaring hash-password`.

use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::path::Path;

use crate::cert::{generate_self_signed, to_hex, Certificate, CertificateRequest};
use crate::pki::{Pki, PkiConfig};
use crate::status;
use crate::user::hash_password;

const CERT_USAGE: &str = "usage:
  uaring cert generate [--uri URI] [--name NAME] [--host DNS]... [--ip ADDR]... [--days N] [--bits N] [--force]
  uaring cert show [FILE]          (default: the own certificate)
  uaring cert trust FILE           (copy FILE into trusted/certs)";

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

/// `uaring cert …` with stdout/stderr. Returns the process exit code.
pub fn cert_command(args: &[String], pki_dir: &Path) -> i32 {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    cert_command_io(args, pki_dir, &mut stdout.lock(), &mut stderr.lock())
}

/// `uaring cert …` writing to the given streams (testable form of [`cert_command`]).
pub fn cert_command_io(
    args: &[String],
    pki_dir: &Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let Some(sub) = args.first() else {
        let _ = writeln!(err, "{CERT_USAGE}");
        return 2;
    };
    let mut pki = match Pki::open(pki_dir, PkiConfig::default()) {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(err, "cannot open PKI directory {}: {e}", pki_dir.display());
            return 1;
        }
    };
    match sub.as_str() {
        "generate" => cert_generate(&args[1..], &pki, out, err),
        "show" => {
            let path = match args.get(1) {
                Some(p) => p.into(),
                None => pki.own_cert_path(),
            };
            match std::fs::read(&path) {
                Ok(bytes) => match Certificate::from_pem_or_der(&bytes) {
                    Ok(cert) => {
                        let _ = write!(out, "{}", describe(&cert));
                        0
                    }
                    Err(code) => {
                        let _ = writeln!(err, "{}: not a certificate ({})", path.display(), status::name(code));
                        1
                    }
                },
                Err(e) => {
                    let _ = writeln!(err, "{}: {e}", path.display());
                    1
                }
            }
        }
        "trust" => {
            let Some(file) = args.get(1) else {
                let _ = writeln!(err, "{CERT_USAGE}");
                return 2;
            };
            match pki.trust_file(Path::new(file)) {
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
        "help" | "--help" | "-h" => {
            let _ = writeln!(out, "{CERT_USAGE}");
            0
        }
        other => {
            let _ = writeln!(err, "unknown cert command {other:?}\n{CERT_USAGE}");
            2
        }
    }
}

fn cert_generate(args: &[String], pki: &Pki, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let host = system_hostname();
    let mut uri = None;
    let mut name = None;
    let mut hosts = Vec::new();
    let mut ips: Vec<IpAddr> = Vec::new();
    let mut days = 5 * 365u32;
    let mut bits = 2048usize;
    let mut force = false;
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        if flag == "--force" {
            force = true;
            i += 1;
            continue;
        }
        let Some(v) = args.get(i + 1) else {
            let _ = writeln!(err, "{flag}: missing value\n{CERT_USAGE}");
            return 2;
        };
        i += 2;
        let problem = match flag {
            "--uri" => {
                uri = Some(v.clone());
                None
            }
            "--name" => {
                name = Some(v.clone());
                None
            }
            "--host" => {
                hosts.push(v.clone());
                None
            }
            "--ip" => match v.parse() {
                Ok(ip) => {
                    ips.push(ip);
                    None
                }
                Err(_) => Some(format!("--ip {v:?}: not an IP address")),
            },
            "--days" => match v.parse::<u32>() {
                Ok(d) if (1..=36500).contains(&d) => {
                    days = d;
                    None
                }
                _ => Some(format!("--days {v:?}: expected 1..=36500")),
            },
            "--bits" => match v.parse::<usize>() {
                Ok(b) if [2048, 3072, 4096].contains(&b) => {
                    bits = b;
                    None
                }
                _ => Some(format!("--bits {v:?}: expected 2048, 3072 or 4096")),
            },
            other => Some(format!("unknown option {other:?}\n{CERT_USAGE}")),
        };
        if let Some(p) = problem {
            let _ = writeln!(err, "{p}");
            return 2;
        }
    }
    if !force && (pki.own_cert_path().exists() || pki.own_key_path().exists()) {
        let _ = writeln!(
            err,
            "{} already exists; pass --force to replace it",
            pki.own_cert_path().display()
        );
        return 1;
    }
    if hosts.is_empty() {
        hosts.push(host.clone());
    }
    if ips.is_empty() {
        ips.push(IpAddr::from([127, 0, 0, 1]));
    }
    let uri = uri.unwrap_or_else(|| format!("urn:{host}:uaring"));
    let name = name.unwrap_or_else(|| format!("uaring@{host}"));
    let mut req = CertificateRequest::new(&uri, &name, now_unix_s());
    req.dns_names = hosts;
    req.ip_addresses = ips;
    req.validity_days = days;
    req.key_bits = bits;
    let (cert, key) = match generate_self_signed(&req) {
        Ok(v) => v,
        Err(code) => {
            let _ = writeln!(err, "certificate generation failed: {}", status::name(code));
            return 1;
        }
    };
    if let Err(e) = pki.write_own(&cert, &key) {
        let _ = writeln!(err, "{e}");
        return 1;
    }
    let _ = writeln!(out, "wrote {} and {}", pki.own_cert_path().display(), pki.own_key_path().display());
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
    s.push_str(&format!("valid from:      {}\n", fmt_time(cert.not_before_unix_s())));
    s.push_str(&format!("valid to:        {}\n", fmt_time(cert.not_after_unix_s())));
    s.push_str(&format!("key:             RSA {} bits\n", cert.key_bits()));
    s.push_str(&format!("signature:       {:?}\n", cert.signature_alg()));
    s.push_str(&format!(
        "application uri: {}\n",
        cert.application_uri().unwrap_or("(none)")
    ));
    if !cert.dns_names().is_empty() {
        s.push_str(&format!("dns names:       {}\n", cert.dns_names().join(", ")));
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
        let _ = writeln!(err, "password longer than {} bytes", crate::user::PASSWORD_LEN_MAX);
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
