//! `open62541-history-server`: the `history_bench` contract (harness/src/history.rs, the
//! servers `uaring-bench`'s history scenarios run against) on open62541 1.5's own Historical
//! Access: its default history database (`UA_HistoryDatabase_default`) on its default
//! gathering and its in-memory backend (`UA_HistoryDataBackend_Memory`), as open62541's
//! history tutorial sets them up. For the side-by-side rows of
//! harness/benchmarks/history-peers.variants (`open62541-memory`).
//!
//! `open62541-history-server --listen HOST:PORT [--preload N] [--pattern count|slow|random]
//! [--variables N] [--max-response-values N] [--log-level L]`
//!
//! - Namespace `urn:uaring:example:history-bench`: a folder `s=History` organized under
//!   Objects, `s=History.V<i>` (i in 0..N, default 1) historized Doubles (Historizing true,
//!   AccessLevel CurrentRead | HistoryRead, initial value 0), each registered with the
//!   gathering (update strategy VALUESET: a Write of the value is stored too) on the one
//!   memory backend; `s=History.PreloadStart` (DateTime, the first pre-loaded source
//!   timestamp, 0 without a pre-load) and `s=History.PreloadCount` (UInt64).
//! - The benchmark contract's Int32 `ns=1;i=1001..1100` (the Read load of the contract).
//! - `--preload N`: before listening, N samples of `s=History.V0` at 1 Hz, ending on the whole
//!   minute at least an hour before the start (as the asyncua peer's), stored through the
//!   backend's own `serverSetHistoryData` — the function the gathering calls for every
//!   historized write — with the source timestamp set and the server timestamp left to the
//!   backend (it stores the source timestamp there). Not through the Write service: a write
//!   stamps the wall clock, and a series of a day at 1 Hz cannot be written live. Values by
//!   `--pattern`, as history_bench's: `count` the Double i of sample i; `slow` a level of
//!   0.01 resolution moving by −0.01, 0 or +0.01 a second within 0..=100 from 50; `random`
//!   uniform in [0, 1) (both from a fixed-seed generator: the harness checks the range, and
//!   the exact values only for `count`).
//! - `--max-response-values N` (default 100,000, uaring's own
//!   `operation_limits.max_history_values_per_node`): the node setting
//!   `maxHistoryDataResponseSize`, the most values of one HistoryRead answer (more come
//!   through continuation points). open62541 has no default: its tutorial uses 100, asyncua
//!   10,000.
//! - What open62541's default database serves: ReadRawModifiedDetails with isReadModified
//!   false (bounds, numValuesPerNode, continuation points) and HistoryUpdate's UpdateData and
//!   DeleteRawModified. readModified, readProcessed, readAtTime and readEvent are not set:
//!   the server answers those requests with a ServiceFault of `BadNotSupported` (uaring-bench:
//!   "HistoryRead answered with ServiceFault"), so the processed scenario is "not supported"
//!   for it. `--rate` (the ingest scenario) is refused:
//!   the contract's ingest needs the store's writer counters (`history-stats` lines), which
//!   the memory backend does not keep.
//! - Prints `listening on opc.tcp://HOST:PORT` once listening, then `history-preload
//!   samples=N pattern=P at=past seconds=S` (S: the time the pre-load took); SIGTERM/SIGINT
//!   stop it cleanly (exit code 0).
//!
//! One thread: open62541's event loop runs where it is started (the harness pins the process).

use std::ffi::{c_void, CString};
use std::time::Instant;

use clap::Parser;
use uaring_peer_open62541::historydata::*;
use uaring_peer_open62541::sys::*;
use uaring_peer_open62541::*;

/// The history_bench contract's namespace URI.
const NAMESPACE_URI: &str = "urn:uaring:example:history-bench";
/// One second in DateTime ticks (100 ns).
const SECOND: i64 = 10_000_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;

