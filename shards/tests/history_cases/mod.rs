//! The end-to-end history cases, run against each backend (`history.rs`: the embedded
//! store; `history_postgres.rs`: a PostgreSQL server the test starts): a historized
//! Variable of the library, its pushed values read back by a real client over TCP with
//! HistoryRead — raw (forwards, backwards, with continuation points), at time
//! (interpolated), processed — a client's Write historized too, everything still there
//! after a restart; HistoryUpdate by role; values a full queue drops marked.
#![allow(dead_code)]

pub mod pg;

use std::time::{Duration, Instant};

use uaring::{DataValue, DateTime, NodeId, Server, StatusCode, VariableDef, Variant};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::{DecodeLimits, ExtensionObject};
use uaring_harness::blocking::Client;

/// The client's hang guard: above the store's own bound on an operation (30 s, after which the
/// server answers BadTimeout), so a store slowed by the disk (a HistoryUpdate is durable when
/// it is answered: some forty fdatasyncs in the update test) answers rather than the guard.
pub const TIMEOUT: Duration = Duration::from_secs(35);

/// The tests of this file one at a time: each starts and stops servers on port 0, and a
/// listener of one test may otherwise be given the port another test's server is leaving
/// (SO_REUSEPORT).
pub static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct Dir(pub std::path::PathBuf);
impl Dir {
    pub fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("uaring-history-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A day ago, on a whole second: the pushed values are at t0 + i s.
pub fn t0() -> DateTime {
    let now = uaring::clock::utc_now().0;
    let day = 864_000_000_000i64;
    DateTime((now - day) / 10_000_000 * 10_000_000)
}
pub fn at(t0: DateTime, s: f64) -> DateTime {
    DateTime(t0.0 + (s * 1e7) as i64)
}

/// Where the history goes.
pub enum Backend<'a> {
    /// The embedded store, in the test's directory.
    Embedded,
    /// The PostgreSQL server of the test.
    Postgres(&'a pg::Pg),
}

impl Backend<'_> {
    /// The history threads of the backend besides the readers.
    fn writer_threads(&self) -> &'static [&'static str] {
        match self {
            Backend::Embedded => &["uaring-history", "uaring-hsync"],
            Backend::Postgres(_) => &["uaring-hpg-0", "uaring-hpg-1"],
        }
    }
}

pub fn builder(dir: &Dir, backend: &Backend) -> uaring::ServerBuilder {
    let toml = match backend {
        Backend::Embedded => format!(
            "[history]\nenabled = true\ndir = {:?}\nflush_interval_ms = 50\n",
            dir.0.join("store").display().to_string()
        ),
        Backend::Postgres(pg) => pg.history_toml(),
    };
    Server::builder()
        .listen("127.0.0.1:0")
        .shards(2)
        .pki(dir.0.join("pki"))
        .config_toml(&toml)
}

/// [`builder`] of the embedded store with `extra` added to its `[history]` configuration
/// (tables such as `[[history.sampled]]`).
pub fn embedded_builder_with(dir: &Dir, extra: &str) -> uaring::ServerBuilder {
    Server::builder()
        .listen("127.0.0.1:0")
        .shards(2)
        .pki(dir.0.join("pki"))
        .config_toml(&format!(
            "[history]\nenabled = true\ndir = {:?}\nflush_interval_ms = 50\n{extra}",
            dir.0.join("store").display().to_string()
        ))
}

/// The nice value of this process's thread named `name` (/proc/self/task/*/stat), waiting
/// a little for it to set it.
pub fn thread_nice(name: &str) -> Option<i64> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        for t in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() != name {
                continue;
            }
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            // Fields after the ")" of the command: state is field 3, nice field 19.
            let rest = stat.rsplit_once(')')?.1;
            let nice: i64 = rest.split_whitespace().nth(16)?.parse().ok()?;
            if nice != 0 || Instant::now() > deadline {
                return Some(nice);
            }
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The scheduling policy of this process's thread named `name` (field 41 of its stat:
/// 0 SCHED_OTHER, 3 SCHED_BATCH, 5 SCHED_IDLE). Read after [`thread_nice`] saw its nice
/// value (a history thread sets its policy first).
pub fn thread_policy(name: &str) -> Option<i64> {
    for t in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            return stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(38)?
                .parse()
                .ok();
        }
    }
    None
}

pub fn session(url: &str) -> Client {
    let mut c = Client::connect(url, TIMEOUT).expect("connect");
    c.create_session().expect("CreateSession");
    c.activate_session_anonymous().expect("ActivateSession");
    c
}

pub fn history_read(
    c: &mut Client,
    details: ExtensionObject,
    nodes: Vec<HistoryReadValueId>,
) -> HistoryReadResponse {
    let req = HistoryReadRequest {
        history_read_details: details,
        timestamps_to_return: TimestampsToReturn::Both,
        nodes_to_read: nodes,
        ..Default::default()
    };
    match c
        .call(Request::HistoryRead(Box::new(req)))
        .expect("HistoryRead")
    {
        Response::HistoryRead(r) => *r,
        other => panic!("{other:?}"),
    }
}

pub fn data(r: &HistoryReadResult) -> Vec<DataValue> {
    if r.history_data.is_null() {
        return Vec::new();
    }
    r.history_data
        .decode_as::<HistoryData>(DecodeLimits::default())
        .expect("HistoryData")
        .expect("decodes")
        .data_values
}

pub fn doubles(v: &[DataValue]) -> Vec<f64> {
    v.iter()
        .map(|d| match d.value {
            Variant::Double(x) => x,
            ref o => panic!("{o:?}"),
        })
        .collect()
}

/// Every raw value of `node` in `[start, end)`, `per_call` at a time through continuation
/// points; also how many calls it took.
pub fn read_all(
    c: &mut Client,
    node: &NodeId,
    start: DateTime,
    end: DateTime,
    per_call: u32,
) -> (Vec<DataValue>, usize) {
    let details = ExtensionObject::from_struct(&ReadRawModifiedDetails {
        is_read_modified: false,
        start_time: start,
        end_time: end,
        num_values_per_node: per_call,
        return_bounds: false,
    });
    let mut all = Vec::new();
    let mut cp = ByteString::null();
    let mut calls = 0;
    loop {
        calls += 1;
        let r = history_read(
            c,
            details.clone(),
            vec![HistoryReadValueId {
                node_id: node.clone(),
                continuation_point: cp.clone(),
                ..Default::default()
            }],
        );
        let res = &r.results[0];
        assert!(res.status_code.is_good(), "{:?}", res.status_code);
        all.extend(data(res));
        if res.continuation_point.is_null() {
            return (all, calls);
        }
        cp = res.continuation_point.clone();
    }
}

