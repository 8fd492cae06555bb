//! `open62541-interop-client`: open62541's own client (the client of the public
//! benchmark suite) against a server that implements the benchmark contract:
//! connect, Read, Write (and a Write of the wrong type), Browse, disconnect —
//! with SecurityPolicy None or, secured (Sign/SignAndEncrypt), the policy of `--policy`:
//! Basic256Sha256 (default), ECC_nistP256, ECC_nistP384, ECC_brainpoolP256r1 or
//! ECC_brainpoolP384r1 (a fresh self-signed client certificate of the policy's type; the
//! server's certificate is accepted).
//!
//! With `--plant --variables N --rate HZ`, against a server of the plant contract instead
//! (the `plant` example of the `uaring` library, or `open62541-plant`): finds the namespace
//! `urn:uaring:example:plant` in the NamespaceArray; browses `s=Plant` for V0 … V<N-1>,
//! Setpoint, Pushes and Reset; reads `s=Plant.V0` and `s=Plant.Pushes`; subscribes to
//! `s=Plant.V1` (publishing interval 200 ms, sampling interval 0, queue size 100) for 3 s and
//! checks that at least 0.8 × 3 × HZ notifications came, each value after the initial one
//! exactly one more than the one before, none with the overflow bit; writes Setpoint 12.5
//! (Good) and 1000 (Bad_OutOfRange); calls `Plant.Reset` (Good, one UInt64 output).
//!
//! `--user NAME --password PW` logs in with a UserName token instead of anonymously (open62541
//! encrypts the password with the token policy: RSA-OAEP for Basic256Sha256, an
//! EccEncryptedSecret for the ECC policies); `--x509-user-cert FILE --x509-user-key FILE` with
//! an X.509 user token. `--subscribe` adds, in the benchmark contract, a
//! subscription on BenchmarkValue8: the initial value, then a data change after a Write.
//!
//! Prints one `ok …` line per check and exits 0, or prints what failed and
//! exits 1.

use std::ffi::{c_void, CString};
use std::time::{Duration, Instant};

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
#[command(
    name = "open62541-interop-client",
    about = "open62541's client against a benchmark-contract server",
    disable_version_flag = true
)]
struct Opts {
    /// Endpoint URL, e.g. opc.tcp://127.0.0.1:4840
    #[arg(long, required_unless_present = "reverse_port")]
    url: Option<String>,
    /// Reverse Connect instead of connecting: listen on 127.0.0.1:PORT for the server to
    /// dial in and send ReverseHello, then open the channel and session on that connection
    /// (the EndpointUrl of the ReverseHello is the one the client names). Waits 30 s.
    /// SecurityPolicy None only (see `connect`).
    #[arg(long, value_name = "PORT", conflicts_with = "url")]
    reverse_port: Option<u16>,
    /// Message security mode (policy Basic256Sha256 when secured).
    #[arg(long, value_enum, default_value_t = Mode::None)]
    security: Mode,
    /// The SecurityPolicy of a secured mode instead, by the name in its URI: Basic256Sha256
    /// (the default), ECC_nistP256, ECC_nistP384, ECC_brainpoolP256r1 or ECC_brainpoolP384r1.
    #[arg(long, value_name = "NAME", default_value = "Basic256Sha256", value_parser = ["Basic256Sha256", "ECC_nistP256", "ECC_nistP384", "ECC_brainpoolP256r1", "ECC_brainpoolP384r1"])]
    policy: String,
    /// Log in with a UserName token as NAME (with --password) instead of anonymously.
    #[arg(long, value_name = "NAME", requires = "password")]
    user: Option<String>,
    /// The password of --user.
    #[arg(long, value_name = "PW", requires = "user")]
    password: Option<String>,
    /// Log in with an X.509 user token instead: the user certificate in FILE (DER or PEM;
    /// an RSA key for Basic256Sha256, an EC key on the curve of an ECC policy), whose key
    /// (--x509-user-key) signs serverCertificate ‖ serverNonce.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "user",
        requires = "x509_user_key"
    )]
    x509_user_cert: Option<std::path::PathBuf>,
    /// The private key (PEM or DER) of --x509-user-cert.
    #[arg(long, value_name = "FILE", requires = "x509_user_cert")]
    x509_user_key: Option<std::path::PathBuf>,
    /// Benchmark contract: also subscribe to BenchmarkValue8 and wait for the data change a
    /// Write makes.
    #[arg(long, conflicts_with = "plant")]
    subscribe: bool,
    /// open62541's log level: 1 trace … 6 fatal.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=6))]
    log_level: u32,
    /// Check a server of the plant contract (namespace urn:uaring:example:plant) instead of
    /// the benchmark contract.
    #[arg(long, requires_all = ["variables", "rate"])]
    plant: bool,
    /// Plant mode: the server's variable count (s=Plant.V0 … V<N-1>; at least 2).
    #[arg(long, requires = "plant", value_parser = clap::value_parser!(u32).range(2..=10_000_000))]
    variables: Option<u32>,
    /// Plant mode: the server's pushes per second per variable.
    #[arg(long, requires = "plant", value_parser = positive_rate)]
    rate: Option<f64>,
}

