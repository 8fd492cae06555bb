//! A plant of N Double sensors pushed by one application thread, a setpoint guarded by a
//! write hook, a computed push counter, a method and events.
//!
//! `plant [--config FILE] [--listen HOST:PORT] [--variables N] [--rate HZ] [--pki DIR] [--shards N]
//! [--background-cpus EXPR]` (defaults: the embedded configuration, 127.0.0.1:4840, 100, 1, ./pki,
//! one shard per CPU, background threads not pinned: `runtime.background_cpus`).
//!
//! * Namespace `urn:uaring:example:plant`; folder `s=Plant` under Objects (an event notifier).
//! * `s=Plant.V<i>` for i in 0..N: Double, read-only. The thread named `push` pushes every one
//!   HZ times a second on absolute deadlines, spread evenly: the k-th push of a variable
//!   (k = 1, 2, …) sets it to the Double k, source-timestamped at the push. Initial value 0.
//! * `s=Plant.Setpoint`: Double, writable; the write hook refuses values outside 0..=100
//!   (Bad_OutOfRange). Above 90 it activates the alarm `s=Plant.HighSetpoint` (a
//!   NonExclusiveLevelAlarmType of `Plant` with the Property HighLimit 90, severity 800), at
//!   90 or below it deactivates it.
//! * `s=Plant.HighLimit` and `s=Plant.LowLimit`: Double, writable, initially 95 and 5; the
//!   namespace's write hook (every writable Variable of the namespace without a hook of its
//!   own) refuses values that are not finite Doubles (Bad_OutOfRange).
//! * `s=Plant.AlarmAcks` (UInt32) and `s=Plant.AlarmLastComment` (String): what the
//!   application's alarm hook saw: the acknowledgements so far and the last comment.
//! * `s=Plant.Pushes`: UInt64, computed at every read: the pushes made so far.
//! * `s=Plant.Reset()` → `Pushes: UInt64`: returns the pushes made so far, restarts that count
//!   and raises a BaseEventType event "plant reset" (severity 500) from `Plant`.
//! * A simulated device on its own thread (`device`) that answers every request 50 ms later:
//!   `s=Plant.Device` (Double, an asynchronous source: each Read and sample waits for the
//!   device, which answers the device's current value) and `s=Plant.DeviceSetpoint` (Double,
//!   writable through an asynchronous write hook: the device takes the value 50 ms later and
//!   refuses negative ones with Bad_OutOfRange).
//! * `s=Plant.Calibrate(Seconds: Double)` → `Seconds: Double`: a slow method run on the
//!   server's worker pool (it sleeps the given seconds, at most 5) while the shards go on.
//! * `s=Plant.Burst(Count: UInt32)`: pushes 1, 2, …, Count (at most 100,000) into
//!   `s=Plant.BurstValue` (Double) back to back from a worker thread, then answers.
//! * Prints `listening on opc.tcp://HOST:PORT` once accepting; SIGINT/SIGTERM stop it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::mpsc::{sync_channel, Receiver, TrySendError};

use uaring::{
    objects_folder, AlarmDef, ArgDef, AsyncRead, AsyncWrite, BuiltinType, ConditionAction,
    DataValue, EventDef, MethodDef, NodeRef, ObjectDef, Server, StatusCode, VariableDef, Variant,
};

/// NonExclusiveLevelAlarmType (namespace 0).
const NON_EXCLUSIVE_LEVEL_ALARM_TYPE: u32 = 10060;
/// The setpoint above which the alarm is active (its HighLimit).
const SETPOINT_HIGH: f64 = 90.0;

/// A request to the simulated device, with the time it was made.
enum DeviceJob {
    Read(AsyncRead, Instant),
    Write(f64, AsyncWrite, Instant),
}

/// The device: answers each request 50 ms after it was made, in order.
fn device(jobs: Receiver<DeviceJob>) {
    let mut current = 0.0;
    for job in jobs {
        let made = match &job {
            DeviceJob::Read(_, t) | DeviceJob::Write(_, _, t) => *t,
        };
        std::thread::sleep(
            (made + Duration::from_millis(50)).saturating_duration_since(Instant::now()),
        );
        match job {
            DeviceJob::Read(r, _) => r.complete(DataValue {
                value: Variant::Double(current),
                source_timestamp: None,
                ..Default::default()
            }),
            DeviceJob::Write(x, w, _) if x < 0.0 => w.complete(StatusCode::BadOutOfRange),
            DeviceJob::Write(x, w, _) => {
                current = x;
                w.complete(StatusCode::Good);
            }
        }
    }
}