pub type ByteString = uaring::ByteString;

/// The values whose status carries the ExtraData bit (Part 4 §7.39: InfoType DataValue,
/// bit 3): raw values that hide modified data.
pub fn with_extra_data(v: &[DataValue]) -> Vec<f64> {
    let flagged: Vec<DataValue> = v
        .iter()
        .filter(|d| d.status.is_some_and(|s| s.0 & 0x0408 == 0x0408))
        .cloned()
        .collect();
    doubles(&flagged)
}

pub fn wait_for(c: &mut Client, node: &NodeId, start: DateTime, end: DateTime, n: usize) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let (v, _) = read_all(c, node, start, end, 0);
        if v.len() >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {n} values stored",
            v.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Returns the NodeId of the Level Variable (1,000 Doubles at t0 + i s), for what the
/// caller checks of its backend afterwards.
pub fn pushed_and_written_values_are_read_back_raw_at_time_and_processed_and_survive_a_restart(
    dir: &Dir,
    backend: &Backend,
) -> (NodeId, DateTime) {
    let t0 = t0();
    let level_id;
    let setpoint_id;
    {
        let mut b = builder(dir, backend);
        let ns = b.namespace("urn:test:history");
        let level = b.add_variable(VariableDef::new(ns.id("Level"), "Level", 0.0).historize());
        b.add_variable(
            VariableDef::new(ns.id("Setpoint"), "Setpoint", 0.0)
                .writable(true)
                .historize(),
        );
        b.add_variable(VariableDef::new(ns.id("Live"), "Live", 0.0));
        let server = b.start().expect("start");
        // The history threads run below the shards' priority (history.nice, 10).
        for name in backend
            .writer_threads()
            .iter()
            .chain(&["uaring-hread-0", "uaring-hread-1"])
        {
            assert_eq!(thread_nice(name), Some(10), "{name}");
        }
        // The writers run SCHED_BATCH (history.writer_policy), the readers SCHED_OTHER.
        for name in backend.writer_threads() {
            assert_eq!(thread_policy(name), Some(3), "{name}");
        }
        assert_eq!(thread_policy("uaring-hread-0"), Some(0));
        let url = server.endpoint_url();
        let nsi = server.namespace_index("urn:test:history").unwrap();
        level_id = NodeId::string(nsi, "Level");
        setpoint_id = NodeId::string(nsi, "Setpoint");
        for i in 0..1000 {
            level
                .set_with(DataValue {
                    source_timestamp: Some(at(t0, i as f64)),
                    ..DataValue::new(Variant::Double(i as f64))
                })
                .unwrap();
        }
        let mut c = session(&url);
        let end = at(t0, 1000.0);
        wait_for(&mut c, &level_id, t0, end, 1000);

        // Raw, forwards, 300 at a time: four calls, every value once and in order.
        let (v, calls) = read_all(&mut c, &level_id, t0, end, 300);
        assert_eq!(calls, 4);
        assert_eq!(doubles(&v), (0..1000).map(|i| i as f64).collect::<Vec<_>>());
        assert!(v.iter().all(|d| d.server_timestamp.is_some()));
        // [start, end): the value at the end time is not included.
        let (v, _) = read_all(&mut c, &level_id, at(t0, 10.0), at(t0, 20.0), 0);
        assert_eq!(doubles(&v), (10..20).map(|i| i as f64).collect::<Vec<_>>());
        // Backwards: end before start.
        let (v, _) = read_all(&mut c, &level_id, at(t0, 19.0), at(t0, 9.0), 0);
        assert_eq!(
            doubles(&v),
            (10..20).rev().map(|i| i as f64).collect::<Vec<_>>()
        );

        // Bounding values: the value at or before the start, the first at or after the end
        // (mirrored when reading backwards), BadBoundNotFound past the data.
        let bounded = |c: &mut Client, s: f64, e: f64| {
            let r = history_read(
                c,
                ExtensionObject::from_struct(&ReadRawModifiedDetails {
                    start_time: at(t0, s),
                    end_time: at(t0, e),
                    return_bounds: true,
                    ..Default::default()
                }),
                vec![HistoryReadValueId {
                    node_id: level_id.clone(),
                    ..Default::default()
                }],
            );
            data(&r.results[0])
        };
        let v = bounded(&mut c, 10.5, 15.5);
        assert_eq!(doubles(&v), vec![10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0]);
        let v = bounded(&mut c, 10.0, 15.0);
        assert_eq!(
            doubles(&v),
            vec![10.0, 11.0, 12.0, 13.0, 14.0, 15.0],
            "bounds at the times"
        );
        let v = bounded(&mut c, 15.5, 10.5);
        assert_eq!(doubles(&v), vec![16.0, 15.0, 14.0, 13.0, 12.0, 11.0, 10.0]);
        let v = bounded(&mut c, 15.0, 10.0);
        assert_eq!(doubles(&v), vec![15.0, 14.0, 13.0, 12.0, 11.0, 10.0]);
        // (A year on: past every value, the one the Variable started with included.)
        let v = bounded(&mut c, 998.5, 3.2e7);
        assert_eq!(doubles(&v[..2]), vec![998.0, 999.0]);
        let last = v.last().unwrap();
        assert_eq!(
            last.status,
            Some(StatusCode::BadBoundNotFound),
            "nothing after the end"
        );
        assert_eq!(last.source_timestamp, Some(at(t0, 3.2e7)));

        // At time: a raw value where there is one, else interpolated between its neighbours.
        let r = history_read(
            &mut c,
            ExtensionObject::from_struct(&ReadAtTimeDetails {
                req_times: vec![at(t0, 7.0), at(t0, 10.25), at(t0, -5.0)],
                use_simple_bounds: true,
            }),
            vec![HistoryReadValueId {
                node_id: level_id.clone(),
                ..Default::default()
            }],
        );
        let v = data(&r.results[0]);
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].value, Variant::Double(7.0));
        assert_eq!(v[0].status, None, "raw, Good");
        assert_eq!(v[1].value, Variant::Double(10.25));
        let s = v[1].status.expect("interpolated");
        assert_eq!(
            s.0 & 0x0403,
            0x0402,
            "Interpolated bit with the DataValue info type"
        );
        assert_eq!(
            v[2].status,
            Some(StatusCode::BadNoData),
            "before the first value"
        );

        // Processed: Interpolative every 100 s.
        let r = history_read(
            &mut c,
            ExtensionObject::from_struct(&ReadProcessedDetails {
                start_time: t0,
                end_time: at(t0, 500.0),
                processing_interval: 100_000.0,
                aggregate_type: vec![NodeId::ns0(2341)],
                aggregate_configuration: AggregateConfiguration {
                    use_server_capabilities_defaults: true,
                    ..Default::default()
                },
            }),
            vec![HistoryReadValueId {
                node_id: level_id.clone(),
                ..Default::default()
            }],
        );
        assert_eq!(r.results[0].status_code, StatusCode::Good);
        assert_eq!(
            doubles(&data(&r.results[0])),
            vec![0.0, 100.0, 200.0, 300.0, 400.0]
        );
        // A configuration with a percentage above 100 is refused for that node.
        let r = history_read(
            &mut c,
            ExtensionObject::from_struct(&ReadProcessedDetails {
                start_time: t0,
                end_time: at(t0, 500.0),
                processing_interval: 100_000.0,
                aggregate_type: vec![NodeId::ns0(2341)],
                aggregate_configuration: AggregateConfiguration {
                    use_server_capabilities_defaults: false,
                    percent_data_bad: 101,
                    percent_data_good: 100,
                    ..Default::default()
                },
            }),
            vec![HistoryReadValueId {
                node_id: level_id.clone(),
                ..Default::default()
            }],
        );
        assert_eq!(
            r.results[0].status_code,
            StatusCode::BadAggregateConfigurationRejected
        );

        // A client's Write is historized too; a Variable that is not says so.
        let w = c
            .write(&[WriteValue {
                node_id: setpoint_id.clone(),
                attribute_id: 13,
                value: DataValue::new(Variant::Double(42.0)),
                ..Default::default()
            }])
            .unwrap();
        assert_eq!(w, vec![StatusCode::Good]);
        let now = uaring::clock::utc_now();
        wait_for(&mut c, &setpoint_id, t0, at(now, 10.0), 2);
        let (v, _) = read_all(&mut c, &setpoint_id, t0, at(now, 10.0), 0);
        assert_eq!(
            doubles(&v),
            vec![0.0, 42.0],
            "its start value, then the Write"
        );
        let r = history_read(
            &mut c,
            ExtensionObject::from_struct(&ReadRawModifiedDetails {
                start_time: t0,
                end_time: at(t0, 10.0),
                ..Default::default()
            }),
            vec![HistoryReadValueId {
                node_id: NodeId::string(nsi, "Live"),
                ..Default::default()
            }],
        );
        assert_eq!(r.results[0].status_code, StatusCode::BadNotReadable);
        let _ = c.close();
        drop(level);
        server.shutdown().expect("shutdown");
    }
    // A restart on the same directory finds everything.
    let mut b = builder(dir, backend);
    let ns = b.namespace("urn:test:history");
    b.add_variable(VariableDef::new(ns.id("Level"), "Level", 0.0).historize());
    b.add_variable(
        VariableDef::new(ns.id("Setpoint"), "Setpoint", 0.0)
            .writable(true)
            .historize(),
    );
    let server = b.start().expect("restart with the same Variables");
    let mut c = session(&server.endpoint_url());
    let (v, _) = read_all(&mut c, &level_id, t0, at(t0, 1000.0), 0);
    assert_eq!(
        v.len(),
        1000,
        "every value flushed before the shutdown is there"
    );
    let now = uaring::clock::utc_now();
    let (v, _) = read_all(&mut c, &setpoint_id, t0, at(now, 10.0), 0);
    assert!(doubles(&v).contains(&42.0));
    let _ = c.close();
    server.shutdown().unwrap();

    (level_id, t0)
}