fn positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e6 => Ok(v),
        Ok(_) => Err("must be a number > 0 and ≤ 1e6".into()),
        Err(e) => Err(e.to_string()),
    }
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
    if let (Some(user), Some(password)) = (&o.user, &o.password) {
        let user = CString::new(user.as_str()).map_err(|_| "user name with NUL")?;
        let password = CString::new(password.as_str()).map_err(|_| "password with NUL")?;
        check(
            "UserName authentication",
            UA_ClientConfig_setAuthenticationUsername(cfg, user.as_ptr(), password.as_ptr()),
        )?;
    }
    if o.security == Mode::None {
        cfg.securityMode = UA_MessageSecurityMode::UA_MESSAGESECURITYMODE_NONE;
        return Ok(());
    }
    #[cfg(feature = "mbedtls")]
    {
        let (cert, key) = self_signed(CLIENT_URI, "uaring interop open62541 client", KEY_BITS)?;
        // setDefaultEncryption takes the certificate and key by value and copies them.
        let rc = UA_ClientConfig_setDefaultEncryption(
            cfg,
            shallow(&cert),
            shallow(&key),
            std::ptr::null(),
            0,
            std::ptr::null(),
            0,
        );
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
        if o.policy != "Basic256Sha256" {
            let (cert, key) = ecc_self_signed(
                CLIENT_URI,
                "uaring interop open62541 client",
                ecc_curve(&o.policy)?,
            )?;
            add_ecc_policy(
                cfg.logging,
                &mut cfg.securityPolicies,
                &mut cfg.securityPoliciesSize,
                &o.policy,
                cert,
                key,
            )?;
        }
        if let (Some(cert), Some(key)) = (&o.x509_user_cert, &o.x509_user_key) {
            let read = |p: &std::path::Path| {
                std::fs::read(p)
                    .map(|b| ua_bytes(&b))
                    .map_err(|e| format!("{}: {e}", p.display()))
            };
            let (cert, key) = (read(cert)?, read(key)?);
            // The token, and the authentication policies (open62541's default set) with the
            // user's key: the legacy ECC policies are not among them, so the policy of
            // `--policy` is added with it.
            let rc = UA_ClientConfig_setAuthenticationCert(cfg, shallow(&cert), shallow(&key));
            if rc != 0 || o.policy == "Basic256Sha256" {
                free_bytes(cert);
                free_bytes(key);
                check("X.509 authentication", rc)?;
            } else {
                add_ecc_policy(
                    cfg.logging,
                    &mut cfg.authSecurityPolicies,
                    &mut cfg.authSecurityPoliciesSize,
                    &o.policy,
                    cert,
                    key,
                )?;
            }
        }
        UA_String_clear(&mut cfg.securityPolicyUri);
        cfg.securityPolicyUri = if o.policy == "Basic256Sha256" {
            ua_string(BASIC256SHA256)
        } else {
            ua_string(&format!(
                "http://opcfoundation.org/UA/SecurityPolicy#{}",
                o.policy
            ))
        };
        cfg.securityMode = match o.security {
            Mode::Sign => UA_MessageSecurityMode::UA_MESSAGESECURITYMODE_SIGN,
            _ => UA_MessageSecurityMode::UA_MESSAGESECURITYMODE_SIGNANDENCRYPT,
        };
        Ok(())
    }
    #[cfg(not(feature = "mbedtls"))]
    Err("secured modes need the `mbedtls` feature".into())
}

/// open62541's curve name of an ECC policy.
fn ecc_curve(policy: &str) -> Result<&'static str, String> {
    match policy {
        "ECC_nistP256" => Ok("nistp256"),
        "ECC_nistP384" => Ok("nistp384"),
        "ECC_brainpoolP256r1" => Ok("brainpoolP256r1"),
        "ECC_brainpoolP384r1" => Ok("brainpoolP384r1"),
        other => Err(format!("unknown policy {other}")),
    }
}