#[derive(Parser, Debug)]
#[command(
    name = "open62541-history-server",
    about = "The history_bench contract on open62541's default history database and memory backend",
    disable_version_flag = true
)]
struct Opts {
    /// HOST:PORT to listen on (open62541 needs a fixed port: not 0).
    #[arg(long)]
    listen: String,
    /// Samples of s=History.V0 at 1 Hz stored before listening.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    preload: u64,
    /// The pre-loaded values: count (sample i is i), slow (a 0.01 random walk in 0..=100),
    /// random (uniform in [0, 1)).
    #[arg(long, default_value = "count", value_parser = ["count", "slow", "random"])]
    pattern: String,
    /// Historized Double variables s=History.V0 … V<N-1>.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    variables: u32,
    /// The history_bench ingest (pushes a second per variable): refused, see the module's
    /// documentation.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// The most values of one HistoryRead answer per node (maxHistoryDataResponseSize).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_response_values: u64,
    /// open62541's log level: 1 trace, 2 debug, 3 info, 4 warning, 5 error, 6 fatal.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=6))]
    log_level: u32,
}

/// SplitMix64: a fixed-seed generator for the `slow` and `random` patterns.
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The values of the series, one a second.
struct Pattern {
    kind: String,
    rng: SplitMix,
    i: u64,
    /// `slow`: the level in hundredths, 0..=10,000.
    level: i64,
}

impl Pattern {
    fn new(kind: &str) -> Pattern {
        Pattern {
            kind: kind.to_string(),
            rng: SplitMix(1),
            i: 0,
            level: 5000,
        }
    }
}