pub fn history_update(c: &mut Client, details: Vec<ExtensionObject>) -> Vec<HistoryUpdateResult> {
    let req = HistoryUpdateRequest {
        history_update_details: details,
        ..Default::default()
    };
    match c
        .call(Request::HistoryUpdate(Box::new(req)))
        .expect("HistoryUpdate")
    {
        Response::HistoryUpdate(r) => r.results,
        other => panic!("{other:?}"),
    }
}

pub fn dv(t: DateTime, v: f64) -> DataValue {
    DataValue {
        source_timestamp: Some(t),
        ..DataValue::new(Variant::Double(v))
    }
}

/// One processed read of `node` over `[start, end)` as a single interval with the client's own
/// AggregateConfiguration (`None`: the server's defaults): the one value it answers.
fn processed(
    c: &mut Client,
    node: &NodeId,
    aggregate: u32,
    start: DateTime,
    end: DateTime,
    config: Option<AggregateConfiguration>,
) -> DataValue {
    let r = history_read(
        c,
        ExtensionObject::from_struct(&ReadProcessedDetails {
            start_time: start,
            end_time: end,
            processing_interval: 0.0,
            aggregate_type: vec![NodeId::ns0(aggregate)],
            aggregate_configuration: config.unwrap_or(AggregateConfiguration {
                use_server_capabilities_defaults: true,
                ..Default::default()
            }),
        }),
        vec![HistoryReadValueId {
            node_id: node.clone(),
            ..Default::default()
        }],
    );
    assert_eq!(r.results[0].status_code, StatusCode::Good);
    let v = data(&r.results[0]);
    assert_eq!(v.len(), 1, "{v:?}");
    v[0].clone()
}

