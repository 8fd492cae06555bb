//! `async-opcua-contract-server`: the benchmark contract (docs/Benchmarks.md, "The benchmark contract")
//! on async-opcua's server (the Rust stack a Rust user would pick instead of
//! uaring), in our own code.
//!
//! - 100 Int32 variables `ns=1;i=1001..1100`, `BenchmarkValue<k>`, initial
//!   value k, under Objects, readable and writable; a Write of another type is
//!   BadTypeMismatch. async-opcua 0.19 itself accepts any scalar type written
//!   to a variable (`validate_value_to_write`), so the values live in atomics
//!   behind SimpleNodeManager's read and write callbacks, which check the type.
//! - `--counters N`: instead, N UInt64 counters `ns=1;i=1..N` whose value
//!   increments on each read (every sample reads it); minimum sampling 1 ms.
//! - ApplicationUri `urn:o6:benchmark:server` (namespace 1); `--secure` adds
//!   Basic256Sha256 Sign and SignAndEncrypt endpoints with a generated
//!   self-signed certificate (in `--pki`) and trusts any client certificate.
//! - Prints `listening on opc.tcp://127.0.0.1:PORT` and `benchmark server
//!   ready` once it accepts connections; SIGTERM/SIGINT stop it (exit 0).

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use opcua::nodes::VariableBuilder;
use opcua::server::node_manager::memory::{
    simple_node_manager, CoreNodeManagerBuilder, InMemoryNodeManagerBuilder, SimpleNodeManager,
};
use opcua::server::{diagnostics::NamespaceMetadata, ServerBuilder, ANONYMOUS_USER_TOKEN_ID};
use opcua::types::{
    DataTypeId, DataValue, DateTime, MessageSecurityMode, NodeId, ObjectId, QualifiedName,
    StatusCode, Variant,
};

const APPLICATION_URI: &str = "urn:o6:benchmark:server";
const FIRST_NODE: u32 = 1001;
const NODE_COUNT: u32 = 100;