/// Adds open62541's ECC policy `name` (ECC_nistP256, …, ECC_brainpoolP384r1) with `cert` and `key`
/// (freed here) to one of the config's policy arrays (`securityPolicies`, or
/// `authSecurityPolicies` for an X.509 user): open62541's default encryption setup leaves
/// the (deprecated, non-AEAD) ECC policies out. The array is replaced by one a slot longer,
/// allocated by open62541 (UA_Array_new), that the config frees as its own.
#[cfg(feature = "mbedtls")]
unsafe fn add_ecc_policy(
    logging: *mut UA_Logger,
    policies: *mut *mut UA_SecurityPolicy,
    size: *mut usize,
    name: &str,
    cert: UA_ByteString,
    key: UA_ByteString,
) -> Result<(), String> {
    type MakePolicy = unsafe extern "C" fn(
        *mut UA_SecurityPolicy,
        UA_ApplicationType,
        UA_ByteString,
        UA_ByteString,
        *const UA_Logger,
    ) -> UA_StatusCode;
    let make: MakePolicy = match name {
        "ECC_nistP256" => UA_SecurityPolicy_EccNistP256,
        "ECC_nistP384" => UA_SecurityPolicy_EccNistP384,
        "ECC_brainpoolP256r1" => UA_SecurityPolicy_EccBrainpoolP256r1,
        "ECC_brainpoolP384r1" => UA_SecurityPolicy_EccBrainpoolP384r1,
        other => {
            free_bytes(cert);
            free_bytes(key);
            return Err(format!("unknown policy {other}"));
        }
    };
    let n = *size;
    let policy_bytes = std::mem::size_of::<UA_SecurityPolicy>();
    let grown =
        UA_Array_new((n + 1) * policy_bytes, data_type(UA_TYPES_BYTE)) as *mut UA_SecurityPolicy;
    if grown.is_null() {
        free_bytes(cert);
        free_bytes(key);
        return Err("out of memory".into());
    }
    // The policies move bitwise into the new array (no policy points at itself); the old
    // array is freed without clearing them.
    if n > 0 {
        std::ptr::copy_nonoverlapping(*policies, grown, n);
    }
    let rc = make(
        grown.add(n),
        UA_ApplicationType::UA_APPLICATIONTYPE_CLIENT,
        shallow(&cert),
        shallow(&key),
        logging,
    );
    free_bytes(cert);
    free_bytes(key);
    UA_Array_delete(*policies as *mut c_void, 0, data_type(UA_TYPES_BYTE));
    *policies = grown;
    *size = n;
    check(name, rc)?;
    *size = n + 1;
    Ok(())
}

/// Reads an Int32 value.
unsafe fn read_i32(c: *mut UA_Client, id: u32) -> Result<i32, String> {
    let mut v: UA_Variant = std::mem::zeroed();
    check(
        &format!("Read ns=1;i={id}"),
        UA_Client_readValueAttribute(c, numeric(1, id), &mut v),
    )?;
    let is_i32 =
        std::ptr::eq(v.type_, data_type(UA_TYPES_INT32)) && !v.data.is_null() && v.arrayLength == 0;
    let out = if is_i32 {
        Ok(*(v.data as *const i32))
    } else {
        Err(format!("Read ns=1;i={id}: not a scalar Int32"))
    };
    UA_Variant_clear(&mut v);
    out
}

unsafe fn write_scalar<T>(c: *mut UA_Client, id: u32, value: T, type_index: u32) -> UA_StatusCode {
    write_node(c, numeric(1, id), value, type_index)
}

/// Writes a scalar to the Value of `node` (a bitwise copy the call does not free); the
/// status of the write (the service result, else the result of the one write).
unsafe fn write_node<T>(
    c: *mut UA_Client,
    node: UA_NodeId,
    value: T,
    type_index: u32,
) -> UA_StatusCode {
    let mut v: UA_Variant = std::mem::zeroed();
    let rc = UA_Variant_setScalarCopy(
        &mut v,
        &value as *const T as *const std::ffi::c_void,
        data_type(type_index),
    );
    if rc != 0 {
        return rc;
    }
    let rc = UA_Client_writeValueAttribute(c, node, &v);
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
                names.push(
                    String::from_utf8_lossy(std::slice::from_raw_parts(n.data, n.length))
                        .into_owned(),
                );
            }
        }
        Ok(())
    })();
    UA_BrowseResponse_clear(&mut resp);
    result.map(|_| names)
}