/// A ReadProcessed honours the AggregateConfiguration of the request (Part 13 §4.2.1.2,
/// §5.4.3.2): over 10, 20, 35 (Uncertain) and 40 at t0 + 0..3 s, t0 a day from now (a Double:
/// sloped),
/// TreatUncertainAsBad decides whether TimeAverage uses 35, PercentDataGood and PercentDataBad the
/// quality of an interval a quarter Bad, and UseSlopedExtrapolation the value after the end of
/// the data (extrapolated from the last two usable values, which lie before the range).
pub fn processed_reads_honour_the_aggregate_configuration(dir: &Dir, backend: &Backend) {
    const AVERAGE: u32 = 2342;
    const INTERPOLATIVE: u32 = 2341;
    const TIME_AVERAGE: u32 = 2343;
    // A day ahead, so that these are the last values of the series (the Variable's initial
    // value is historized when the server starts).
    let t0 = at(t0(), 2.0 * 86_400.0);
    let mut b = builder(dir, backend);
    let ns = b.namespace("urn:test:history");
    let flow = b.add_variable(VariableDef::new(ns.id("Flow"), "Flow", 0.0).historize());
    let speed = b.add_variable(VariableDef::new(ns.id("Speed"), "Speed", 0.0f32).historize());
    let server = b.start().expect("start");
    let nsi = server.namespace_index("urn:test:history").unwrap();
    let id = NodeId::string(nsi, "Flow");
    let speed_id = NodeId::string(nsi, "Speed");
    for (i, v) in [1.5f32, 2.5, 4.0].into_iter().enumerate() {
        speed
            .set_with(DataValue {
                source_timestamp: Some(at(t0, i as f64)),
                ..DataValue::new(Variant::Float(v))
            })
            .unwrap();
    }
    for (i, (v, st)) in [
        (10.0, StatusCode::Good),
        (20.0, StatusCode::Good),
        (35.0, StatusCode::Uncertain),
        (40.0, StatusCode::Good),
    ]
    .into_iter()
    .enumerate()
    {
        flow.set_with(DataValue {
            status: Some(st),
            ..dv(at(t0, i as f64), v)
        })
        .unwrap();
    }
    let mut c = session(&server.endpoint_url());
    wait_for(&mut c, &id, t0, at(t0, 10.0), 4);
    wait_for(&mut c, &speed_id, t0, at(t0, 10.0), 3);
    // The data type of a result is Part 13's (Table 13), not the source's: the averages and
    // totals of a Float are Double, its Minimum a Float (the raw value).
    for (aggregate, want) in [
        (AVERAGE, Variant::Double(8.0 / 3.0)),
        (TIME_AVERAGE, Variant::Double((2.0 + 3.25 + 4.0) / 3.0)),
        (2344, Variant::Double(2.0 + 3.25 + 4.0)), // Total, in value × seconds
        (2346, Variant::Float(1.5)),               // Minimum
    ] {
        let d = processed(&mut c, &speed_id, aggregate, t0, at(t0, 3.0), None);
        assert_eq!(d.value, want, "aggregate {aggregate}: {d:?}");
    }
    let own = |treat_uncertain_as_bad, percent_data_bad, percent_data_good, sloped| {
        Some(AggregateConfiguration {
            use_server_capabilities_defaults: false,
            treat_uncertain_as_bad,
            percent_data_bad,
            percent_data_good,
            use_sloped_extrapolation: sloped,
        })
    };
    let number = |d: &DataValue| match d.value {
        Variant::Double(x) => x,
        ref o => panic!("{o:?}"),
    };
    let severity = |d: &DataValue| StatusCode(d.status.unwrap_or_default().0 & 0xC000_0000);
    let (s, e) = (t0, at(t0, 4.0));
    // TimeAverage over [t0, t0 + 3 s), the lines between the points: 35 is one of them with
    // TreatUncertainAsBad false, (15 + 27.5 + 37.5) / 3; with the server's defaults
    // (TreatUncertainAsBad true) it is skipped and the line drawn from 20 to 40, (15 + 2 × 30) / 3.
    // Uncertain either way: an Uncertain value used, or a Bad one skipped (§5.4.3.6).
    let d = processed(
        &mut c,
        &id,
        TIME_AVERAGE,
        s,
        at(t0, 3.0),
        own(false, 100, 100, false),
    );
    assert!((number(&d) - 80.0 / 3.0).abs() < 1e-9, "{d:?}");
    assert_eq!(severity(&d), StatusCode::Uncertain, "{d:?}");
    let d = processed(&mut c, &id, TIME_AVERAGE, s, at(t0, 3.0), None);
    assert!((number(&d) - 25.0).abs() < 1e-9, "{d:?}");
    assert_eq!(severity(&d), StatusCode::Uncertain, "{d:?}");
    // Average, the mean of the Good values (§5.4.3.5), over the four values, a quarter of them
    // Bad with TreatUncertainAsBad: with the server's defaults neither all Good
    // (PercentDataGood 100) nor all Bad: Uncertain.
    let d = processed(&mut c, &id, AVERAGE, s, e, None);
    assert!((number(&d) - 70.0 / 3.0).abs() < 1e-9, "{d:?}");
    assert_eq!(severity(&d), StatusCode::Uncertain, "{d:?}");
    // Three quarters Good is Good with PercentDataGood 70 ...
    let d = processed(&mut c, &id, AVERAGE, s, e, own(true, 100, 70, false));
    assert!((number(&d) - 70.0 / 3.0).abs() < 1e-9, "{d:?}");
    assert_eq!(severity(&d), StatusCode::Good, "{d:?}");
    // ... and a quarter Bad is Bad with PercentDataBad 20.
    let d = processed(&mut c, &id, AVERAGE, s, e, own(true, 20, 100, false));
    assert_eq!(severity(&d), StatusCode::Bad, "{d:?}");
    // After the end of the data (t0 + 5 s): SteppedExtrapolation holds 40; sloped, the line
    // through the last two usable values: 35 and 40 (5 per s: 50), or with TreatUncertainAsBad
    // 20 and 40 (10 per s: 60). Extrapolated values are Uncertain.
    let (s, e) = (at(t0, 5.0), at(t0, 6.0));
    for (config, want) in [
        (own(false, 100, 100, false), 40.0),
        (own(false, 100, 100, true), 50.0),
        (own(true, 100, 100, true), 60.0),
    ] {
        let d = processed(&mut c, &id, INTERPOLATIVE, s, e, config.clone());
        assert!((number(&d) - want).abs() < 1e-9, "{config:?}: {d:?}");
        assert_eq!(severity(&d), StatusCode::Uncertain, "{config:?}: {d:?}");
    }
    drop(c);
    server.shutdown().unwrap();
}

