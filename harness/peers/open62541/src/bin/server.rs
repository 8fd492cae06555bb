//! `open62541-contract-server`: the benchmark contract (docs/Benchmarks.md, "The benchmark contract")
//! on a native open62541 1.5 server, built by cargo from `open62541-sys`.
//!
//! - 100 Int32 variables `ns=1;i=1001..1100`, BrowseName/DisplayName
//!   `BenchmarkValue<k>` (k = 0..99), initial value k, under Objects, readable
//!   and writable; a Write of another type is BadTypeMismatch (open62541
//!   checks the variable's DataType).
//! - `--counters N`: instead, N UInt64 counters `ns=1;i=1..N` whose value
//!   increments on each read (every sample of a monitored item reads it),
//!   minimum sampling interval 1 ms.
//! - ApplicationUri `urn:o6:benchmark:server`; `--secure` adds the
//!   Basic256Sha256 (and the other default) Sign/SignAndEncrypt endpoints
//!   with a fresh self-signed certificate, accepting any client certificate.
//! - Prints `listening on opc.tcp://127.0.0.1:PORT` and `benchmark server
//!   ready` once listening; SIGTERM/SIGINT stop it cleanly (exit code 0).
//!
//! One thread: open62541's event loop runs where it is started (the harness
//! pins the process).

use std::ffi::CString;

use clap::Parser;
use uaring_peer_open62541::sys::*;
use uaring_peer_open62541::*;

#[derive(Parser, Debug)]
#[command(
    name = "open62541-contract-server",
    about = "The benchmark contract on a native open62541 server",
    disable_version_flag = true
)]
struct Opts {
    /// TCP port (0 is not supported by open62541's configuration: pick one).
    #[arg(long, default_value_t = 4840)]
    port: u16,
    /// Capacity mode: N UInt64 counters ns=1;i=1..N instead of the Int32 variables.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    counters: Option<u32>,
    /// Also offer the secured endpoints (Basic256Sha256 … Sign and SignAndEncrypt).
    #[arg(long)]
    secure: bool,
    /// With --secure, also offer ECC_nistP256 and ECC_nistP384 (Sign and SignAndEncrypt),
    /// each with a fresh self-signed EC certificate of its curve.
    #[arg(long, requires = "secure")]
    ecc: bool,
    /// open62541's log level: 1 trace, 2 debug, 3 info, 4 warning, 5 error, 6 fatal.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=6))]
    log_level: u32,
}

/// The value source of a counter: each read (a client's Read or a sample
/// of a monitored item) returns the next value.
unsafe extern "C" fn read_counter(
    _server: *mut UA_Server,
    _session_id: *const UA_NodeId,
    _session_context: *mut std::ffi::c_void,
    _node_id: *const UA_NodeId,
    node_context: *mut std::ffi::c_void,
    include_source_timestamp: UA_Boolean,
    _range: *const UA_NumericRange,
    value: *mut UA_DataValue,
) -> UA_StatusCode {
    // SAFETY: node_context points at this node's u64 in the counters array,
    // which lives until the server is deleted; open62541 runs callbacks on
    // its one thread.
    let counter = &mut *(node_context as *mut u64);
    *counter += 1;
    let v = *counter;
    let rc = UA_Variant_setScalarCopy(
        &mut (*value).value,
        &v as *const u64 as *const std::ffi::c_void,
        data_type(UA_TYPES_UINT64),
    );
    if rc != 0 {
        return rc;
    }
    (*value).set_hasValue(true);
    if include_source_timestamp {
        (*value).sourceTimestamp = UA_DateTime_now();
        (*value).set_hasSourceTimestamp(true);
    }
    0
}

unsafe fn add_counters(server: *mut UA_Server, counters: &mut [u64]) -> Result<(), String> {
    let source = UA_CallbackValueSource {
        read: Some(read_counter),
        write: None,
    };
    for (i, c) in counters.iter_mut().enumerate() {
        let id = i as u32 + 1;
        let name = CString::new(format!("Counter{id}")).unwrap();
        let locale = CString::new("en-US").unwrap();
        let mut attr = shallow(&UA_VariableAttributes_default);
        attr.displayName = UA_LOCALIZEDTEXT(locale.as_ptr() as *mut _, name.as_ptr() as *mut _);
        attr.dataType = shallow(&(*data_type(UA_TYPES_UINT64)).typeId);
        attr.valueRank = UA_VALUERANK_SCALAR;
        attr.accessLevel = UA_ACCESSLEVELMASK_READ as u8;
        attr.userAccessLevel = attr.accessLevel;
        attr.minimumSamplingInterval = 1.0;
        let rc = UA_Server_addCallbackValueSourceVariableNode(
            server,
            numeric(1, id),
            numeric(0, UA_NS0ID_OBJECTSFOLDER),
            numeric(0, UA_NS0ID_ORGANIZES),
            UA_QUALIFIEDNAME(1, name.as_ptr() as *mut _),
            numeric(0, UA_NS0ID_BASEDATAVARIABLETYPE),
            attr,
            shallow(&source),
            c as *mut u64 as *mut std::ffi::c_void,
            std::ptr::null_mut(),
        );
        check(&format!("add Counter{id}"), rc)?;
    }
    Ok(())
}