impl Iterator for Pattern {
    type Item = f64;
    fn next(&mut self) -> Option<f64> {
        let x = match self.kind.as_str() {
            "slow" => {
                let x = self.level as f64 / 100.0;
                let step = (self.rng.next_u64() % 3) as i64 - 1;
                self.level = (self.level + step).clamp(0, 10_000);
                x
            }
            "random" => (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64,
            _ => self.i as f64,
        };
        self.i += 1;
        Some(x)
    }
}

unsafe fn configure(config: &mut UA_ServerConfig, host: &str, port: u16) -> Result<(), String> {
    check(
        "configuration",
        UA_ServerConfig_setMinimalCustomBuffer(config, port, std::ptr::null(), 0, 0),
    )?;
    listen_only_on(config, host, port)?;
    // Contract limits: messages up to 64 MiB (an answer of 100,000 values is about 2.6 MB).
    config.tcpMaxMsgSize = 64 << 20;
    config.maxNodesPerRead = 100_000;
    config.maxNodesPerWrite = 100_000;
    config.maxSecureChannels = 10_000;
    config.maxSessions = 10_000;
    Ok(())
}

/// Adds a variable `node` (copied) of `value` under `parent`; `access` its AccessLevel.
#[allow(clippy::too_many_arguments)]
unsafe fn add_variable(
    server: *mut UA_Server,
    ns: u16,
    parent: &UA_NodeId,
    node: &UA_NodeId,
    name: &str,
    value: *const c_void,
    type_index: u32,
    access: u32,
    historizing: bool,
) -> Result<(), String> {
    let locale = CString::new("en-US").unwrap();
    let cname = CString::new(name).unwrap();
    let mut attr = shallow(&UA_VariableAttributes_default);
    // addVariableNode copies the value: `attr.value` only points at the caller's.
    UA_Variant_setScalar(&mut attr.value, value as *mut c_void, data_type(type_index));
    attr.displayName = UA_LOCALIZEDTEXT(locale.as_ptr() as *mut _, cname.as_ptr() as *mut _);
    attr.dataType = shallow(&(*data_type(type_index)).typeId);
    attr.valueRank = UA_VALUERANK_SCALAR;
    attr.accessLevel = access as u8;
    attr.userAccessLevel = attr.accessLevel;
    attr.historizing = historizing;
    let rc = UA_Server_addVariableNode(
        server,
        shallow(node),
        shallow(parent),
        numeric(0, UA_NS0ID_ORGANIZES),
        UA_QUALIFIEDNAME(ns, cname.as_ptr() as *mut _),
        numeric(0, UA_NS0ID_BASEDATAVARIABLETYPE),
        attr,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    check(&format!("add {name}"), rc)
}

/// The folder `s=History` under Objects.
unsafe fn add_folder(server: *mut UA_Server, folder: &UA_NodeId, ns: u16) -> Result<(), String> {
    let locale = CString::new("en-US").unwrap();
    let name = CString::new("History").unwrap();
    let mut oattr = shallow(&UA_ObjectAttributes_default);
    oattr.displayName = UA_LOCALIZEDTEXT(locale.as_ptr() as *mut _, name.as_ptr() as *mut _);
    let rc = UA_Server_addObjectNode(
        server,
        shallow(folder),
        numeric(0, UA_NS0ID_OBJECTSFOLDER),
        numeric(0, UA_NS0ID_ORGANIZES),
        UA_QUALIFIEDNAME(ns, name.as_ptr() as *mut _),
        numeric(0, UA_NS0ID_FOLDERTYPE),
        oattr,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    check("add the folder s=History", rc)
}

/// Stores `n` samples of `pattern` at 1 Hz from `start` for `node` through the backend's
/// `serverSetHistoryData` (what the gathering calls for a historized write).
unsafe fn preload(
    server: *mut UA_Server,
    backend: &UA_HistoryDataBackend,
    node: &UA_NodeId,
    start: i64,
    n: u64,
    pattern: &str,
) -> Result<(), String> {
    let set = backend
        .serverSetHistoryData
        .ok_or("the memory backend has no serverSetHistoryData")?;
    for (i, mut x) in Pattern::new(pattern).take(n as usize).enumerate() {
        let mut dv: UA_DataValue = std::mem::zeroed();
        // The backend copies the DataValue: its value only points at `x`.
        UA_Variant_setScalar(
            &mut dv.value,
            &mut x as *mut f64 as *mut c_void,
            data_type(UA_TYPES_DOUBLE),
        );
        dv.set_hasValue(true);
        dv.sourceTimestamp = start + i as i64 * SECOND;
        dv.set_hasSourceTimestamp(true);
        let rc = set(
            server,
            backend.context,
            std::ptr::null(),
            std::ptr::null_mut(),
            node,
            true,
            &dv,
        );
        check(&format!("pre-load sample {i}"), rc)?;
    }
    Ok(())
}

/// What the server holds besides the configuration: the historized nodes and the backend
/// (freed after the server).
struct History {
    backend: UA_HistoryDataBackend,
    nodes: Vec<UA_NodeId>,
    preload_start: i64,
    preload_seconds: f64,
}

/// The address space of the contract and the pre-load; `gathering` is the one the server's
/// history database was made with (the same context).
unsafe fn build(
    server: *mut UA_Server,
    gathering: &UA_HistoryDataGathering,
    o: &Opts,
    history: &mut History,
) -> Result<(), String> {
    let uri = CString::new(NAMESPACE_URI).unwrap();
    let ns = UA_Server_addNamespace(server, uri.as_ptr());
    let mut folder = string_node(ns, "History");
    let r = build_in(server, gathering, o, history, ns, &folder);
    UA_NodeId_clear(&mut folder);
    r
}

unsafe fn build_in(
    server: *mut UA_Server,
    gathering: &UA_HistoryDataGathering,
    o: &Opts,
    history: &mut History,
    ns: u16,
    folder: &UA_NodeId,
) -> Result<(), String> {
    add_folder(server, folder, ns)?;
    let register = gathering
        .registerNodeId
        .ok_or("the gathering has no registerNodeId")?;
    for i in 0..o.variables {
        let node = string_node(ns, &format!("History.V{i}"));
        history.nodes.push(node);
        let node = history.nodes.last().unwrap();
        let zero = 0.0f64;
        add_variable(
            server,
            ns,
            folder,
            node,
            &format!("V{i}"),
            &zero as *const f64 as *const c_void,
            UA_TYPES_DOUBLE,
            UA_ACCESSLEVELMASK_READ | UA_ACCESSLEVELMASK_HISTORYREAD,
            true,
        )?;
        let setting = UA_HistorizingNodeIdSettings {
            historizingBackend: shallow(&history.backend),
            maxHistoryDataResponseSize: o.max_response_values as usize,
            historizingUpdateStrategy: UA_HistorizingUpdateStrategy::VALUESET,
            pollingInterval: 0,
            userContext: std::ptr::null_mut(),
        };
        check(
            &format!("register s=History.V{i}"),
            register(server, gathering.context, node, setting),
        )?;
    }
    let mut start = 0i64;
    if o.preload > 0 {
        let now = UA_DateTime_now();
        let end = now - now.rem_euclid(MINUTE) - HOUR;
        start = end - o.preload as i64 * SECOND;
        let t = Instant::now();
        preload(
            server,
            &history.backend,
            &history.nodes[0],
            start,
            o.preload,
            &o.pattern,
        )?;
        history.preload_seconds = t.elapsed().as_secs_f64();
    }
    history.preload_start = start;
    for (name, value, type_index) in [
        (
            "PreloadStart",
            &start as *const i64 as *const c_void,
            UA_TYPES_DATETIME,
        ),
        (
            "PreloadCount",
            &o.preload as *const u64 as *const c_void,
            UA_TYPES_UINT64,
        ),
    ] {
        let mut node = string_node(ns, &format!("History.{name}"));
        let r = add_variable(
            server,
            ns,
            folder,
            &node,
            name,
            value,
            type_index,
            UA_ACCESSLEVELMASK_READ,
            false,
        );
        UA_NodeId_clear(&mut node);
        r?;
    }
    add_contract_variables(server)
}

/// Reports a start-up failure and exits with code 2.
fn fail(e: String) -> ! {
    eprintln!("open62541-history-server: {e}");
    std::process::exit(2);
}

fn main() {
    let o = Opts::parse();
    if o.rate != 0.0 {
        fail("--rate (history-ingest) is not supported: open62541's memory backend keeps no writer counters".into());
    }
    let (host, port) = host_port(&o.listen).unwrap_or_else(|e| fail(e));
    stop_on_signals();
    // SAFETY: the open62541 API used as documented (its history tutorial's set-up): a zeroed
    // configuration is filled by the setters and given the default history database, which
    // owns the gathering (freed by the server's delete); the memory backend's store is shared
    // by the registered nodes' settings and freed after the server is deleted.
    let code = unsafe {
        let mut config: UA_ServerConfig = std::mem::zeroed();
        config.logging = UA_Log_Stdout_new(UA_LogLevel(o.log_level.clamp(1, 6) * 100));
        if let Err(e) = configure(&mut config, &host, port) {
            fail(e);
        }
        let backend = UA_HistoryDataBackend_Memory(o.variables as usize, o.preload.max(1) as usize);
        if let Err(e) = check_memory_backend(&backend) {
            fail(e);
        }
        let gathering = UA_HistoryDataGathering_Default(o.variables as usize);
        if let Err(e) = check_gathering(&gathering) {
            fail(e);
        }
        // The database takes the gathering (a bitwise copy: `gathering` keeps its context to
        // register the nodes with).
        config.historyDatabase = UA_HistoryDatabase_default(shallow(&gathering));
        if config.historyDatabase.context.is_null() || config.historyDatabase.readRaw.is_none() {
            fail("UA_HistoryDatabase_default failed".into());
        }
        let server = UA_Server_newWithConfig(&mut config);
        if server.is_null() {
            fail("UA_Server_newWithConfig failed".into());
        }
        let mut history = History {
            backend,
            nodes: Vec::new(),
            preload_start: 0,
            preload_seconds: 0.0,
        };
        let started = build(server, &gathering, &o, &mut history)
            .and_then(|_| check("startup", UA_Server_run_startup(server)));
        let code = match started {
            Err(e) => {
                eprintln!("open62541-history-server: {e}");
                2
            }
            Ok(()) => {
                println!("listening on opc.tcp://{host}:{port}");
                if o.preload > 0 {
                    println!(
                        "history-preload samples={} pattern={} at=past start_ticks={} seconds={:.3}",
                        o.preload, o.pattern, history.preload_start, history.preload_seconds
                    );
                }
                use std::io::Write;
                let _ = std::io::stdout().flush();
                serve_until_stopped(server);
                check("shutdown", UA_Server_run_shutdown(server))
                    .map(|_| 0)
                    .unwrap_or_else(|e| {
                        eprintln!("open62541-history-server: {e}");
                        1
                    })
            }
        };
        UA_Server_delete(server);
        UA_HistoryDataBackend_Memory_clear(&mut history.backend);
        for n in history.nodes.iter_mut() {
            UA_NodeId_clear(n);
        }
        code
    };
    std::process::exit(code);
}