/// Connects and activates a session: to `--url`, or over the connection a server dials in
/// with Reverse Connect (`--reverse-port`).
unsafe fn connect(c: *mut UA_Client, o: &Opts) -> Result<(), String> {
    let Some(port) = o.reverse_port else {
        let url = o.url.clone().unwrap_or_default();
        let curl = CString::new(url.clone()).map_err(|_| "URL with NUL")?;
        check("connect", UA_Client_connect(c, curl.as_ptr()))?;
        match (&o.user, &o.x509_user_cert) {
            (Some(user), _) => println!(
                "ok connect {url} ({:?} {}) as user {user}",
                o.security, o.policy
            ),
            (_, Some(_)) => println!(
                "ok connect {url} ({:?} {}) as an X.509 user",
                o.security, o.policy
            ),
            _ => println!("ok connect {url} ({:?})", o.security),
        }
        return Ok(());
    };
    if o.security != Mode::None {
        // open62541 1.5 opens a reverse connection's first channel with SecurityPolicy None
        // for GetEndpoints and then wants to reconnect with the endpoint it chose, which a
        // client that did not dial cannot do (it ends in BadTcpEndpointUrlInvalid); a
        // configured endpoint is not used on this path.
        return Err("reverse connect with open62541 1.5's client: SecurityPolicy None only".into());
    }
    let mut host = ua_string("127.0.0.1");
    let rc = UA_Client_startListeningForReverseConnect(c, &host, 1, port);
    UA_String_clear(&mut host);
    check("listen for reverse connect", rc)?;
    println!("ok listening for reverse connect on 127.0.0.1:{port}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        check("run_iterate", UA_Client_run_iterate(c, 50))?;
        let mut channel = UA_SecureChannelState::UA_SECURECHANNELSTATE_CLOSED;
        let mut session = UA_SessionState::UA_SESSIONSTATE_CLOSED;
        let mut status: UA_StatusCode = 0;
        UA_Client_getState(c, &mut channel, &mut session, &mut status);
        check("reverse connect", status)?;
        if session == UA_SessionState::UA_SESSIONSTATE_ACTIVATED {
            break;
        }
        if Instant::now() >= give_up {
            return Err(format!(
                "reverse connect: no activated session within 30 s (channel {channel:?}, session {session:?})"
            ));
        }
    }
    println!(
        "ok reverse connect: session activated on the server's connection ({:?})",
        o.security
    );
    Ok(())
}

/// A subscription on BenchmarkValue8 (publishing interval 100 ms, sampling interval 0): the
/// initial value 8 arrives, then a Write of 4343 arrives as a data change; the value is put
/// back and the subscription deleted. Waits at most 10 s for each (hang guards).
unsafe fn subscribe_contract(c: *mut UA_Client) -> Result<(), String> {
    let id = FIRST_NODE + 8;
    // Leaked: the client may call back into it until it is deleted, also after an error
    // here (the process ends soon after).
    let seen: *mut Seen = Box::leak(Box::<Seen>::default());
    let mut req = UA_CreateSubscriptionRequest_default();
    req.requestedPublishingInterval = 100.0;
    let mut sub = UA_Client_Subscriptions_create(c, req, std::ptr::null_mut(), None, None);
    let sub_rc = sub.responseHeader.serviceResult;
    let sub_id = sub.subscriptionId;
    UA_CreateSubscriptionResponse_clear(&mut sub);
    check("CreateSubscription", sub_rc)?;
    let mut item = UA_MonitoredItemCreateRequest_default(numeric(1, id));
    item.requestedParameters.samplingInterval = 0.0;
    item.requestedParameters.queueSize = 10;
    let mut mon = UA_Client_MonitoredItems_createDataChange(
        c,
        sub_id,
        UA_TimestampsToReturn::UA_TIMESTAMPSTORETURN_BOTH,
        item,
        void(seen),
        Some(on_data_change),
        None,
    );
    let mon_rc = mon.statusCode;
    UA_MonitoredItemCreateResult_clear(&mut mon);
    check(&format!("CreateMonitoredItems ns=1;i={id}"), mon_rc)?;
    let wait_for = |want: f64| -> Result<(), String> {
        let give_up = Instant::now() + Duration::from_secs(10);
        while !(*seen).0.iter().any(|n| n.value == Some(want)) {
            if Instant::now() >= give_up {
                let got: Vec<_> = (*seen).0.iter().map(|n| n.value).collect();
                return Err(format!(
                    "subscription: no notification of {want} within 10 s (got {got:?})"
                ));
            }
            check("run_iterate", UA_Client_run_iterate(c, 20))?;
        }
        Ok(())
    };
    wait_for(8.0)?;
    println!("ok subscribe: subscription {sub_id}, initial value of ns=1;i={id} is 8");
    check(
        "Write Int32 (subscribed)",
        write_scalar(c, id, 4343i32, UA_TYPES_INT32),
    )?;
    wait_for(4343.0)?;
    println!("ok data change: the Write of 4343 arrived as a notification");
    check(
        "Write Int32 (restore)",
        write_scalar(c, id, 8i32, UA_TYPES_INT32),
    )?;
    check(
        "DeleteSubscriptions",
        UA_Client_Subscriptions_deleteSingle(c, sub_id),
    )?;
    Ok(())
}