pub fn history_update_inserts_replaces_updates_and_deletes_by_role(dir: &Dir, backend: &Backend) {
    let t0 = t0();
    let mut b = builder(dir, backend);
    let ns = b.namespace("urn:test:history");
    let level = b.add_variable(VariableDef::new(ns.id("Level"), "Level", 0.0).historize());
    let server = b.start().expect("start");
    let nsi = server.namespace_index("urn:test:history").unwrap();
    let id = NodeId::string(nsi, "Level");
    for i in 0..10 {
        level.set_with(dv(at(t0, i as f64), i as f64)).unwrap();
    }
    let mut c = session(&server.endpoint_url());
    let end = at(t0, 100.0);
    wait_for(&mut c, &id, t0, end, 10);
    let data = |mode: PerformUpdateType, values: Vec<DataValue>| {
        ExtensionObject::from_struct(&UpdateDataDetails {
            node_id: id.clone(),
            perform_insert_replace: mode,
            update_values: values,
        })
    };
    let r = history_update(
        &mut c,
        vec![
            // Insert: one new, one where a value is.
            data(
                PerformUpdateType::Insert,
                vec![dv(at(t0, 20.0), 20.0), dv(at(t0, 3.0), -3.0)],
            ),
            // Replace: one there, one not.
            data(
                PerformUpdateType::Replace,
                vec![dv(at(t0, 4.0), 44.0), dv(at(t0, 30.0), 30.0)],
            ),
            // Update: replaces or inserts.
            data(
                PerformUpdateType::Update,
                vec![dv(at(t0, 5.0), 55.0), dv(at(t0, 40.0), 40.0)],
            ),
            // Delete at times: one there, one not; delete raw [7, 9).
            ExtensionObject::from_struct(&DeleteAtTimeDetails {
                node_id: id.clone(),
                req_times: vec![at(t0, 6.0), at(t0, 6.5)],
            }),
            ExtensionObject::from_struct(&DeleteRawModifiedDetails {
                node_id: id.clone(),
                is_delete_modified: false,
                start_time: at(t0, 7.0),
                end_time: at(t0, 9.0),
            }),
            ExtensionObject::from_struct(&DeleteRawModifiedDetails {
                node_id: id.clone(),
                is_delete_modified: false,
                start_time: at(t0, 50.0),
                end_time: at(t0, 60.0),
            }),
            // Remove is for annotations; an event delete with no EventIds deletes nothing.
            data(PerformUpdateType::Remove, vec![dv(at(t0, 1.0), 1.0)]),
            ExtensionObject::from_struct(&DeleteEventDetails {
                node_id: NodeId::ns0(2253),
                event_ids: vec![],
            }),
        ],
    );
    let statuses: Vec<(StatusCode, Vec<StatusCode>)> = r
        .iter()
        .map(|x| (x.status_code, x.operation_results.clone()))
        .collect();
    assert_eq!(
        statuses,
        vec![
            (
                StatusCode::Good,
                vec![StatusCode::GoodEntryInserted, StatusCode::BadEntryExists]
            ),
            (
                StatusCode::Good,
                vec![StatusCode::GoodEntryReplaced, StatusCode::BadNoEntryExists]
            ),
            (
                StatusCode::Good,
                vec![StatusCode::GoodEntryReplaced, StatusCode::GoodEntryInserted]
            ),
            (
                StatusCode::Good,
                vec![StatusCode::Good, StatusCode::BadNoEntryExists]
            ),
            (StatusCode::Good, vec![]),
            (StatusCode::BadNoData, vec![]),
            (StatusCode::BadHistoryOperationInvalid, vec![]),
            (StatusCode::Good, vec![]),
        ]
    );
    let (v, _) = read_all(&mut c, &id, t0, end, 0);
    assert_eq!(
        doubles(&v),
        vec![0.0, 1.0, 2.0, 3.0, 44.0, 55.0, 9.0, 20.0, 40.0],
        "3 kept, 4 replaced, 5 updated, 6 and 7–8 deleted, 20 and 40 inserted"
    );
    // ExtraData (Part 11 §3.1.7, §6.5.3.2): a value that hides modified values — the
    // replaced 4 and 5, the inserted 20 and 40 — says so; the others are as stored.
    assert_eq!(with_extra_data(&v), vec![44.0, 55.0, 20.0, 40.0], "{v:?}");
    assert!(v[..4].iter().all(|d| d.status.is_none()), "{v:?}");
    // Also as a bound, at a time (a raw value), and passed through by a processed read
    // (Start, a raw value: Part 13 §5.3.3.1); not on what is calculated from it (Average).
    let r = history_read(
        &mut c,
        ExtensionObject::from_struct(&ReadRawModifiedDetails {
            start_time: at(t0, 4.5),
            end_time: at(t0, 4.8),
            return_bounds: true,
            ..Default::default()
        }),
        vec![HistoryReadValueId {
            node_id: id.clone(),
            ..Default::default()
        }],
    );
    assert_eq!(
        with_extra_data(&self::data(&r.results[0])),
        vec![44.0, 55.0]
    );
    let r = history_read(
        &mut c,
        ExtensionObject::from_struct(&ReadAtTimeDetails {
            req_times: vec![at(t0, 3.0), at(t0, 4.0)],
            use_simple_bounds: true,
        }),
        vec![HistoryReadValueId {
            node_id: id.clone(),
            ..Default::default()
        }],
    );
    assert_eq!(with_extra_data(&self::data(&r.results[0])), vec![44.0]);
    let start = processed(&mut c, &id, 2357, at(t0, 4.0), at(t0, 5.0), None);
    assert_eq!(with_extra_data(&[start]), vec![44.0]);
    let avg = processed(&mut c, &id, 2342, at(t0, 4.0), at(t0, 5.0), None);
    assert_eq!(with_extra_data(&[avg]), Vec::<f64>::new());
    // The modified values (isReadModified): what was replaced or deleted (the old value),
    // what was inserted (the new one), each with its ModificationInfo; in time order.
    let updated_at = uaring::clock::utc_now();
    let modified = |c: &mut Client, s: f64, e: f64, bounds: bool| {
        let r = history_read(
            c,
            ExtensionObject::from_struct(&ReadRawModifiedDetails {
                is_read_modified: true,
                start_time: at(t0, s),
                end_time: at(t0, e),
                return_bounds: bounds,
                ..Default::default()
            }),
            vec![HistoryReadValueId {
                node_id: id.clone(),
                ..Default::default()
            }],
        );
        r.results.into_iter().next().unwrap()
    };
    let r = modified(&mut c, 0.0, 100.0, false);
    assert_eq!(r.status_code, StatusCode::Good);
    let m = r
        .history_data
        .decode_as::<HistoryModifiedData>(DecodeLimits::default())
        .expect("HistoryModifiedData")
        .expect("decodes");
    assert_eq!(
        doubles(&m.data_values),
        vec![4.0, 5.0, 6.0, 7.0, 8.0, 20.0, 40.0]
    );
    let kinds: Vec<HistoryUpdateType> =
        m.modification_infos.iter().map(|i| i.update_type).collect();
    use HistoryUpdateType as U;
    assert_eq!(
        kinds,
        vec![
            U::Replace,
            U::Update,
            U::Delete,
            U::Delete,
            U::Delete,
            U::Insert,
            U::Insert
        ]
    );
    for i in &m.modification_infos {
        assert!(i.user_name.is_null(), "anonymous: no user name");
        let age = updated_at.0 - i.modification_time.0;
        assert!((0..600_000_000).contains(&age), "made just now: {age}");
    }
    assert!(m.data_values.iter().all(|d| d.source_timestamp.is_some()));
    // Backwards, and returnBounds refused.
    let r = modified(&mut c, 100.0, 0.0, false);
    let back = r
        .history_data
        .decode_as::<HistoryModifiedData>(DecodeLimits::default())
        .unwrap()
        .unwrap();
    assert_eq!(
        doubles(&back.data_values),
        vec![40.0, 20.0, 8.0, 7.0, 6.0, 5.0, 4.0]
    );
    assert_eq!(
        modified(&mut c, 0.0, 100.0, true).status_code,
        StatusCode::BadInvalidArgument
    );
    // isDeleteModified deletes the modified values of a range, not the values.
    let r = history_update(
        &mut c,
        vec![
            ExtensionObject::from_struct(&DeleteRawModifiedDetails {
                node_id: id.clone(),
                is_delete_modified: true,
                start_time: at(t0, 6.0),
                end_time: at(t0, 9.0),
            }),
            ExtensionObject::from_struct(&DeleteRawModifiedDetails {
                node_id: id.clone(),
                is_delete_modified: true,
                start_time: at(t0, 60.0),
                end_time: at(t0, 70.0),
            }),
        ],
    );
    assert_eq!(r[0].status_code, StatusCode::Good);
    assert_eq!(r[1].status_code, StatusCode::BadNoData);
    let m = modified(&mut c, 0.0, 100.0, false)
        .history_data
        .decode_as::<HistoryModifiedData>(DecodeLimits::default())
        .unwrap()
        .unwrap();
    assert_eq!(doubles(&m.data_values), vec![4.0, 5.0, 20.0, 40.0]);
    let (v, _) = read_all(&mut c, &id, t0, end, 0);
    assert_eq!(v.len(), 9, "the values are untouched");
    let _ = c.close();
    drop(level);
    server.shutdown().unwrap();

    // A read-only user may read history, not edit it.
    let mut b = builder(dir, backend).set("security", "anonymous", "read".into());
    let ns = b.namespace("urn:test:history");
    b.add_variable(VariableDef::new(ns.id("Level"), "Level", 0.0).historize());
    let server = b.start().expect("restart");
    let mut c = session(&server.endpoint_url());
    let r = history_update(
        &mut c,
        vec![data(PerformUpdateType::Insert, vec![dv(at(t0, 70.0), 7.0)])],
    );
    assert_eq!(r[0].status_code, StatusCode::BadUserAccessDenied);
    let (v, _) = read_all(&mut c, &id, t0, end, 0);
    assert_eq!(v.len(), 9, "the edits above were durable");
    assert_eq!(
        with_extra_data(&v),
        vec![44.0, 55.0, 20.0, 40.0],
        "and so are the modified values behind ExtraData"
    );
    let _ = c.close();
    server.shutdown().unwrap();
}