struct Args {
    config: Option<String>,
    listen: String,
    variables: usize,
    rate_hz: f64,
    pki: Option<String>,
    shards: Option<usize>,
    background_cpus: Option<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        config: None,
        listen: "127.0.0.1:4840".into(),
        variables: 100,
        rate_hz: 1.0,
        pki: None,
        shards: None,
        background_cpus: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or_else(|| format!("{k} needs a value"));
        match k.as_str() {
            "--config" => a.config = Some(v()?),
            "--listen" => a.listen = v()?,
            "--variables" => a.variables = v()?.parse().map_err(|e| format!("--variables: {e}"))?,
            "--rate" => a.rate_hz = v()?.parse().map_err(|e| format!("--rate: {e}"))?,
            "--pki" => a.pki = Some(v()?),
            "--shards" => a.shards = Some(v()?.parse().map_err(|e| format!("--shards: {e}"))?),
            "--background-cpus" => a.background_cpus = Some(v()?),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if a.variables == 0 || a.variables > 10_000_000 {
        return Err("--variables must be in 1..=10000000".into());
    }
    if !(a.rate_hz.is_finite() && a.rate_hz > 0.0 && a.rate_hz <= 1000.0) {
        return Err("--rate must be in (0, 1000]".into());
    }
    Ok(a)
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("plant: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(a) {
        eprintln!("plant: {e}");
        std::process::exit(1);
    }
}

fn run(a: Args) -> Result<(), uaring::Error> {
    let mut b = Server::builder();
    if let Some(c) = &a.config {
        b = b.config_file(c);
    }
    let mut b = b.listen(&a.listen);
    if let Some(p) = &a.pki {
        b = b.pki(p);
    }
    if let Some(n) = a.shards {
        b = b.shards(n);
    }
    if let Some(c) = &a.background_cpus {
        b = b.background_cpus(c);
    }
    let ns = b.namespace("urn:uaring:example:plant");
    let plant = b.add_object(
        ObjectDef::folder(ns.id("Plant"), "Plant")
            .organized_by(&objects_folder())
            .event_notifier(true),
    );
    // The names are formatted into one buffer (a million sensors make no temporary
    // strings beyond those the definitions keep).
    let mut name = String::new();
    let sensors: Vec<_> = (0..a.variables)
        .map(|i| {
            use std::fmt::Write;
            name.clear();
            let _ = write!(name, "Plant.V{i}");
            let id = ns.id(&name);
            b.add_variable(
                VariableDef::new(id, name.strip_prefix("Plant.").unwrap_or(&name), 0.0)
                    .organized_by(&plant),
            )
        })
        .collect();
    let acks = b.add_variable(
        VariableDef::new(ns.id("Plant.AlarmAcks"), "AlarmAcks", 0u32).component_of(&plant),
    );
    let last_comment = b.add_variable(
        VariableDef::new(ns.id("Plant.AlarmLastComment"), "AlarmLastComment", "")
            .component_of(&plant),
    );
    let acked = Arc::new(AtomicU64::new(0));
    let alarm = b.add_alarm(
        AlarmDef::new(ns.id("Plant.HighSetpoint"), "HighSetpoint", &plant)
            .of_type(NodeRef::ns0(NON_EXCLUSIVE_LEVEL_ALARM_TYPE))
            .property("HighLimit", SETPOINT_HIGH)
            .on_action(move |a| {
                if a.action == ConditionAction::Acknowledge {
                    let n = acked.fetch_add(1, Ordering::Relaxed) + 1;
                    let _ = acks.set(n as u32);
                    let _ = last_comment.set(a.comment.text.as_str());
                }
            }),
    );
    b.add_variable(
        VariableDef::new(ns.id("Plant.Setpoint"), "Setpoint", 50.0)
            .component_of(&plant)
            .on_write(move |w| match w.value.value {
                Variant::Double(x) if (0.0..=100.0).contains(&x) => {
                    let _ = alarm.set_active(
                        x > SETPOINT_HIGH,
                        if x > SETPOINT_HIGH { 800 } else { 100 },
                        &format!("setpoint {x}"),
                    );
                    Ok(())
                }
                _ => Err(StatusCode::BadOutOfRange),
            }),
    );
    // The namespace's write hook: every writable plant Variable without a hook of its own
    // (here the limits) takes finite Doubles only.
    for (id, name, x) in [
        ("Plant.HighLimit", "HighLimit", 95.0),
        ("Plant.LowLimit", "LowLimit", 5.0),
    ] {
        b.add_variable(
            VariableDef::new(ns.id(id), name, x)
                .component_of(&plant)
                .writable(true),
        );
    }
    b.on_write_in(&ns, |w| match w.value.value {
        Variant::Double(x) if x.is_finite() => Ok(()),
        _ => Err(StatusCode::BadOutOfRange),
    });
    let pushes = Arc::new(AtomicU64::new(0));
    let baseline = Arc::new(AtomicU64::new(0));
    let (p, base) = (pushes.clone(), baseline.clone());
    b.add_variable(
        VariableDef::computed(
            ns.id("Plant.Pushes"),
            "Pushes",
            BuiltinType::UInt64,
            move |now| DataValue {
                value: Variant::UInt64(p.load(Ordering::Relaxed) - base.load(Ordering::Relaxed)),
                source_timestamp: Some(now.utc),
                ..Default::default()
            },
        )
        .component_of(&plant),
    );
    let events = b.events();
    let (p, base, source) = (pushes.clone(), baseline.clone(), plant.clone());
    b.add_method(
        MethodDef::new(ns.id("Plant.Reset"), "Reset", &plant, move |_call| {
            let now = p.load(Ordering::Relaxed);
            let before = now - base.swap(now, Ordering::Relaxed);
            let _ = events.raise(EventDef::new(
                NodeRef::ns0(2041),
                &source,
                "plant reset",
                500,
            ));
            Ok(vec![Variant::UInt64(before)])
        })
        .output(
            ArgDef::scalar("Pushes", BuiltinType::UInt64).describe("pushes since the last reset"),
        ),
    );
    let (jobs, device_jobs) = sync_channel::<DeviceJob>(1024);
    let reads = jobs.clone();
    b.add_variable(
        VariableDef::asynchronous(
            ns.id("Plant.Device"),
            "Device",
            BuiltinType::Double,
            move |r: AsyncRead| {
                if let Err(
                    TrySendError::Full(DeviceJob::Read(r, _))
                    | TrySendError::Disconnected(DeviceJob::Read(r, _)),
                ) = reads.try_send(DeviceJob::Read(r, Instant::now()))
                {
                    r.fail(StatusCode::BadResourceUnavailable);
                }
            },
        )
        .component_of(&plant)
        .timeout_ms(1_000),
    );
    b.add_variable(
        VariableDef::new(ns.id("Plant.DeviceSetpoint"), "DeviceSetpoint", 0.0)
            .component_of(&plant)
            .on_write_async(move |w, done| {
                let Variant::Double(x) = w.value.value else {
                    return done.complete(StatusCode::BadTypeMismatch);
                };
                if let Err(
                    TrySendError::Full(DeviceJob::Write(_, d, _))
                    | TrySendError::Disconnected(DeviceJob::Write(_, d, _)),
                ) = jobs.try_send(DeviceJob::Write(x, done, Instant::now()))
                {
                    d.complete(StatusCode::BadResourceUnavailable);
                }
            })
            .timeout_ms(1_000),
    );
    let workers = b.workers()?;
    b.add_method(
        MethodDef::on_pool(
            ns.id("Plant.Calibrate"),
            "Calibrate",
            &plant,
            10_000,
            &workers,
            |call| {
                let Some(Variant::Double(s)) = call.inputs.first() else {
                    return Err(StatusCode::BadInvalidArgument);
                };
                let s = s.clamp(0.0, 5.0);
                std::thread::sleep(Duration::from_secs_f64(s));
                Ok(vec![Variant::Double(s)])
            },
        )
        .input(ArgDef::scalar("Seconds", BuiltinType::Double))
        .output(ArgDef::scalar("Seconds", BuiltinType::Double)),
    );
    let burst = b.add_variable(
        VariableDef::new(ns.id("Plant.BurstValue"), "BurstValue", 0.0).component_of(&plant),
    );
    b.add_method(
        MethodDef::on_pool(
            ns.id("Plant.Burst"),
            "Burst",
            &plant,
            10_000,
            &workers,
            move |call| {
                let Some(Variant::UInt32(n)) = call.inputs.first() else {
                    return Err(StatusCode::BadInvalidArgument);
                };
                for k in 1..=(*n).min(100_000) {
                    burst
                        .set(k as f64)
                        .map_err(|_| StatusCode::BadInternalError)?;
                }
                Ok(vec![])
            },
        )
        .input(ArgDef::scalar("Count", BuiltinType::UInt32)),
    );
    std::thread::Builder::new()
        .name("device".into())
        .spawn(move || device(device_jobs))
        .map_err(|e| uaring::Error::Start(format!("device thread: {e}")))?;
    let server = b.start()?;
    server.print_listening();
    let rate = a.rate_hz * a.variables as f64;
    std::thread::Builder::new()
        .name("push".into())
        .spawn(move || push(&sensors, rate, &pushes))
        .map_err(|e| uaring::Error::Start(format!("push thread: {e}")))?;
    server.run_until_signal()
}

/// Pushes `rate` values a second over `sensors` in turn, on absolute deadlines: every 10 ms
/// (ticks at start + k × 10 ms) it makes the pushes due by then, floor(t × rate) in all (a late
/// thread catches up at once). One wake-up per tick: waking per push cost more in context
/// switches than the pushes themselves on the development VM.
fn push(sensors: &[uaring::Variable], rate: f64, pushes: &AtomicU64) {
    const TICK: Duration = Duration::from_millis(10);
    let start = Instant::now();
    let n = sensors.len() as u64;
    let mut done = 0u64;
    let mut tick = start;
    loop {
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        while done < due {
            let (i, k) = (done % n, done / n + 1);
            if sensors[i as usize].set(k as f64).is_err() {
                return;
            }
            done += 1;
        }
        pushes.store(done, Ordering::Relaxed);
        tick += TICK;
        std::thread::sleep(tick.saturating_duration_since(Instant::now()));
    }
}