fn run(o: &Opts) -> Result<(), String> {
    // SAFETY: the open62541 client API used as documented, on one thread;
    // every value we get is cleared once.
    unsafe {
        let client = Client(UA_Client_new());
        configure(client.0, o)?;
        connect(client.0, o)?;
        for (id, want) in [
            (FIRST_NODE, 0),
            (FIRST_NODE + 42, 42),
            (FIRST_NODE + NODE_COUNT - 1, NODE_COUNT as i32 - 1),
        ] {
            let got = read_i32(client.0, id)?;
            if got != want {
                return Err(format!("Read ns=1;i={id}: {got}, the contract says {want}"));
            }
        }
        println!("ok read: BenchmarkValue0/42/99 hold their index");
        let id = FIRST_NODE + 7;
        check(
            "Write Int32",
            write_scalar(client.0, id, 4242i32, UA_TYPES_INT32),
        )?;
        let back = read_i32(client.0, id)?;
        if back != 4242 {
            return Err(format!("Read after Write: {back}, wrote 4242"));
        }
        check(
            "Write Int32 (restore)",
            write_scalar(client.0, id, 7i32, UA_TYPES_INT32),
        )?;
        println!("ok write: Int32 written and read back");
        let rc = write_scalar(client.0, id, 1.5f64, UA_TYPES_DOUBLE);
        if status_name(rc) != "BadTypeMismatch" {
            return Err(format!(
                "Write of a Double to an Int32 variable: {}, the contract says BadTypeMismatch",
                status_name(rc)
            ));
        }
        println!("ok write of the wrong type: BadTypeMismatch");
        let names = browse_objects(client.0)?;
        let bench = names
            .iter()
            .filter(|n| n.starts_with("BenchmarkValue"))
            .count();
        if bench != NODE_COUNT as usize {
            return Err(format!("Browse Objects: {bench} BenchmarkValue references in namespace 1, the contract says {NODE_COUNT}"));
        }
        println!("ok browse: {bench} BenchmarkValue variables under Objects");
        if o.subscribe {
            subscribe_contract(client.0)?;
        }
        check("disconnect", UA_Client_disconnect(client.0))?;
        println!("ok disconnect");
        Ok(())
    }
}

/// The plant contract's namespace URI.
const PLANT_NAMESPACE: &str = "urn:uaring:example:plant";
/// How long the plant mode collects notifications.
const SUBSCRIBE_FOR: Duration = Duration::from_secs(3);
/// The plant mode's subscription: publishing interval (ms) and the item's queue size.
const PUBLISHING_INTERVAL_MS: f64 = 200.0;
const QUEUE_SIZE: u32 = 100;
/// The InfoBits of a DataValue's status that say its queue overflowed (InfoType DataValue,
/// Overflow).
const OVERFLOW_BITS: u32 = 0x480;

/// A NodeId that owns its memory (a string NodeId's string), cleared on drop.
struct Node(UA_NodeId);

impl Node {
    fn string(ns: u16, s: &str) -> Node {
        let c = CString::new(s).expect("no NUL in node ids");
        // SAFETY: UA_NODEID_STRING_ALLOC copies the NUL-terminated string into a new NodeId.
        Node(unsafe { UA_NODEID_STRING_ALLOC(ns, c.as_ptr()) })
    }

    /// A bitwise copy for a call that takes a NodeId by value and does not free it.
    fn get(&self) -> UA_NodeId {
        shallow(&self.0)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // SAFETY: the NodeId owns its string; cleared once.
        unsafe { UA_NodeId_clear(&mut self.0) };
    }
}

/// A UA_String's bytes as text.
unsafe fn text(s: &UA_String) -> String {
    if s.data.is_null() || s.length == 0 {
        return String::new();
    }
    String::from_utf8_lossy(std::slice::from_raw_parts(s.data, s.length)).into_owned()
}

/// Reads the Value of `node` (a bitwise copy the call does not free): a scalar of the built-in
/// type `type_index`.
unsafe fn read_scalar<T: Copy>(
    c: *mut UA_Client,
    node: UA_NodeId,
    what: &str,
    type_index: u32,
    type_name: &str,
) -> Result<T, String> {
    let mut v: UA_Variant = std::mem::zeroed();
    check(
        &format!("Read {what}"),
        UA_Client_readValueAttribute(c, node, &mut v),
    )?;
    let ok =
        std::ptr::eq(v.type_, data_type(type_index)) && !v.data.is_null() && v.arrayLength == 0;
    let out = if ok {
        Ok(*(v.data as *const T))
    } else {
        Err(format!("Read {what}: not a scalar {type_name}"))
    };
    UA_Variant_clear(&mut v);
    out
}