/// A full ingest queue drops values, and says so in the history: the next value of the
/// series that gets through is preceded by Bad_DataLost at the first dropped time.
pub fn lost_values_are_marked(dir: &Dir, backend: &Backend, on_full: &str) {
    let t0 = t0();
    let mut b = builder(dir, backend)
        .set("history", "queue_capacity", 2i64.into())
        .set("history", "on_full", on_full.into());
    let ns = b.namespace("urn:test:history");
    // A node of its own per mode (a database keeps both runs).
    let name = format!("Level-{on_full}");
    let level = b.add_variable(VariableDef::new(ns.id(&name), &name, 0.0).historize());
    let server = b.start().expect("start");
    let nsi = server.namespace_index("urn:test:history").unwrap();
    let id = NodeId::string(nsi, &name);
    let n = 20_000;
    for i in 0..n {
        level
            .set_with(dv(at(t0, i as f64 / 100.0), i as f64))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let last = at(t0, n as f64 / 100.0);
    level.set_with(dv(last, -1.0)).unwrap();
    let mut c = session(&server.endpoint_url());
    let end = at(t0, 1000.0);
    let deadline = Instant::now() + TIMEOUT;
    let v = loop {
        let (v, _) = read_all(&mut c, &id, t0, end, 0);
        if v.last().map(|d| d.source_timestamp) == Some(Some(last)) || Instant::now() > deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let good: Vec<&DataValue> = v.iter().filter(|d| d.status.is_none()).collect();
    let lost: Vec<&DataValue> = v
        .iter()
        .filter(|d| d.status == Some(StatusCode::BadDataLost))
        .collect();
    assert!(
        good.len() < n + 1,
        "a queue of 2 dropped some of {n} pushes in a row"
    );
    assert!(!lost.is_empty(), "and said so");
    assert_eq!(good.len() + lost.len(), v.len(), "nothing else");
    // Every marker stands at the time of a value that is missing.
    let kept: std::collections::HashSet<i64> =
        good.iter().map(|d| d.source_timestamp.unwrap().0).collect();
    for m in &lost {
        assert!(!kept.contains(&m.source_timestamp.unwrap().0));
    }
    let _ = c.close();
    drop(level);
    server.shutdown().unwrap();
}

fn select(name: &str) -> SimpleAttributeOperand {
    SimpleAttributeOperand {
        type_definition_id: NodeId::ns0(2041),
        browse_path: vec![uaring::QualifiedName::new(0, name)],
        attribute_id: 13,
        ..Default::default()
    }
}

fn event_filter(names: &[&str]) -> EventFilter {
    EventFilter {
        select_clauses: names.iter().map(|n| select(n)).collect(),
        ..Default::default()
    }
}

/// The Server object's event history between `from` and `to`: (EventId, Message) each.
fn server_events(c: &mut Client, from: DateTime, to: DateTime) -> Vec<(Vec<u8>, String)> {
    notifier_events(c, NodeId::ns0(2253), from, to).unwrap_or_else(|s| panic!("{s:?}"))
}

/// The event history of `notifier` between `from` and `to`: (EventId, Message) each, or
/// the operation's bad status.
pub fn notifier_events(
    c: &mut Client,
    notifier: NodeId,
    from: DateTime,
    to: DateTime,
) -> Result<Vec<(Vec<u8>, String)>, StatusCode> {
    let r = history_read(
        c,
        ExtensionObject::from_struct(&ReadEventDetails {
            start_time: from,
            end_time: to,
            filter: event_filter(&["EventId", "Message"]),
            ..Default::default()
        }),
        vec![HistoryReadValueId {
            node_id: notifier,
            ..Default::default()
        }],
    );
    let res = &r.results[0];
    if !res.status_code.is_good() {
        return Err(res.status_code);
    }
    if res.history_data.is_null() {
        return Ok(Vec::new());
    }
    let h = res
        .history_data
        .decode_as::<HistoryEvent>(DecodeLimits::default())
        .unwrap()
        .unwrap();
    Ok(h.events
        .iter()
        .map(|e| {
            let id = match &e.event_fields[0] {
                Variant::ByteString(b) => b.as_bytes().to_vec(),
                o => panic!("{o:?}"),
            };
            let msg = match &e.event_fields[1] {
                Variant::LocalizedText(t) => t.text.as_str().to_string(),
                o => panic!("{o:?}"),
            };
            (id, msg)
        })
        .collect())
}

/// HistoryUpdate of the Server object's event history (Part 11 §6.9.4, §6.9.7): events
/// inserted (back-filled, with and without an EventId), replaced by EventId, updated,
/// deleted by EventId; the statuses of each; read back with ReadEventDetails; the
/// capabilities say so; a read-only user may not.
pub fn event_history_is_inserted_replaced_updated_and_deleted(dir: &Dir, backend: &Backend) {
    let t0 = t0();
    let b = builder(dir, backend);
    let mut b = b;
    let ns = b.namespace("urn:test:history");
    b.add_variable(VariableDef::new(ns.id("Level"), "Level", 0.0).historize());
    let server = b.start().expect("start");
    let mut c = session(&server.endpoint_url());
    // The capabilities and the Server object's EventNotifier say event history is editable.
    let v = c
        .read_values(&[
            NodeId::ns0(
                uaring_core::generated::node_ids::HistoryServerCapabilities_InsertEventCapability,
            ),
            NodeId::ns0(
                uaring_core::generated::node_ids::HistoryServerCapabilities_ReplaceEventCapability,
            ),
            NodeId::ns0(
                uaring_core::generated::node_ids::HistoryServerCapabilities_UpdateEventCapability,
            ),
            NodeId::ns0(
                uaring_core::generated::node_ids::HistoryServerCapabilities_DeleteEventCapability,
            ),
        ])
        .unwrap();
    assert!(v.iter().all(|d| d.value == Variant::Boolean(true)), "{v:?}");
    let fields = [
        "EventId",
        "EventType",
        "Time",
        "SourceName",
        "Message",
        "Severity",
    ];
    let entry = |id: &[u8], t: f64, msg: &str| HistoryEventFieldList {
        event_fields: vec![
            Variant::ByteString(id.to_vec().into()),
            Variant::NodeId(Box::new(NodeId::ns0(2041))),
            Variant::DateTime(at(t0, t)),
            Variant::String("Backfill".into()),
            Variant::LocalizedText(Box::new(uaring::LocalizedText::text(msg))),
            Variant::UInt16(300),
        ],
    };
    let update =
        |mode: PerformUpdateType, filter: EventFilter, data: Vec<HistoryEventFieldList>| {
            ExtensionObject::from_struct(&UpdateEventDetails {
                node_id: NodeId::ns0(2253),
                perform_insert_replace: mode,
                filter,
                event_data: data,
            })
        };
    let id1 = b"history-event-01".to_vec();
    let id2 = b"history-event-02".to_vec();
    let r = history_update(
        &mut c,
        vec![
            update(
                PerformUpdateType::Insert,
                event_filter(&fields),
                vec![entry(&id1, 1.0, "one"), entry(b"", 2.0, "two")],
            ),
            update(
                PerformUpdateType::Insert,
                event_filter(&fields),
                vec![entry(&id1, 1.0, "again")],
            ),
            // No Time among the fields.
            update(
                PerformUpdateType::Insert,
                event_filter(&["EventId", "EventType"]),
                vec![HistoryEventFieldList {
                    event_fields: vec![
                        Variant::ByteString(b"x".to_vec().into()),
                        Variant::NodeId(Box::new(NodeId::ns0(2041))),
                    ],
                }],
            ),
            // Not an event type; too few fields.
            update(
                PerformUpdateType::Insert,
                event_filter(&["EventType", "Time"]),
                vec![
                    HistoryEventFieldList {
                        event_fields: vec![
                            Variant::NodeId(Box::new(NodeId::ns0(2253))),
                            Variant::DateTime(at(t0, 3.0)),
                        ],
                    },
                    HistoryEventFieldList {
                        event_fields: vec![Variant::NodeId(Box::new(NodeId::ns0(2041)))],
                    },
                ],
            ),
            // Delete (Remove) is not an event update.
            update(PerformUpdateType::Remove, event_filter(&fields), vec![]),
        ],
    );
    let statuses: Vec<(StatusCode, Vec<StatusCode>)> = r
        .iter()
        .map(|x| (x.status_code, x.operation_results.clone()))
        .collect();
    assert_eq!(
        statuses,
        vec![
            (
                StatusCode::Good,
                vec![StatusCode::GoodEntryInserted, StatusCode::GoodEntryInserted]
            ),
            (StatusCode::Good, vec![StatusCode::BadEntryExists]),
            (StatusCode::BadArgumentsMissing, vec![]),
            (
                StatusCode::Good,
                vec![
                    StatusCode::BadTypeDefinitionInvalid,
                    StatusCode::BadInvalidArgument
                ]
            ),
            (StatusCode::BadInvalidArgument, vec![]),
        ]
    );
    let (from, to) = (t0, at(t0, 100.0));
    let ev = server_events(&mut c, from, to);
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[0], (id1.clone(), "one".to_string()));
    assert_eq!(ev[1].1, "two");
    assert_eq!(ev[1].0.len(), 16, "an EventId was made for it");
    let generated = ev[1].0.clone();
    // Replace by EventId (the one there, one not); Update (one there, one new).
    let r = history_update(
        &mut c,
        vec![
            update(
                PerformUpdateType::Replace,
                event_filter(&fields),
                vec![
                    entry(&id1, 1.0, "one, replaced"),
                    entry(b"nowhere", 5.0, "no"),
                ],
            ),
            update(
                PerformUpdateType::Update,
                event_filter(&fields),
                vec![
                    entry(&generated, 2.5, "two, moved"),
                    entry(&id2, 4.0, "four"),
                ],
            ),
            // Replace without EventId among the fields.
            update(
                PerformUpdateType::Replace,
                event_filter(&["EventType", "Time"]),
                vec![],
            ),
        ],
    );
    let statuses: Vec<(StatusCode, Vec<StatusCode>)> = r
        .iter()
        .map(|x| (x.status_code, x.operation_results.clone()))
        .collect();
    assert_eq!(
        statuses,
        vec![
            (
                StatusCode::Good,
                vec![StatusCode::GoodEntryReplaced, StatusCode::BadNoEntryExists]
            ),
            (
                StatusCode::Good,
                vec![StatusCode::GoodEntryReplaced, StatusCode::GoodEntryInserted]
            ),
            (StatusCode::BadArgumentsMissing, vec![]),
        ]
    );
    let msgs: Vec<String> = server_events(&mut c, from, to)
        .into_iter()
        .map(|e| e.1)
        .collect();
    assert_eq!(msgs, vec!["one, replaced", "two, moved", "four"]);
    // Delete by EventId.
    let r = history_update(
        &mut c,
        vec![ExtensionObject::from_struct(&DeleteEventDetails {
            node_id: NodeId::ns0(2253),
            event_ids: vec![generated.into(), b"nowhere".to_vec().into()],
        })],
    );
    assert_eq!(
        r[0].operation_results,
        vec![StatusCode::Good, StatusCode::BadNoEntryExists]
    );
    let ev = server_events(&mut c, from, to);
    assert_eq!(
        ev.iter().map(|e| e.1.as_str()).collect::<Vec<_>>(),
        vec!["one, replaced", "four"]
    );
    let _ = c.close();
    server.shutdown().unwrap();

    // A read-only user may read event history, not edit it.
    let mut b = builder(dir, backend).set("security", "anonymous", "read".into());
    let ns = b.namespace("urn:test:history");
    b.add_variable(VariableDef::new(ns.id("Level"), "Level", 0.0).historize());
    let server = b.start().expect("restart");
    let mut c = session(&server.endpoint_url());
    let r = history_update(
        &mut c,
        vec![ExtensionObject::from_struct(&DeleteEventDetails {
            node_id: NodeId::ns0(2253),
            event_ids: vec![id1.into()],
        })],
    );
    assert_eq!(r[0].status_code, StatusCode::BadUserAccessDenied);
    assert_eq!(
        server_events(&mut c, from, to).len(),
        2,
        "kept across the restart"
    );
    let _ = c.close();
    server.shutdown().unwrap();
}

/// A Variable added while the server runs with `add_historized_variable`: its initial value
/// and every value stored after are its history; deleted, no more are taken and a HistoryRead
/// of it is BadNodeIdUnknown (docs/History.md, "Variables added while serving").
pub fn a_run_time_variable_is_historized_until_it_is_deleted(dir: &Dir, backend: &Backend) {
    let t0 = t0();
    let server = builder(dir, backend).start().expect("start");
    let id = NodeId::string(1, "RunTime.Level");
    let level = server
        .add_historized_variable(&NodeId::ns0(85), id.clone(), "RunTimeLevel", 0.5, false)
        .expect("add historized");
    for i in 0..5 {
        level.set_with(dv(at(t0, i as f64), i as f64)).unwrap();
    }
    let mut c = session(&server.endpoint_url());
    let end = at(t0, 100.0);
    wait_for(&mut c, &id, t0, end, 5);
    let (v, _) = read_all(&mut c, &id, t0, end, 0);
    assert_eq!(doubles(&v), vec![0.0, 1.0, 2.0, 3.0, 4.0]);
    // Its initial value, stored now, is its first sample of all.
    let now_end = at(uaring::clock::utc_now(), 60.0);
    let (all, _) = read_all(&mut c, &id, t0, now_end, 0);
    assert_eq!(doubles(&all), vec![0.0, 1.0, 2.0, 3.0, 4.0, 0.5]);
    server.delete_nodes(std::slice::from_ref(&id)).unwrap();
    let r = history_read(
        &mut c,
        ExtensionObject::from_struct(&ReadRawModifiedDetails {
            is_read_modified: false,
            start_time: t0,
            end_time: end,
            num_values_per_node: 0,
            return_bounds: false,
        }),
        vec![HistoryReadValueId {
            node_id: id.clone(),
            ..Default::default()
        }],
    );
    assert_eq!(r.results[0].status_code, StatusCode::BadNodeIdUnknown);
    server.shutdown().unwrap();
}
