//! `open62541-interop-client`: open62541's own client (the client of the public
//! benchmark suite) against a server that implements the benchmark contract:
//! connect, Read, Write (and a Write of the wrong type), Browse, disconnect —
//! with SecurityPolicy None or Basic256Sha256 Sign/SignAndEncrypt (a fresh
//! self-signed client certificate; the server's certificate is accepted).
//!
//! Prints one `ok …` line per check and exits 0, or prints what failed and
//! exits 1.

use std::ffi::CString;

use clap::{Parser, ValueEnum};
use uaring_peer_open62541::sys::*;
use uaring_peer_open62541::*;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq)]
enum Mode {
    None,
    Sign,
    SignEncrypt,
}

#[derive(Parser, Debug)]
#[command(name = "open62541-interop-client", about = "open62541's client against a benchmark-contract server", disable_version_flag = true)]
struct Opts {
    /// Endpoint URL, e.g. opc.tcp://127.0.0.1:4840
    #[arg(long)]
    url: String,
    /// Message security mode (policy Basic256Sha256 when secured).
    #[arg(long, value_enum, default_value_t = Mode::None)]
    security: Mode,
    /// open62541's log level: 1 trace … 6 fatal.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=6))]
    log_level: u32,
}

struct Client(*mut UA_Client);

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: the client was created by UA_Client_new and is deleted once.
        unsafe { UA_Client_delete(self.0) };
    }
}

unsafe fn configure(c: *mut UA_Client, o: &Opts) -> Result<(), String> {
    let cfg = &mut *UA_Client_getConfig(c);
    cfg.logging = UA_Log_Stdout_new(UA_LogLevel(o.log_level * 100));
    check("client configuration", UA_ClientConfig_setDefault(cfg))?;
    // After setDefault, which installs its own stdout logger (left in place: the
    // process is short-lived).
    cfg.logging = UA_Log_Stdout_new(UA_LogLevel(o.log_level * 100));
    cfg.timeout = 10_000;
    if o.security == Mode::None {
        cfg.securityMode = UA_MessageSecurityMode::UA_MESSAGESECURITYMODE_NONE;
        return Ok(());
    }
    #[cfg(feature = "mbedtls")]
    {
        let (cert, key) = self_signed(CLIENT_URI, "uaring interop open62541 client", KEY_BITS)?;
        // setDefaultEncryption takes the certificate and key by value and copies them.
        let rc = UA_ClientConfig_setDefaultEncryption(cfg, shallow(&cert), shallow(&key), std::ptr::null(), 0, std::ptr::null(), 0);
        free_bytes(cert);
        free_bytes(key);
        check("client encryption", rc)?;
        // Accept the server's (self-signed) certificate.
        if let Some(clear) = cfg.certificateVerification.clear {
            clear(&mut cfg.certificateVerification);
        }
        UA_CertificateGroup_AcceptAll(&mut cfg.certificateVerification);
        UA_String_clear(&mut cfg.clientDescription.applicationUri);
        cfg.clientDescription.applicationUri = ua_string(CLIENT_URI);
        UA_String_clear(&mut cfg.securityPolicyUri);
        cfg.securityPolicyUri = ua_string(BASIC256SHA256);
        cfg.securityMode = match o.security {
            Mode::Sign => UA_MessageSecurityMode::UA_MESSAGESECURITYMODE_SIGN,
            _ => UA_MessageSecurityMode::UA_MESSAGESECURITYMODE_SIGNANDENCRYPT,
        };
        Ok(())
    }
    #[cfg(not(feature = "mbedtls"))]
    Err("secured modes need the `mbedtls` feature".into())
}

/// Reads an Int32 value.
unsafe fn read_i32(c: *mut UA_Client, id: u32) -> Result<i32, String> {
    let mut v: UA_Variant = std::mem::zeroed();
    check(&format!("Read ns=1;i={id}"), UA_Client_readValueAttribute(c, numeric(1, id), &mut v))?;
    let is_i32 = std::ptr::eq(v.type_, data_type(UA_TYPES_INT32)) && !v.data.is_null() && v.arrayLength == 0;
    let out = if is_i32 { Ok(*(v.data as *const i32)) } else { Err(format!("Read ns=1;i={id}: not a scalar Int32")) };
    UA_Variant_clear(&mut v);
    out
}