/// The index of `uri` in the server's NamespaceArray (i=2255).
unsafe fn namespace_index(c: *mut UA_Client, uri: &str) -> Result<u16, String> {
    let mut v: UA_Variant = std::mem::zeroed();
    check(
        "Read NamespaceArray",
        UA_Client_readValueAttribute(c, numeric(0, UA_NS0ID_SERVER_NAMESPACEARRAY), &mut v),
    )?;
    let mut uris = Vec::new();
    let out = if std::ptr::eq(v.type_, data_type(UA_TYPES_STRING))
        && (v.arrayLength > 0 || v.data.is_null())
    {
        for i in 0..v.arrayLength {
            uris.push(text(&*(v.data as *const UA_String).add(i)));
        }
        match uris.iter().position(|u| u == uri) {
            Some(i) => u16::try_from(i).map_err(|_| format!("NamespaceArray: {uri} at index {i}")),
            None => Err(format!("NamespaceArray {uris:?} has no {uri}")),
        }
    } else {
        Err("Read NamespaceArray: not an array of String".into())
    };
    UA_Variant_clear(&mut v);
    out
}

/// The string identifiers of the targets in namespace `ns` of `node`'s forward references
/// (of every type), following continuation points.
unsafe fn browse_forward(c: *mut UA_Client, node: &Node, ns: u16) -> Result<Vec<String>, String> {
    let mut req: UA_BrowseRequest = std::mem::zeroed();
    let mut desc: UA_BrowseDescription = std::mem::zeroed();
    desc.nodeId = node.get();
    desc.browseDirection = UA_BrowseDirection::UA_BROWSEDIRECTION_FORWARD;
    // A null reference type: references of every type.
    desc.includeSubtypes = true;
    desc.resultMask = UA_BrowseResultMask::UA_BROWSERESULTMASK_ALL.0;
    req.nodesToBrowse = &mut desc;
    req.nodesToBrowseSize = 1;
    req.requestedMaxReferencesPerNode = 0;
    let mut resp = UA_Client_Service_browse(c, shallow(&req));
    let mut ids = Vec::new();
    let collect = |ids: &mut Vec<String>,
                   what: &str,
                   service: UA_StatusCode,
                   size: usize,
                   results: *mut UA_BrowseResult|
     -> Result<Option<UA_ByteString>, String> {
        check(what, service)?;
        if size != 1 {
            return Err(format!("{what}: {size} results for 1 node"));
        }
        let r = &*results;
        check(&format!("{what} result"), r.statusCode)?;
        for i in 0..r.referencesSize {
            let rd = &*r.references.add(i);
            let id = &rd.nodeId.nodeId;
            if rd.isForward
                && rd.nodeId.serverIndex == 0
                && id.namespaceIndex == ns
                && id.identifierType == UA_NodeIdType::UA_NODEIDTYPE_STRING
            {
                ids.push(text(id.identifier.string.as_ref()));
            }
        }
        // The continuation point, copied: it outlives the response.
        if r.continuationPoint.length == 0 {
            return Ok(None);
        }
        let mut cp: UA_ByteString = std::mem::zeroed();
        check(
            "copy a continuation point",
            UA_ByteString_copy(&r.continuationPoint, &mut cp),
        )?;
        Ok(Some(cp))
    };
    let mut next = collect(
        &mut ids,
        "Browse s=Plant",
        resp.responseHeader.serviceResult,
        resp.resultsSize,
        resp.results,
    );
    UA_BrowseResponse_clear(&mut resp);
    let mut rounds = 0;
    while let Ok(Some(mut cp)) = next {
        rounds += 1;
        if rounds > 10_000 {
            free_bytes(cp);
            return Err("BrowseNext: no end of continuation points".into());
        }
        let mut nreq: UA_BrowseNextRequest = std::mem::zeroed();
        nreq.releaseContinuationPoints = false;
        nreq.continuationPoints = &mut cp;
        nreq.continuationPointsSize = 1;
        let mut nresp = UA_Client_Service_browseNext(c, shallow(&nreq));
        next = collect(
            &mut ids,
            "BrowseNext s=Plant",
            nresp.responseHeader.serviceResult,
            nresp.resultsSize,
            nresp.results,
        );
        UA_BrowseNextResponse_clear(&mut nresp);
        UA_ByteString_clear(&mut cp);
    }
    next.map(|_| ids)
}

/// One data change notification as the callback saw it.
struct Notification {
    /// The value, when it is a scalar Double (or Int32, as a Double).
    value: Option<f64>,
    /// The DataValue's status (Good when it has none).
    status: UA_StatusCode,
}

/// The monitored item's context: what the callback collected.
#[derive(Default)]
struct Seen(Vec<Notification>);