/// Adds the ECC_nistP256 and ECC_nistP384 policies, each with an EC certificate of its
/// curve, and their Sign and SignAndEncrypt endpoints (open62541's secured default leaves the
/// ECC policies out).
#[cfg(feature = "mbedtls")]
unsafe fn add_ecc_endpoints(config: &mut UA_ServerConfig) -> Result<(), String> {
    type AddPolicy = unsafe extern "C" fn(
        *mut UA_ServerConfig,
        *const UA_ByteString,
        *const UA_ByteString,
    ) -> UA_StatusCode;
    let policies: [(&str, &str, AddPolicy); 2] = [
        (
            "ECC_nistP256",
            "nistp256",
            UA_ServerConfig_addSecurityPolicyEccNistP256,
        ),
        (
            "ECC_nistP384",
            "nistp384",
            UA_ServerConfig_addSecurityPolicyEccNistP384,
        ),
    ];
    for (name, curve, add) in policies {
        let (cert, key) = ecc_self_signed(APPLICATION_URI, "uaring benchmark open62541", curve)?;
        let rc = add(config, &cert, &key);
        free_bytes(cert);
        free_bytes(key);
        check(name, rc)?;
        for mode in [
            UA_MessageSecurityMode::UA_MESSAGESECURITYMODE_SIGN,
            UA_MessageSecurityMode::UA_MESSAGESECURITYMODE_SIGNANDENCRYPT,
        ] {
            // The endpoint copies the URI it is given (a shallow copy here, freed after).
            let mut uri = ua_string(&format!(
                "http://opcfoundation.org/UA/SecurityPolicy#{name}"
            ));
            let rc = UA_ServerConfig_addEndpoint(config, shallow(&uri), mode);
            UA_String_clear(&mut uri);
            check(&format!("{name} endpoint"), rc)?;
        }
    }
    Ok(())
}

unsafe fn configure(config: &mut UA_ServerConfig, o: &Opts) -> Result<(), String> {
    if o.secure {
        #[cfg(feature = "mbedtls")]
        {
            let (cert, key) = self_signed(APPLICATION_URI, "uaring benchmark open62541", KEY_BITS)?;
            let rc = UA_ServerConfig_setDefaultWithSecurityPolicies(
                config,
                o.port,
                &cert,
                &key,
                std::ptr::null(),
                0,
                std::ptr::null(),
                0,
                std::ptr::null(),
                0,
            );
            free_bytes(cert);
            free_bytes(key);
            check("secured configuration", rc)?;
            if o.ecc {
                add_ecc_endpoints(config)?;
            }
            // Accept any client certificate (benchmark contract).
            (config.secureChannelPKI.clear.ok_or("no PKI clear")?)(&mut config.secureChannelPKI);
            UA_CertificateGroup_AcceptAll(&mut config.secureChannelPKI);
            (config.sessionPKI.clear.ok_or("no PKI clear")?)(&mut config.sessionPKI);
            UA_CertificateGroup_AcceptAll(&mut config.sessionPKI);
        }
        #[cfg(not(feature = "mbedtls"))]
        return Err("--secure needs the `mbedtls` feature".into());
    } else {
        check(
            "configuration",
            UA_ServerConfig_setMinimalCustomBuffer(config, o.port, std::ptr::null(), 0, 0),
        )?;
    }
    UA_String_clear(&mut config.applicationDescription.applicationUri);
    config.applicationDescription.applicationUri = ua_string(APPLICATION_URI);
    // Contract limits: messages up to 64 MiB, 100,000 operations per request.
    config.tcpMaxMsgSize = 64 << 20;
    config.maxNodesPerRead = 100_000;
    config.maxNodesPerWrite = 100_000;
    config.maxNodesPerBrowse = 100_000;
    config.maxMonitoredItemsPerCall = 100_000;
    config.maxSecureChannels = 10_000;
    config.maxSessions = 10_000;
    // Sampling and publishing down to 1 ms (the counters contract).
    config.samplingIntervalLimits.min = 1.0;
    config.publishingIntervalLimits.min = 1.0;
    Ok(())
}

fn main() {
    let o = Opts::parse();
    stop_on_signals();
    let mut counters: Vec<u64> = vec![0; o.counters.unwrap_or(0) as usize];
    // SAFETY: the open62541 API used as documented: a zeroed configuration is
    // filled by the setters, moved into the server, which is deleted at the end;
    // `counters` outlives the server.
    let code = unsafe {
        let mut config: UA_ServerConfig = std::mem::zeroed();
        config.logging = UA_Log_Stdout_new(UA_LogLevel(o.log_level.clamp(1, 6) * 100));
        if let Err(e) = configure(&mut config, &o) {
            eprintln!("open62541-contract-server: {e}");
            std::process::exit(2);
        }
        let server = UA_Server_newWithConfig(&mut config);
        if server.is_null() {
            eprintln!("open62541-contract-server: UA_Server_newWithConfig failed");
            std::process::exit(2);
        }
        let added = match o.counters {
            Some(_) => add_counters(server, &mut counters),
            None => add_contract_variables(server),
        };
        let started = added.and_then(|_| check("startup", UA_Server_run_startup(server)));
        let code = match started {
            Err(e) => {
                eprintln!("open62541-contract-server: {e}");
                2
            }
            Ok(()) => {
                println!("listening on opc.tcp://127.0.0.1:{}", o.port);
                println!("benchmark server ready");
                use std::io::Write;
                let _ = std::io::stdout().flush();
                serve_until_stopped(server);
                check("shutdown", UA_Server_run_shutdown(server))
                    .map(|_| 0)
                    .unwrap_or_else(|e| {
                        eprintln!("open62541-contract-server: {e}");
                        1
                    })
            }
        };
        UA_Server_delete(server);
        code
    };
    drop(counters);
    std::process::exit(code);
}