unsafe fn write_scalar<T>(c: *mut UA_Client, id: u32, value: T, type_index: u32) -> UA_StatusCode {
    let mut v: UA_Variant = std::mem::zeroed();
    let rc = UA_Variant_setScalarCopy(&mut v, &value as *const T as *const std::ffi::c_void, data_type(type_index));
    if rc != 0 {
        return rc;
    }
    let rc = UA_Client_writeValueAttribute(c, numeric(1, id), &v);
    UA_Variant_clear(&mut v);
    rc
}

/// Browse of Objects' hierarchical references: the BrowseNames in namespace 1.
unsafe fn browse_objects(c: *mut UA_Client) -> Result<Vec<String>, String> {
    let mut req: UA_BrowseRequest = std::mem::zeroed();
    let mut desc: UA_BrowseDescription = std::mem::zeroed();
    desc.nodeId = numeric(0, UA_NS0ID_OBJECTSFOLDER);
    desc.browseDirection = UA_BrowseDirection::UA_BROWSEDIRECTION_FORWARD;
    desc.referenceTypeId = numeric(0, UA_NS0ID_HIERARCHICALREFERENCES);
    desc.includeSubtypes = true;
    desc.resultMask = UA_BrowseResultMask::UA_BROWSERESULTMASK_ALL.0;
    req.nodesToBrowse = &mut desc;
    req.nodesToBrowseSize = 1;
    req.requestedMaxReferencesPerNode = 0;
    let mut resp = UA_Client_Service_browse(c, shallow(&req));
    let mut names = Vec::new();
    let result = (|| {
        check("Browse", resp.responseHeader.serviceResult)?;
        if resp.resultsSize != 1 {
            return Err(format!("Browse: {} results for 1 node", resp.resultsSize));
        }
        let r = &*resp.results;
        check("Browse result", r.statusCode)?;
        for i in 0..r.referencesSize {
            let rd = &*r.references.add(i);
            if rd.browseName.namespaceIndex == 1 {
                let n = &rd.browseName.name;
                names.push(String::from_utf8_lossy(std::slice::from_raw_parts(n.data, n.length)).into_owned());
            }
        }
        Ok(())
    })();
    UA_BrowseResponse_clear(&mut resp);
    result.map(|_| names)
}

fn run(o: &Opts) -> Result<(), String> {
    // SAFETY: the open62541 client API used as documented, on one thread;
    // every value we get is cleared once.
    unsafe {
        let client = Client(UA_Client_new());
        configure(client.0, o)?;
        let url = CString::new(o.url.clone()).map_err(|_| "URL with NUL")?;
        check("connect", UA_Client_connect(client.0, url.as_ptr()))?;
        println!("ok connect {} ({:?})", o.url, o.security);
        for (id, want) in [(FIRST_NODE, 0), (FIRST_NODE + 42, 42), (FIRST_NODE + NODE_COUNT - 1, NODE_COUNT as i32 - 1)] {
            let got = read_i32(client.0, id)?;
            if got != want {
                return Err(format!("Read ns=1;i={id}: {got}, the contract says {want}"));
            }
        }
        println!("ok read: BenchmarkValue0/42/99 hold their index");
        let id = FIRST_NODE + 7;
        check("Write Int32", write_scalar(client.0, id, 4242i32, UA_TYPES_INT32))?;
        let back = read_i32(client.0, id)?;
        if back != 4242 {
            return Err(format!("Read after Write: {back}, wrote 4242"));
        }
        check("Write Int32 (restore)", write_scalar(client.0, id, 7i32, UA_TYPES_INT32))?;
        println!("ok write: Int32 written and read back");
        let rc = write_scalar(client.0, id, 1.5f64, UA_TYPES_DOUBLE);
        if status_name(rc) != "BadTypeMismatch" {
            return Err(format!("Write of a Double to an Int32 variable: {}, the contract says BadTypeMismatch", status_name(rc)));
        }
        println!("ok write of the wrong type: BadTypeMismatch");
        let names = browse_objects(client.0)?;
        let bench = names.iter().filter(|n| n.starts_with("BenchmarkValue")).count();
        if bench != NODE_COUNT as usize {
            return Err(format!("Browse Objects: {bench} BenchmarkValue references in namespace 1, the contract says {NODE_COUNT}"));
        }
        println!("ok browse: {bench} BenchmarkValue variables under Objects");
        check("disconnect", UA_Client_disconnect(client.0))?;
        println!("ok disconnect");
        Ok(())
    }
}

fn main() {
    let o = Opts::parse();
    if let Err(e) = run(&o) {
        eprintln!("open62541-interop-client: {e}");
        std::process::exit(1);
    }
}