#[derive(Parser, Debug)]
#[command(
    name = "async-opcua-contract-server",
    about = "The benchmark contract on async-opcua",
    disable_version_flag = true
)]
struct Opts {
    /// TCP port.
    #[arg(long, default_value_t = 4840)]
    port: u16,
    /// Capacity mode: N UInt64 counters ns=1;i=1..N instead of the Int32 variables.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    counters: Option<u32>,
    /// Also offer Basic256Sha256 Sign and SignAndEncrypt endpoints.
    #[arg(long)]
    secure: bool,
    /// PKI directory (server certificate, trusted and rejected client certificates).
    #[arg(long, default_value = "pki-async-opcua")]
    pki: String,
    /// Tokio worker threads (0: one per CPU the process may use).
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

fn builder(o: &Opts) -> ServerBuilder {
    let tokens = [ANONYMOUS_USER_TOKEN_ID];
    // Without the diagnostics node manager: it would own namespace 1 (the
    // application URI), where the contract's variables live.
    let mut b = ServerBuilder::new()
        .without_node_managers()
        .with_node_manager(InMemoryNodeManagerBuilder::new(CoreNodeManagerBuilder))
        .application_name("uaring benchmark async-opcua")
        .application_uri(APPLICATION_URI)
        .product_uri("urn:uaring:benchmark:async-opcua")
        .host("127.0.0.1")
        .port(o.port)
        .pki_dir(&o.pki)
        .create_sample_keypair(o.secure)
        .certificate_path("own/cert.der")
        .private_key_path("private/private.pem")
        .trust_client_certs(true)
        .discovery_urls(vec!["/".to_owned()])
        .max_message_size(64 << 20)
        .max_chunk_count(0)
        .max_sessions(10_000)
        .add_endpoint(
            "none",
            (
                "/",
                opcua::crypto::SecurityPolicy::None,
                MessageSecurityMode::None,
                &tokens as &[&str],
            ),
        )
        .with_node_manager(simple_node_manager(
            NamespaceMetadata {
                namespace_uri: APPLICATION_URI.to_owned(),
                ..Default::default()
            },
            "benchmark",
        ));
    if o.secure {
        for (id, mode) in [
            ("basic256sha256_sign", MessageSecurityMode::Sign),
            (
                "basic256sha256_sign_encrypt",
                MessageSecurityMode::SignAndEncrypt,
            ),
        ] {
            b = b.add_endpoint(
                id,
                (
                    "/",
                    opcua::crypto::SecurityPolicy::Basic256Sha256,
                    mode,
                    &tokens as &[&str],
                ),
            );
        }
    }
    {
        let limits = b.limits_mut();
        limits.operational.max_nodes_per_read = 100_000;
        limits.operational.max_nodes_per_write = 100_000;
        limits.operational.max_nodes_per_browse = 100_000;
        limits.operational.max_monitored_items_per_call = 100_000;
        limits.subscriptions.min_sampling_interval_ms = 1.0;
        limits.subscriptions.min_publishing_interval_ms = 1.0;
    }
    b
}

async fn serve(o: Opts) -> Result<(), String> {
    let (server, handle) = builder(&o).build()?;
    let nm = handle
        .node_managers()
        .get_of_type::<SimpleNodeManager>()
        .ok_or("no simple node manager")?;
    let ns = handle
        .get_namespace_index(APPLICATION_URI)
        .ok_or("no namespace for the application URI")?;
    if ns != 1 {
        return Err(format!(
            "the application namespace has index {ns}, the contract needs 1"
        ));
    }
    {
        let mut space = nm.address_space().write();
        match o.counters {
            None => {
                for k in 0..NODE_COUNT {
                    let name = format!("BenchmarkValue{k}");
                    let ok = VariableBuilder::new(
                        &NodeId::new(ns, FIRST_NODE + k),
                        QualifiedName::new(ns, name.as_str()),
                        name.as_str(),
                    )
                    .data_type(DataTypeId::Int32)
                    .value(k as i32)
                    .writable()
                    .organized_by(ObjectId::ObjectsFolder)
                    .insert(&mut *space);
                    if !ok {
                        return Err(format!("cannot add {name}"));
                    }
                }
            }
            Some(n) => {
                for id in 1..=n {
                    let name = format!("Counter{id}");
                    let ok = VariableBuilder::new(
                        &NodeId::new(ns, id),
                        QualifiedName::new(ns, name.as_str()),
                        name.as_str(),
                    )
                    .data_type(DataTypeId::UInt64)
                    .value(0u64)
                    .minimum_sampling_interval(1.0)
                    .organized_by(ObjectId::ObjectsFolder)
                    .insert(&mut *space);
                    if !ok {
                        return Err(format!("cannot add {name}"));
                    }
                }
            }
        }
    }
    if o.counters.is_none() {
        for k in 0..NODE_COUNT {
            let cell = Arc::new(AtomicI32::new(k as i32));
            let r = cell.clone();
            nm.inner().add_read_callback(
                NodeId::new(ns, FIRST_NODE + k),
                move |_range, _ts, _max_age| {
                    Ok(DataValue::new_at(
                        r.load(Ordering::Relaxed),
                        DateTime::now(),
                    ))
                },
            );
            nm.inner().add_write_callback(
                NodeId::new(ns, FIRST_NODE + k),
                move |dv, range| match (&dv.value, range.has_range()) {
                    (Some(Variant::Int32(v)), false) => {
                        cell.store(*v, Ordering::Relaxed);
                        StatusCode::Good
                    }
                    (_, true) => StatusCode::BadIndexRangeInvalid,
                    _ => StatusCode::BadTypeMismatch,
                },
            );
        }
    }
    if let Some(n) = o.counters {
        for id in 1..=n {
            let counter = Arc::new(AtomicU64::new(0));
            nm.inner()
                .add_read_callback(NodeId::new(ns, id), move |_range, _ts, _max_age| {
                    let v = counter.fetch_add(1, Ordering::Relaxed) + 1;
                    Ok(DataValue::new_at(v, DateTime::now()))
                });
        }
    }
    let stop = handle.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        stop.cancel();
        // The graceful stop waits for open sessions; the contract wants a prompt, clean exit.
        tokio::time::sleep(Duration::from_secs(2)).await;
        std::process::exit(0);
    });
    let port = o.port;
    tokio::spawn(async move {
        // Ready once the listener accepts (hang guard: 60 s).
        for _ in 0..6000 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                println!("listening on opc.tcp://127.0.0.1:{port}");
                println!("benchmark server ready");
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eprintln!("async-opcua-contract-server: not listening after 60 s");
    });
    server.run().await.map_err(|e| format!("server: {e:?}"))?;
    Ok(())
}

fn main() {
    let o = Opts::parse();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if o.threads > 0 {
        rt.worker_threads(o.threads);
    }
    let rt = rt.build().expect("tokio runtime");
    if let Err(e) = rt.block_on(serve(o)) {
        eprintln!("async-opcua-contract-server: {e}");
        std::process::exit(2);
    }
}
