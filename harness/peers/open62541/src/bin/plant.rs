//! `open62541-plant`: the plant contract (values an application pushes, `uaring-bench run
//! --scenario push`) on a native open62541 1.5 server, built by cargo from `open62541-sys`.
//!
//! - `open62541-plant --listen HOST:PORT --variables N --rate HZ`;
//! - namespace `urn:uaring:example:plant`; a folder `s=Plant` organized under Objects holding
//!   N readable Double variables `s=Plant.V<i>` (i in 0..N), initial value 0.0;
//! - one thread named `push` pushes every variable HZ times a second on absolute deadlines
//!   (CLOCK_MONOTONIC): the k-th push (k = 1, 2, …) writes the Double k with
//!   `UA_Server_writeValue`, which stamps the SourceTimestamp with the wall clock of the write
//!   (open62541 fills a missing source timestamp with `UA_DateTime_now()`; a monitored item of
//!   sampling interval 0 samples inside the write);
//! - prints `listening on opc.tcp://HOST:PORT` once listening; SIGTERM/SIGINT stop it cleanly
//!   (exit code 0), and `push: …` on stderr says how many rounds were late.
//!
//! Threads: open62541's event loop runs on the main thread; the `push` thread calls
//! `UA_Server_writeValue` concurrently. That is only allowed because open62541-sys builds
//! open62541 with `UA_MULTITHREADING = 100` (the CMake default on POSIX): every public
//! `UA_THREADSAFE` function, `UA_Server_writeValue` among them, takes the server's service
//! mutex itself (`lockServer` → `UA_LOCK(&server->serviceMutex)`), so the push thread must
//! not (and cannot: `UA_LOCK` is internal) lock around it. The assertion below stops the build
//! should a future open62541-sys build it without multithreading; the writes would then have to
//! run on the server's own loop from a repeated callback instead, with no `push` thread.
//!
//! Limits for the contract: sampling intervals down to 0 (exception-based items: open62541
//! attaches an item of sampling interval 0 to the node and samples it on every write),
//! publishing intervals down to 1 ms, monitored-item queues up to 100,000 entries.

use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Parser;
use uaring_peer_open62541::sys::*;
use uaring_peer_open62541::*;

const _: () = assert!(
    UA_MULTITHREADING >= 100,
    "the push thread needs open62541's thread-safe API (UA_MULTITHREADING >= 100)"
);

/// The plant contract's namespace URI.
const NAMESPACE_URI: &str = "urn:uaring:example:plant";

#[derive(Parser, Debug)]
#[command(
    name = "open62541-plant",
    about = "The plant contract (pushed values) on a native open62541 server",
    disable_version_flag = true
)]
struct Opts {
    /// HOST:PORT to listen on (open62541 needs a fixed port: not 0).
    #[arg(long)]
    listen: String,
    /// Double variables s=Plant.V0 … V<N-1>.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    variables: u32,
    /// Pushes per second per variable.
    #[arg(long, value_parser = positive_rate)]
    rate: f64,
    /// open62541's log level: 1 trace, 2 debug, 3 info, 4 warning, 5 error, 6 fatal.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=6))]
    log_level: u32,
}

fn positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e6 => Ok(v),
        Ok(_) => Err("must be a number > 0 and ≤ 1e6".into()),
        Err(e) => Err(e.to_string()),
    }
}

unsafe fn configure(config: &mut UA_ServerConfig, host: &str, port: u16) -> Result<(), String> {
    check(
        "configuration",
        UA_ServerConfig_setMinimalCustomBuffer(config, port, std::ptr::null(), 0, 0),
    )?;
    listen_only_on(config, host, port)?;
    config.maxMonitoredItemsPerCall = 100_000;
    config.maxSecureChannels = 10_000;
    config.maxSessions = 10_000;
    config.samplingIntervalLimits.min = 0.0;
    config.publishingIntervalLimits.min = 1.0;
    config.queueSizeLimits.max = 100_000;
    Ok(())
}