unsafe extern "C" fn on_data_change(
    _client: *mut UA_Client,
    _sub_id: u32,
    _sub_context: *mut c_void,
    _mon_id: u32,
    mon_context: *mut c_void,
    value: *mut UA_DataValue,
) {
    if mon_context.is_null() || value.is_null() {
        return;
    }
    // SAFETY (the caller's): the context is the `Seen` registered with the item, alive until
    // the client is deleted; callbacks run on the client's thread, inside its calls.
    let seen = &mut *(mon_context as *mut Seen);
    let dv = &*value;
    let v = &dv.value;
    let scalar = dv.hasValue() && !v.data.is_null() && v.arrayLength == 0;
    let value = if scalar && std::ptr::eq(v.type_, data_type(UA_TYPES_DOUBLE)) {
        Some(*(v.data as *const f64))
    } else if scalar && std::ptr::eq(v.type_, data_type(UA_TYPES_INT32)) {
        Some(f64::from(*(v.data as *const i32)))
    } else {
        None
    };
    seen.0.push(Notification {
        value,
        status: if dv.hasStatus() { dv.status } else { 0 },
    });
}

/// Owns the `Seen` a monitored item writes into: declared before the client, so dropped
/// after it (no callback can come once the client is gone).
struct SeenBox(*mut Seen);

impl Drop for SeenBox {
    fn drop(&mut self) {
        // SAFETY: made by Box::into_raw and freed once, after the client.
        unsafe { drop(Box::from_raw(self.0)) };
    }
}

/// Checks the notifications of the item on s=Plant.V1: enough of them, each a Double with no
/// overflow bit, each after the initial one exactly one more than the one before.
fn check_notifications(seen: &[Notification], rate: f64, secs: f64) -> Result<String, String> {
    // Less a hair: 0.8 × 3 × 50 is 120.00000000000001 in binary floating point.
    let need = (0.8 * secs * rate - 1e-6).ceil().max(1.0) as usize;
    if seen.len() < need {
        return Err(format!(
            "subscription: {} notifications in {secs} s at {rate} Hz, want at least {need}",
            seen.len()
        ));
    }
    let mut values = Vec::with_capacity(seen.len());
    for (i, n) in seen.iter().enumerate() {
        if n.status & OVERFLOW_BITS != 0 {
            return Err(format!(
                "subscription: notification {i} has the overflow bit (status 0x{:08X})",
                n.status
            ));
        }
        match n.value {
            Some(v) => values.push(v),
            None => {
                return Err(format!(
                    "subscription: notification {i} holds no scalar Double (status {})",
                    status_name(n.status)
                ))
            }
        }
    }
    for (i, w) in values.windows(2).enumerate().skip(1) {
        if w[1] != w[0] + 1.0 {
            return Err(format!(
                "subscription: notification {} is {} after {} (want {}): a gap or out of order; values {:?}",
                i + 1,
                w[1],
                w[0],
                w[0] + 1.0,
                values
            ));
        }
    }
    Ok(format!(
        "{} notifications in {secs} s (need {need}), initial {}, then {} … {} in steps of 1, no overflow",
        values.len(),
        values[0],
        values.get(1).copied().unwrap_or(values[0]),
        values[values.len() - 1]
    ))
}

