//! Native open62541 peers for `uaring-bench`, on the `open62541-sys` crate
//! (open62541 1.5.x built by cmake, Mbed TLS with the `mbedtls` feature).
//!
//! - `open62541-contract-server`: the benchmark contract of DESIGN.md on a
//!   native open62541 server (our own code around the C library).
//! - `open62541-plant`: the plant contract (values pushed by an application
//!   thread, `uaring-bench run --scenario push`) on a native open62541 server.
//! - `open62541-interop-client`: open62541's client against any server
//!   (connect, read, write, browse; None and Basic256Sha256 SignAndEncrypt), or with
//!   `--plant` a server of the plant contract (browse, read, a subscription, write, call).
//! - `open62541-history-server`: the `history_bench` contract (uaring-bench's history
//!   scenarios) on open62541's own history: its default history database and in-memory
//!   backend ([`historydata`] declares them).
//!
//! This module holds the small safe helpers they share.

use std::ffi::{c_void, CStr, CString};

pub use open62541_sys as sys;
use sys::*;

pub mod historydata;

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop_signal(_sig: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Makes SIGTERM and SIGINT end [`serve_until_stopped`] (every peer server stops cleanly on
/// them, exit code 0).
pub fn stop_on_signals() {
    // SAFETY: installing async-signal-safe handlers (an atomic store).
    unsafe {
        libc::signal(
            libc::SIGTERM,
            on_stop_signal as *const () as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGINT,
            on_stop_signal as *const () as libc::sighandler_t,
        );
    }
}

/// Runs `server`'s event loop until SIGTERM or SIGINT ([`stop_on_signals`]).
///
/// # Safety
/// `server` is a server that `UA_Server_run_startup` started and that nothing deletes
/// meanwhile.
pub unsafe fn serve_until_stopped(server: *mut UA_Server) {
    while !STOP.load(std::sync::atomic::Ordering::SeqCst) {
        // SAFETY: as the caller promises.
        unsafe { UA_Server_run_iterate(server, true) };
    }
}

/// The contract's application URI.
pub const APPLICATION_URI: &str = "urn:o6:benchmark:server";
/// The client's application URI (in its certificate too).
pub const CLIENT_URI: &str = "urn:uaring:open62541:client";
pub const BASIC256SHA256: &str = "http://opcfoundation.org/UA/SecurityPolicy#Basic256Sha256";
/// First NodeId and count of the contract's Int32 variables.
pub const FIRST_NODE: u32 = 1001;
pub const NODE_COUNT: u32 = 100;

/// The name of a status code (`BadTypeMismatch` …).
pub fn status_name(s: UA_StatusCode) -> String {
    // SAFETY: UA_StatusCode_name returns a static NUL-terminated string.
    unsafe {
        CStr::from_ptr(UA_StatusCode_name(s))
            .to_string_lossy()
            .into_owned()
    }
}

pub fn check(what: &str, s: UA_StatusCode) -> Result<(), String> {
    if s == 0 {
        Ok(())
    } else {
        Err(format!("{what}: {}", status_name(s)))
    }
}

/// A UA_String that owns a copy of `s` (freed by the caller with UA_String_clear
/// or by the structure it is moved into).
pub fn ua_string(s: &str) -> UA_String {
    let c = CString::new(s).expect("no NUL in strings");
    // SAFETY: copies the NUL-terminated string into a new UA_String.
    unsafe { UA_String_fromChars(c.as_ptr()) }
}

/// A UA_ByteString holding a copy of `data` (heap memory of open62541).
pub fn ua_bytes(data: &[u8]) -> UA_ByteString {
    // SAFETY: a zeroed UA_ByteString is the empty string; allocBuffer then
    // gives it `data.len()` bytes which we fill.
    unsafe {
        let mut b: UA_ByteString = std::mem::zeroed();
        if !data.is_empty() {
            let rc = UA_ByteString_allocBuffer(&mut b, data.len());
            assert_eq!(rc, 0, "out of memory");
            std::ptr::copy_nonoverlapping(data.as_ptr(), b.data, data.len());
        }
        b
    }
}

pub fn numeric(ns: u16, id: u32) -> UA_NodeId {
    // SAFETY: builds a numeric NodeId by value (no memory involved).
    unsafe { UA_NODEID_NUMERIC(ns, id) }
}

/// The UA_DataType of `UA_TYPES[index]`.
pub fn data_type(index: u32) -> *const UA_DataType {
    // SAFETY: UA_TYPES is the static array of built-in types; index is one of
    // the UA_TYPES_* constants.
    unsafe {
        std::ptr::addr_of!(UA_TYPES)
            .cast::<UA_DataType>()
            .add(index as usize)
    }
}

/// The RSA key size of the peers' certificates: uaring's own (`uaring cert generate`, and the
/// benchmark client's) is 2048 bits, and open62541's plug-in would pick 4096 by default, which
/// makes every private-key operation about seven times dearer: a comparison of session
/// establishment needs the same size on both sides.
pub const KEY_BITS: u16 = 2048;

/// A self-signed application certificate and its private key (DER) with a key of `key_bits`,
/// made by open62541's own certificate plug-in (Mbed TLS).
#[cfg(feature = "mbedtls")]
pub fn self_signed(
    uri: &str,
    common_name: &str,
    key_bits: u16,
) -> Result<(UA_ByteString, UA_ByteString), String> {
    // SAFETY: the parameter map copies the key size it is given; `self_signed_with` clears it.
    unsafe {
        let mut params: UA_KeyValueMap = std::mem::zeroed();
        let name = CString::new("key-size-bits").expect("no NUL");
        let rc = UA_KeyValueMap_setScalar(
            &mut params,
            UA_QUALIFIEDNAME(0, name.as_ptr() as *mut std::ffi::c_char),
            &key_bits as *const u16 as *const c_void,
            data_type(UA_TYPES_UINT16),
        );
        if let Err(e) = check("key-size-bits", rc) {
            UA_KeyValueMap_clear(&mut params);
            return Err(e);
        }
        self_signed_with(uri, common_name, params)
    }
}

/// A self-signed EC application certificate (DER) and key of open62541's plug-in for `uri`
/// and `common_name` on `curve` (`nistp256`, `nistp384`).
#[cfg(feature = "mbedtls")]
pub fn ecc_self_signed(
    uri: &str,
    common_name: &str,
    curve: &str,
) -> Result<(UA_ByteString, UA_ByteString), String> {
    // SAFETY: the parameter map copies the values it is given (each cleared here after);
    // `self_signed_with` clears the map.
    unsafe {
        let mut params: UA_KeyValueMap = std::mem::zeroed();
        for (k, v) in [("key-type", "ec"), ("ecc-curve", curve)] {
            let key = CString::new(k).expect("no NUL");
            let mut value = ua_string(v);
            let rc = UA_KeyValueMap_setScalar(
                &mut params,
                UA_QUALIFIEDNAME(0, key.as_ptr() as *mut std::ffi::c_char),
                &value as *const UA_String as *const c_void,
                data_type(UA_TYPES_STRING),
            );
            UA_String_clear(&mut value);
            if let Err(e) = check(k, rc) {
                UA_KeyValueMap_clear(&mut params);
                return Err(e);
            }
        }
        self_signed_with(uri, common_name, params)
    }
}

/// A self-signed certificate and key (DER) of open62541's certificate plug-in for `uri` and
/// `common_name`, with the plug-in's parameters `params` (key size, key type, curve), which
/// it clears.
///
/// # Safety
/// `params` must be a map made by open62541's `UA_KeyValueMap_*` functions.
#[cfg(feature = "mbedtls")]
pub unsafe fn self_signed_with(
    uri: &str,
    common_name: &str,
    mut params: UA_KeyValueMap,
) -> Result<(UA_ByteString, UA_ByteString), String> {
    // SAFETY: the subject and SAN arrays are UA_Strings owned here and cleared after the call;
    // the outputs are initialised ByteStrings.
    unsafe {
        let mut subject = [
            ua_string("C=DE"),
            ua_string("O=uaring"),
            ua_string(&format!("CN={common_name}")),
        ];
        let mut san = [ua_string(&format!("URI:{uri}")), ua_string("DNS:localhost")];
        let mut key: UA_ByteString = std::mem::zeroed();
        let mut cert: UA_ByteString = std::mem::zeroed();
        let rc = UA_CreateCertificate(
            UA_Log_Stdout,
            subject.as_ptr(),
            subject.len(),
            san.as_ptr(),
            san.len(),
            UA_CertificateFormat::UA_CERTIFICATEFORMAT_DER,
            &mut params,
            &mut key,
            &mut cert,
        );
        UA_KeyValueMap_clear(&mut params);
        for s in subject.iter_mut().chain(san.iter_mut()) {
            UA_String_clear(s);
        }
        check("UA_CreateCertificate", rc)?;
        Ok((cert, key))
    }
}

/// Frees a UA_ByteString's memory.
pub fn free_bytes(mut b: UA_ByteString) {
    // SAFETY: b was allocated by open62541.
    unsafe { UA_ByteString_clear(&mut b) };
}

/// A bitwise copy of a C structure (C's struct assignment): the copy shares
/// any heap memory with the original, so exactly one of them may be cleared.
pub fn shallow<T>(v: &T) -> T {
    // SAFETY: reads a valid, initialised T; ownership rules are the caller's (see above).
    unsafe { std::ptr::read(v) }
}

/// `ptr` as a `*mut c_void` (for open62541's void* APIs).
pub fn void<T>(ptr: *const T) -> *mut c_void {
    ptr as *mut c_void
}

/// `HOST:PORT` of a `--listen` option; open62541's configuration needs a fixed port (not 0),
/// and a host (`[::1]` or `::1` for IPv6).
pub fn host_port(listen: &str) -> Result<(String, u16), String> {
    let (host, port) = listen
        .rsplit_once(':')
        .ok_or_else(|| format!("--listen {listen:?}: HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("--listen {listen:?}: bad port"))?;
    if port == 0 {
        return Err(format!(
            "--listen {listen:?}: open62541's configuration needs a fixed port, not 0"
        ));
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("--listen {listen:?}: no host"));
    }
    Ok((host.to_string(), port))
}

/// Makes the server listen on `host` only: the server URLs replace the default
/// `opc.tcp://:PORT` (every interface) that `UA_ServerConfig_setMinimal…` sets.
///
/// # Safety
/// `config` must be a configuration filled by open62541's setters.
pub unsafe fn listen_only_on(
    config: &mut UA_ServerConfig,
    host: &str,
    port: u16,
) -> Result<(), String> {
    // SAFETY: the URL array is open62541's (freed and replaced by one of its allocation).
    unsafe {
        UA_Array_delete(
            config.serverUrls as *mut c_void,
            config.serverUrlsSize,
            data_type(UA_TYPES_STRING),
        );
        config.serverUrls = std::ptr::null_mut();
        config.serverUrlsSize = 0;
        let urls = UA_Array_new(1, data_type(UA_TYPES_STRING)) as *mut UA_String;
        if urls.is_null() {
            return Err("out of memory".into());
        }
        *urls = ua_string(&format!("opc.tcp://{host}:{port}"));
        config.serverUrls = urls;
        config.serverUrlsSize = 1;
    }
    Ok(())
}

/// A string NodeId owning a copy of `s` (cleared by the caller with UA_NodeId_clear).
pub fn string_node(ns: u16, s: &str) -> UA_NodeId {
    let c = CString::new(s).expect("no NUL in node ids");
    // SAFETY: UA_NODEID_STRING_ALLOC copies the NUL-terminated string into a new NodeId.
    unsafe { UA_NODEID_STRING_ALLOC(ns, c.as_ptr()) }
}

/// The benchmark contract's 100 Int32 variables `ns=1;i=1001..1100` (`BenchmarkValue<k>`,
/// initial value k, readable and writable) under Objects.
///
/// # Safety
/// `server` must be a live open62541 server.
pub unsafe fn add_contract_variables(server: *mut UA_Server) -> Result<(), String> {
    for k in 0..NODE_COUNT {
        let name = CString::new(format!("BenchmarkValue{k}")).unwrap();
        let locale = CString::new("en-US").unwrap();
        // SAFETY: the attributes' value is a copy owned here (cleared after the call, which
        // copies it into the node); the strings outlive the call.
        unsafe {
            let mut attr = shallow(&UA_VariableAttributes_default);
            let v: i32 = k as i32;
            check(
                "Variant",
                UA_Variant_setScalarCopy(
                    &mut attr.value,
                    &v as *const i32 as *const c_void,
                    data_type(UA_TYPES_INT32),
                ),
            )?;
            attr.displayName = UA_LOCALIZEDTEXT(locale.as_ptr() as *mut _, name.as_ptr() as *mut _);
            attr.dataType = shallow(&(*data_type(UA_TYPES_INT32)).typeId);
            attr.valueRank = UA_VALUERANK_SCALAR;
            attr.accessLevel = (UA_ACCESSLEVELMASK_READ | UA_ACCESSLEVELMASK_WRITE) as u8;
            attr.userAccessLevel = attr.accessLevel;
            let rc = UA_Server_addVariableNode(
                server,
                numeric(1, FIRST_NODE + k),
                numeric(0, UA_NS0ID_OBJECTSFOLDER),
                numeric(0, UA_NS0ID_ORGANIZES),
                UA_QUALIFIEDNAME(1, name.as_ptr() as *mut _),
                numeric(0, UA_NS0ID_BASEDATAVARIABLETYPE),
                shallow(&attr),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            UA_Variant_clear(&mut attr.value);
            check(&format!("add BenchmarkValue{k}"), rc)?;
        }
    }
    Ok(())
}