/// The folder `s=Plant` under Objects and the variables `s=Plant.V<i>` in it; their NodeIds.
unsafe fn add_plant(server: *mut UA_Server, ns: u16, n: u32) -> Result<Vec<UA_NodeId>, String> {
    let locale = CString::new("en-US").unwrap();
    let plant = CString::new("Plant").unwrap();
    let mut folder = string_node(ns, "Plant");
    let mut oattr = shallow(&UA_ObjectAttributes_default);
    oattr.displayName = UA_LOCALIZEDTEXT(locale.as_ptr() as *mut _, plant.as_ptr() as *mut _);
    let rc = UA_Server_addObjectNode(
        server,
        shallow(&folder),
        numeric(0, UA_NS0ID_OBJECTSFOLDER),
        numeric(0, UA_NS0ID_ORGANIZES),
        UA_QUALIFIEDNAME(ns, plant.as_ptr() as *mut _),
        numeric(0, UA_NS0ID_FOLDERTYPE),
        oattr,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    if let Err(e) = check("add the folder s=Plant", rc) {
        UA_NodeId_clear(&mut folder);
        return Err(e);
    }
    let mut nodes = Vec::with_capacity(n as usize);
    let mut result = Ok(());
    for i in 0..n {
        let name = CString::new(format!("V{i}")).unwrap();
        let mut attr = shallow(&UA_VariableAttributes_default);
        let v = 0.0f64;
        // The value is copied into the node by addVariableNode; `attr.value` points at `v`.
        UA_Variant_setScalar(
            &mut attr.value,
            &v as *const f64 as *mut c_void,
            data_type(UA_TYPES_DOUBLE),
        );
        attr.displayName = UA_LOCALIZEDTEXT(locale.as_ptr() as *mut _, name.as_ptr() as *mut _);
        attr.dataType = shallow(&(*data_type(UA_TYPES_DOUBLE)).typeId);
        attr.valueRank = UA_VALUERANK_SCALAR;
        attr.accessLevel = UA_ACCESSLEVELMASK_READ as u8;
        attr.userAccessLevel = attr.accessLevel;
        attr.minimumSamplingInterval = 0.0;
        let node = string_node(ns, &format!("Plant.V{i}"));
        let rc = UA_Server_addVariableNode(
            server,
            shallow(&node),
            shallow(&folder),
            numeric(0, UA_NS0ID_ORGANIZES),
            UA_QUALIFIEDNAME(ns, name.as_ptr() as *mut _),
            numeric(0, UA_NS0ID_BASEDATAVARIABLETYPE),
            attr,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        nodes.push(node);
        if let Err(e) = check(&format!("add s=Plant.V{i}"), rc) {
            result = Err(e);
            break;
        }
    }
    UA_NodeId_clear(&mut folder);
    match result {
        Ok(()) => Ok(nodes),
        Err(e) => {
            free_nodes(nodes);
            Err(e)
        }
    }
}

fn free_nodes(nodes: Vec<UA_NodeId>) {
    for mut n in nodes {
        // SAFETY: each NodeId owns its string (UA_NODEID_STRING_ALLOC).
        unsafe { UA_NodeId_clear(&mut n) };
    }
}

/// The server pointer, handed to the push thread. open62541's public API is thread-safe in
/// this build (see the module comment), and the server outlives the thread (joined before
/// UA_Server_run_shutdown and UA_Server_delete).
struct ServerPtr(*mut UA_Server);
// SAFETY: see above: UA_THREADSAFE functions may be called from any thread.
unsafe impl Send for ServerPtr {}

/// The nodes, owned by the push thread.
struct Nodes(Vec<UA_NodeId>);
// SAFETY: plain data (NodeIds with heap strings), moved to one thread.
unsafe impl Send for Nodes {}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: an absolute sleep on CLOCK_MONOTONIC; EINTR just returns early.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

/// What the push thread did.
struct PushReport {
    rounds: u64,
    late_rounds: u64,
    max_late_ns: u64,
    errors: u64,
    first_error: Option<String>,
}

/// The push loop: round k (k = 1, 2, …) is due at start + k / HZ and writes the Double k
/// to every variable; a late round goes at once (k stays the count of pushes).
fn push_loop(server: ServerPtr, nodes: Nodes, rate: f64, stop: Arc<AtomicBool>) -> PushReport {
    let ServerPtr(server) = server;
    let Nodes(nodes) = nodes;
    let period_ns = 1e9 / rate;
    let start = mono_ns();
    let mut r = PushReport {
        rounds: 0,
        late_rounds: 0,
        max_late_ns: 0,
        errors: 0,
        first_error: None,
    };
    let mut k: u64 = 1;
    // Wake at least every 50 ms to see a stop at low rates.
    const CHECK_NS: u64 = 50_000_000;
    while !stop.load(Ordering::Relaxed) {
        let due = start + (k as f64 * period_ns).round() as u64;
        let now = mono_ns();
        if now < due {
            sleep_until(due.min(now + CHECK_NS));
            continue;
        }
        let late = now - due;
        if late > period_ns as u64 {
            r.late_rounds += 1;
        }
        r.max_late_ns = r.max_late_ns.max(late);
        let value = k as f64;
        for node in &nodes {
            // SAFETY: the variant points at `value` for the call (UA_Server_writeValue copies
            // it); the NodeId is passed by value as a bitwise copy and not freed by the call;
            // the server is alive (see ServerPtr) and the call takes the server lock itself.
            let rc = unsafe {
                let mut v: UA_Variant = std::mem::zeroed();
                UA_Variant_setScalar(
                    &mut v,
                    &value as *const f64 as *mut c_void,
                    data_type(UA_TYPES_DOUBLE),
                );
                UA_Server_writeValue(server, shallow(node), v)
            };
            if rc != 0 {
                r.errors += 1;
                if r.first_error.is_none() {
                    r.first_error = Some(status_name(rc));
                }
            }
        }
        r.rounds += 1;
        k += 1;
    }
    free_nodes(nodes);
    r
}

fn main() {
    let o = Opts::parse();
    let (host, port) = match host_port(&o.listen) {
        Ok(hp) => hp,
        Err(e) => {
            eprintln!("open62541-plant: {e}");
            std::process::exit(2);
        }
    };
    stop_on_signals();
    // SAFETY: the open62541 API used as documented: a zeroed configuration is filled by the
    // setters and moved into the server; the push thread is joined before the server is shut
    // down and deleted.
    let code = unsafe {
        let mut config: UA_ServerConfig = std::mem::zeroed();
        config.logging = UA_Log_Stdout_new(UA_LogLevel(o.log_level.clamp(1, 6) * 100));
        if let Err(e) = configure(&mut config, &host, port) {
            eprintln!("open62541-plant: {e}");
            std::process::exit(2);
        }
        let server = UA_Server_newWithConfig(&mut config);
        if server.is_null() {
            eprintln!("open62541-plant: UA_Server_newWithConfig failed");
            std::process::exit(2);
        }
        let uri = CString::new(NAMESPACE_URI).unwrap();
        let ns = UA_Server_addNamespace(server, uri.as_ptr());
        let started = add_plant(server, ns, o.variables)
            .and_then(|nodes| check("startup", UA_Server_run_startup(server)).map(|_| nodes));
        let code = match started {
            Err(e) => {
                eprintln!("open62541-plant: {e}");
                2
            }
            Ok(nodes) => {
                println!("listening on opc.tcp://{host}:{port}");
                use std::io::Write;
                let _ = std::io::stdout().flush();
                let stop = Arc::new(AtomicBool::new(false));
                let (srv, nodes, rate, stop2) =
                    (ServerPtr(server), Nodes(nodes), o.rate, stop.clone());
                let pusher = std::thread::Builder::new()
                    .name("push".into())
                    .spawn(move || push_loop(srv, nodes, rate, stop2))
                    .expect("the push thread starts");
                serve_until_stopped(server);
                stop.store(true, Ordering::SeqCst);
                let pushed = pusher.join();
                let mut code = match pushed {
                    Ok(r) => {
                        eprintln!(
                            "push: {} rounds of {} variables at {} Hz, {} late by more than a period (max {:.3} ms), {} write errors{}",
                            r.rounds,
                            o.variables,
                            o.rate,
                            r.late_rounds,
                            r.max_late_ns as f64 / 1e6,
                            r.errors,
                            r.first_error.map(|e| format!(" (first: {e})")).unwrap_or_default()
                        );
                        if r.errors > 0 {
                            1
                        } else {
                            0
                        }
                    }
                    Err(_) => {
                        eprintln!("open62541-plant: the push thread panicked");
                        1
                    }
                };
                if let Err(e) = check("shutdown", UA_Server_run_shutdown(server)) {
                    eprintln!("open62541-plant: {e}");
                    code = 1;
                }
                code
            }
        };
        UA_Server_delete(server);
        code
    };
    std::process::exit(code);
}