fn run_plant(o: &Opts) -> Result<(), String> {
    let (n, rate) = (
        o.variables.expect("clap requires --variables"),
        o.rate.expect("clap requires --rate"),
    );
    let seen = SeenBox(Box::into_raw(Box::<Seen>::default()));
    // SAFETY: the open62541 client API used as documented, on one thread; every value we get
    // is cleared once; the item's context (`seen`) outlives the client.
    unsafe {
        let client = Client(UA_Client_new());
        let c = client.0;
        configure(c, o)?;
        connect(c, o)?;

        let ns = namespace_index(c, PLANT_NAMESPACE)?;
        println!("ok namespace: {PLANT_NAMESPACE} is ns={ns}");

        let plant = Node::string(ns, "Plant");
        let ids = browse_forward(c, &plant, ns)?;
        let mut want: Vec<String> = (0..n).map(|i| format!("Plant.V{i}")).collect();
        want.extend(["Plant.Setpoint", "Plant.Pushes", "Plant.Reset"].map(String::from));
        let have: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
        let missing: Vec<&String> = want.iter().filter(|w| !have.contains(w.as_str())).collect();
        if !missing.is_empty() {
            let shown: Vec<_> = missing.iter().take(10).collect();
            return Err(format!("Browse s=Plant: {} of the contract's nodes missing among its forward references, e.g. {shown:?}", missing.len()));
        }
        println!("ok browse: s=Plant references V0 … V{}, Setpoint, Pushes and Reset ({} forward references into ns={ns})", n - 1, ids.len());

        let v0: f64 = read_scalar(
            c,
            Node::string(ns, "Plant.V0").get(),
            "s=Plant.V0",
            UA_TYPES_DOUBLE,
            "Double",
        )?;
        println!("ok read: s=Plant.V0 is the Double {v0}");
        let pushes: u64 = read_scalar(
            c,
            Node::string(ns, "Plant.Pushes").get(),
            "s=Plant.Pushes",
            UA_TYPES_UINT64,
            "UInt64",
        )?;
        println!("ok read: s=Plant.Pushes is the UInt64 {pushes}");

        // The subscription and its one item.
        let mut req = UA_CreateSubscriptionRequest_default();
        req.requestedPublishingInterval = PUBLISHING_INTERVAL_MS;
        let mut sub = UA_Client_Subscriptions_create(c, req, std::ptr::null_mut(), None, None);
        let sub_rc = sub.responseHeader.serviceResult;
        let (sub_id, revised_pi) = (sub.subscriptionId, sub.revisedPublishingInterval);
        UA_CreateSubscriptionResponse_clear(&mut sub);
        check("CreateSubscription", sub_rc)?;
        let v1 = Node::string(ns, "Plant.V1");
        let mut item = UA_MonitoredItemCreateRequest_default(v1.get());
        item.requestedParameters.samplingInterval = 0.0;
        item.requestedParameters.queueSize = QUEUE_SIZE;
        item.requestedParameters.discardOldest = true;
        let mut mon = UA_Client_MonitoredItems_createDataChange(
            c,
            sub_id,
            UA_TimestampsToReturn::UA_TIMESTAMPSTORETURN_BOTH,
            item, // a bitwise copy of `v1` inside: not freed by the call, `v1` frees it
            void(seen.0),
            Some(on_data_change),
            None,
        );
        let (mon_rc, revised_si, revised_qs) = (
            mon.statusCode,
            mon.revisedSamplingInterval,
            mon.revisedQueueSize,
        );
        UA_MonitoredItemCreateResult_clear(&mut mon);
        check("CreateMonitoredItems s=Plant.V1", mon_rc)?;
        println!(
            "ok subscribe: subscription {sub_id} (publishing interval {revised_pi} ms), item on s=Plant.V1 (sampling interval {revised_si} ms, queue size {revised_qs})"
        );
        let start = Instant::now();
        while start.elapsed() < SUBSCRIBE_FOR {
            check("run_iterate", UA_Client_run_iterate(c, 20))?;
        }
        let secs = SUBSCRIBE_FOR.as_secs_f64();
        let summary = check_notifications(&(*seen.0).0, rate, secs)?;
        println!("ok subscription: {summary}");
        check(
            "DeleteSubscriptions",
            UA_Client_Subscriptions_deleteSingle(c, sub_id),
        )?;
        println!("ok delete subscription {sub_id}");

        let setpoint = Node::string(ns, "Plant.Setpoint");
        check(
            "Write s=Plant.Setpoint 12.5",
            write_node(c, setpoint.get(), 12.5f64, UA_TYPES_DOUBLE),
        )?;
        println!("ok write Setpoint 12.5: Good");
        let rc = write_node(c, setpoint.get(), 1000.0f64, UA_TYPES_DOUBLE);
        if rc != UA_STATUSCODE_BADOUTOFRANGE {
            return Err(format!(
                "Write s=Plant.Setpoint 1000: {}, the contract says BadOutOfRange",
                status_name(rc)
            ));
        }
        let back: f64 = read_scalar(
            c,
            setpoint.get(),
            "s=Plant.Setpoint",
            UA_TYPES_DOUBLE,
            "Double",
        )?;
        if back != 12.5 {
            return Err(format!(
                "Read s=Plant.Setpoint after the refused write: {back}, want 12.5"
            ));
        }
        println!("ok write Setpoint 1000: BadOutOfRange (Setpoint still 12.5)");

        let reset = Node::string(ns, "Plant.Reset");
        let mut out_size = 0usize;
        let mut out: *mut UA_Variant = std::ptr::null_mut();
        check(
            "Call s=Plant.Reset",
            UA_Client_call(
                c,
                plant.get(),
                reset.get(),
                0,
                std::ptr::null(),
                &mut out_size,
                &mut out,
            ),
        )?;
        let result = if out_size != 1 || out.is_null() {
            Err(format!(
                "Call s=Plant.Reset: {out_size} output arguments, the contract says 1"
            ))
        } else {
            let v = &*out;
            if std::ptr::eq(v.type_, data_type(UA_TYPES_UINT64))
                && !v.data.is_null()
                && v.arrayLength == 0
            {
                Ok(*(v.data as *const u64))
            } else {
                Err("Call s=Plant.Reset: the output is not a scalar UInt64".into())
            }
        };
        UA_Array_delete(out as *mut c_void, out_size, data_type(UA_TYPES_VARIANT));
        println!("ok call Reset: Good, Pushes = {}", result?);

        check("disconnect", UA_Client_disconnect(c))?;
        println!("ok disconnect");
        Ok(())
    }
}

fn main() {
    let o = Opts::parse();
    let result = if o.plant { run_plant(&o) } else { run(&o) };
    if let Err(e) = result {
        eprintln!("open62541-interop-client: {e}");
        std::process::exit(1);
    }
}
