//! The Demo folder of `uaring serve` (string ids in the application namespace), built with
//! the public API like any application's nodes:
//!
//! | NodeId (ns=1) | what |
//! |---|---|
//! | `s=Demo` | folder under Objects; an event notifier (the Server object HasNotifier it) |
//! | `s=Demo.Static.<Type>` | a writable scalar of every built-in type (`Variant`: BaseDataType) |
//! | `s=Demo.Static.Arrays.<Type>` | a writable one-dimensional array (10 elements) of each |
//! | `s=Demo.ReadOnly.Int32` | read-only Int32 42 |
//! | `s=Demo.Dynamic.Counter` | computed UInt32: +1 every 100 ms since the start |
//! | `s=Demo.Dynamic.Sine` | computed Double: sin(2π t / 10 s), t its SourceTimestamp |
//! | `s=Demo.Events` | event notifier, source of the Demo events and of the alarm |
//! | `s=DemoEventType` | subtype of BaseEventType with the field `1:Sequence` (UInt32) |
//! | `s=Demo.Events.Alarm` | an AlarmConditionType alarm: inactive 10 s, active 10 s, … |
//! | `s=Demo.Methods.Add`, `.Sum`, `.GenerateEvent` | methods (quick, on the shard) |
//! | `s=Demo.History.Level` | historized Double, set every second: 50 + 10·sin(2π t / 1 h), to 0.01 |
//! | `s=Demo.History.Count` | historized Int32, +1 every second |
//! | `s=Demo.History.Setpoint` | historized writable Double: what clients write is kept |
//!
//! [`DemoDriver`], one application thread, raises a DemoEventType event every
//! 1/`events.demo_rate_per_s` s (Message `Demo event <n>`, Severity cycling 100 … 1000,
//! Sequence n), switches the alarm every 10 s and sets the Demo.History values every second
//! (their history goes to the history store, docs/History.md).

use std::sync::mpsc;
use std::time::Duration;

use crate::{
    server_object, Alarm, AlarmDef, ArgDef, BuiltinType, ByteString, DataValue, DateTime, EventDef,
    EventTypeDef, Events, Guid, MethodDef, Namespace, NodeId, NodeRef, ObjectDef, ServerBuilder,
    StatusCode, UaString, VariableDef, Variant,
};

/// Counter period, milliseconds.
pub const COUNTER_PERIOD_MS: u64 = 100;
/// Sine period, milliseconds.
pub const SINE_PERIOD_MS: u64 = 10_000;
/// Half the alarm's cycle: it is inactive this long, then active this long.
pub const ALARM_HALF_PERIOD_MS: u64 = 10_000;
/// The alarm's Severity while active and inactive.
pub const ALARM_SEVERITY_ACTIVE: u16 = 700;
pub const ALARM_SEVERITY_INACTIVE: u16 = 100;
/// Longest Message of GenerateEvent, characters.
pub const MAX_MESSAGE_CHARS: usize = 4096;
/// Most Demo events one wake-up of the driver raises (a driver that fell behind skips the
/// older ones).
pub const MAX_CATCH_UP: u64 = 10_000;

/// HasNotifier (namespace 0).
const HAS_NOTIFIER: u32 = 48;
/// BaseObjectType, BaseDataType (namespace 0).
const BASE_OBJECT_TYPE: u32 = 58;
const BASE_DATA_TYPE: u32 = 24;

/// The built-in types of the Demo.Static variables: (name, DataType id, initial value).
pub fn demo_types() -> Vec<(&'static str, u32, Variant)> {
    vec![
        ("Boolean", 1, Variant::Boolean(false)),
        ("SByte", 2, Variant::SByte(0)),
        ("Byte", 3, Variant::Byte(0)),
        ("Int16", 4, Variant::Int16(0)),
        ("UInt16", 5, Variant::UInt16(0)),
        ("Int32", 6, Variant::Int32(0)),
        ("UInt32", 7, Variant::UInt32(0)),
        ("Int64", 8, Variant::Int64(0)),
        ("UInt64", 9, Variant::UInt64(0)),
        ("Float", 10, Variant::Float(0.0)),
        ("Double", 11, Variant::Double(0.0)),
        ("String", 12, Variant::String(UaString::from(""))),
        ("DateTime", 13, Variant::DateTime(DateTime::NULL)),
        ("Guid", 14, Variant::Guid(Guid::NULL)),
        (
            "ByteString",
            15,
            Variant::ByteString(ByteString::from(Vec::new())),
        ),
        ("NodeId", 17, Variant::NodeId(Box::new(NodeId::NULL))),
        ("QualifiedName", 20, Variant::QualifiedName(Box::default())),
        ("LocalizedText", 21, Variant::LocalizedText(Box::default())),
        ("StatusCode", 19, Variant::StatusCode(StatusCode::Good)),
        // DataType BaseDataType: any value; starts as Int32 0.
        ("Variant", BASE_DATA_TYPE, Variant::Int32(0)),
    ]
}

/// What the Demo's thread needs once the server runs ([`DemoParts::start`]).
pub struct DemoParts {
    events: Events,
    alarm: Alarm,
    /// Demo.History.Level and .Count.
    level: crate::Variable,
    count: crate::Variable,
    source: NodeRef,
    event_type: NodeRef,
    ns: Namespace,
    rate_per_s: f64,
}

/// Adds the Demo folder to `b`.
pub fn add_demo(b: &mut ServerBuilder, ns: &Namespace, rate_per_s: f64) -> DemoParts {
    let id = |s: &str| ns.id(s);
    let demo = b.add_object(ObjectDef::folder(id("Demo"), "Demo").event_notifier(true));
    b.add_reference(&server_object(), NodeRef::ns0(HAS_NOTIFIER), &demo);
    let stat = b.add_folder(id("Demo.Static"), "Static", &demo);
    let arrays = b.add_folder(id("Demo.Static.Arrays"), "Arrays", &stat);
    let read_only = b.add_folder(id("Demo.ReadOnly"), "ReadOnly", &demo);
    let dynamic = b.add_folder(id("Demo.Dynamic"), "Dynamic", &demo);

    for (name, dt, v) in demo_types() {
        b.add_variable(
            VariableDef::new(id(&format!("Demo.Static.{name}")), name, v.clone())
                .data_type(NodeRef::ns0(dt))
                .component_of(&stat)
                .writable(true),
        );
        let elem = BuiltinType::from_id(dt as u8)
            .filter(|_| dt != BASE_DATA_TYPE)
            .unwrap_or(BuiltinType::Variant);
        let array = Variant::array(elem, vec![v; 10]).unwrap_or(Variant::Empty);
        b.add_variable(
            VariableDef::new(id(&format!("Demo.Static.Arrays.{name}")), name, array)
                .data_type(NodeRef::ns0(dt))
                .value_rank(1, vec![0])
                .component_of(&arrays)
                .writable(true),
        );
    }
    b.add_variable(
        VariableDef::new(id("Demo.ReadOnly.Int32"), "Int32", Variant::Int32(42))
            .component_of(&read_only),
    );
    let start = crate::clock::now();
    b.add_variable(
        VariableDef::computed(
            id("Demo.Dynamic.Counter"),
            "Counter",
            BuiltinType::UInt32,
            move |now| {
                let period_ns = COUNTER_PERIOD_MS * 1_000_000;
                let n = now.mono_ns.saturating_sub(start.mono_ns) / period_ns;
                let ticks = ((n * period_ns) / 100).min(i64::MAX as u64) as i64;
                DataValue {
                    value: Variant::UInt32(n as u32),
                    source_timestamp: Some(DateTime(start.utc.0.saturating_add(ticks))),
                    ..Default::default()
                }
            },
        )
        .minimum_sampling_interval_ms(COUNTER_PERIOD_MS as f64)
        .component_of(&dynamic),
    );
    b.add_variable(
        VariableDef::computed(
            id("Demo.Dynamic.Sine"),
            "Sine",
            BuiltinType::Double,
            move |now| {
                // A function of the SourceTimestamp alone (100 ns ticks since 1601), so a
                // client can check a value against its timestamp.
                let period_ticks = (SINE_PERIOD_MS * 10_000) as i64;
                let phase = now.utc.0.rem_euclid(period_ticks) as f64 / period_ticks as f64;
                DataValue {
                    value: Variant::Double((phase * std::f64::consts::TAU).sin()),
                    source_timestamp: Some(now.utc),
                    ..Default::default()
                }
            },
        )
        .component_of(&dynamic),
    );

    // Events: the source, its event type and the alarm.
    let event_type = b.add_event_type(
        EventTypeDef::new(id("DemoEventType"), "DemoEventType")
            .field("Sequence", BuiltinType::UInt32)
            .description(
                "The events of the Demo event generator and of Demo.Methods.GenerateEvent",
            ),
    );
    let source = b.add_object(
        ObjectDef::new(id("Demo.Events"), "Events", NodeRef::ns0(BASE_OBJECT_TYPE))
            .organized_by(&demo)
            .event_notifier(true),
    );
    b.add_reference(&demo, NodeRef::ns0(HAS_NOTIFIER), &source);
    // Shelvable for up to an hour (its ShelvingState: TimedShelve, OneShotShelve, Unshelve).
    let alarm = b.add_alarm(
        AlarmDef::new(id("Demo.Events.Alarm"), "Alarm", &source)
            .shelving(Some(std::time::Duration::from_secs(3600))),
    );

    // Methods.
    let methods = b.add_folder(id("Demo.Methods"), "Methods", &demo);
    let double = |v: &Variant| if let Variant::Double(x) = v { *x } else { 0.0 };
    b.add_method(
        MethodDef::new(id("Demo.Methods.Add"), "Add", &methods, move |c| {
            match c.inputs {
                [x, y] => Ok(vec![Variant::Double(double(x) + double(y))]),
                _ => Err(StatusCode::BadArgumentsMissing),
            }
        })
        .input(ArgDef::scalar("a", BuiltinType::Double).describe("first addend"))
        .input(ArgDef::scalar("b", BuiltinType::Double).describe("second addend"))
        .output(ArgDef::scalar("sum", BuiltinType::Double).describe("a + b"))
        .read_only_users_allowed(),
    );
    b.add_method(
        MethodDef::new(id("Demo.Methods.Sum"), "Sum", &methods, move |c| {
            let sum = c
                .inputs
                .first()
                .and_then(Variant::as_array)
                .map_or(0.0, |a| a.values.iter().map(double).sum());
            Ok(vec![Variant::Double(sum)])
        })
        .input(ArgDef::array("values", BuiltinType::Double).describe("the numbers to add"))
        .output(ArgDef::scalar("sum", BuiltinType::Double).describe("their sum"))
        .read_only_users_allowed(),
    );
    let events = b.events();
    let (gen_events, gen_source, gen_type, gen_ns) = (
        events.clone(),
        source.clone(),
        event_type.clone(),
        ns.clone(),
    );
    b.add_method(
        MethodDef::new(
            id("Demo.Methods.GenerateEvent"),
            "GenerateEvent",
            &methods,
            move |c| {
                // The server checked the declarations below (types, length, range).
                let (Some(Variant::String(msg)), Some(Variant::UInt16(severity))) =
                    (c.inputs.first(), c.inputs.get(1))
                else {
                    return Err(StatusCode::BadInvalidArgument);
                };
                gen_events
                    .raise(
                        EventDef::new(gen_type.clone(), &gen_source, msg.as_str(), *severity)
                            .field(&gen_ns, "Sequence", Variant::UInt32(0)),
                    )
                    .map(|()| Vec::new())
                    .map_err(|_| StatusCode::BadInternalError)
            },
        )
        .input(
            ArgDef::scalar("Message", BuiltinType::String)
                .describe("Message of the event")
                .max_length(MAX_MESSAGE_CHARS as u32),
        )
        .input(
            ArgDef::scalar("Severity", BuiltinType::UInt16)
                .describe("Severity of the event, 1..=1000")
                .range(1.0, 1000.0),
        ),
    );
    // History: values the store keeps from the start.
    let history = b.add_folder(id("Demo.History"), "History", &demo);
    let level = b.add_variable(
        VariableDef::new(id("Demo.History.Level"), "Level", Variant::Double(50.0))
            .component_of(&history)
            .historize(),
    );
    let count = b.add_variable(
        VariableDef::new(id("Demo.History.Count"), "Count", Variant::Int32(0))
            .component_of(&history)
            .historize(),
    );
    b.add_variable(
        VariableDef::new(
            id("Demo.History.Setpoint"),
            "Setpoint",
            Variant::Double(0.0),
        )
        .component_of(&history)
        .writable(true)
        .historize(),
    );
    DemoParts {
        events,
        alarm,
        level,
        count,
        source,
        event_type,
        ns: ns.clone(),
        rate_per_s,
    }
}

/// The Demo's schedule, a pure function of the time since the start: event n (n = 1, 2, …)
/// is due at `n × period`; the alarm is active in every odd half period.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    /// Event period, ns; `None`: no events.
    pub period_ns: Option<u64>,
}

impl Schedule {
    pub fn new(rate_per_s: f64) -> Schedule {
        Schedule {
            period_ns: (rate_per_s > 0.0).then(|| ((1e9 / rate_per_s).round() as u64).max(1_000)),
        }
    }

    /// The events due by `elapsed_ns` from `next` on: (first, last) indices, at most
    /// [`MAX_CATCH_UP`] of them (the older ones skipped); `None` when none is due.
    pub fn due(&self, next: u64, elapsed_ns: u64) -> Option<(u64, u64)> {
        let last = elapsed_ns / self.period_ns?;
        (last >= next).then(|| (next.max((last + 1).saturating_sub(MAX_CATCH_UP)), last))
    }

    /// Is the alarm active `elapsed_ns` after the start?
    pub fn alarm_active(elapsed_ns: u64) -> bool {
        (elapsed_ns / (ALARM_HALF_PERIOD_MS * 1_000_000)) % 2 == 1
    }

    /// The next instant (ns since the start) after `elapsed_ns` at which something is due:
    /// event `next` or the alarm's next half-period boundary.
    pub fn next_wake(&self, next: u64, elapsed_ns: u64) -> u64 {
        let half = ALARM_HALF_PERIOD_MS * 1_000_000;
        let alarm = (elapsed_ns / half + 1) * half;
        match self.period_ns {
            Some(p) => alarm.min(next.saturating_mul(p)),
            None => alarm,
        }
    }
}

/// The Demo's application thread: raises the Demo events and drives the alarm until
/// dropped (or the server stops).
pub struct DemoDriver {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DemoParts {
    /// Starts the thread (after the server started: the handles are bound then).
    pub fn start(self) -> Result<DemoDriver, crate::Error> {
        let (tx, rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("uaring-demo".into())
            .spawn(move || self.run(&rx))
            .map_err(|e| crate::Error::Start(format!("demo thread: {e}")))?;
        Ok(DemoDriver {
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    fn run(self, stop: &mpsc::Receiver<()>) {
        let schedule = Schedule::new(self.rate_per_s);
        let start = crate::clock::mono_ns();
        let mut next = 1;
        let mut history_ticks = 0u64;
        let mut next_history = 0u64;
        loop {
            let elapsed = crate::clock::mono_ns().saturating_sub(start);
            let active = Schedule::alarm_active(elapsed);
            let (severity, message) = if active {
                (ALARM_SEVERITY_ACTIVE, "Demo alarm active")
            } else {
                (ALARM_SEVERITY_INACTIVE, "Demo alarm inactive")
            };
            // No change raises nothing; a disabled alarm does not change.
            let _ = self.alarm.set_active(active, severity, message);
            if let Some((first, last)) = schedule.due(next, elapsed) {
                for n in first..=last {
                    let severity = ((n % 10) as u16 + 1) * 100;
                    let ev = EventDef::new(
                        self.event_type.clone(),
                        &self.source,
                        &format!("Demo event {n}"),
                        severity,
                    )
                    .field(&self.ns, "Sequence", Variant::UInt32(n as u32));
                    let _ = self.events.raise(ev);
                }
                next = last + 1;
            }
            if elapsed >= next_history {
                history_ticks += 1;
                self.set_history(history_ticks);
                next_history = history_ticks.saturating_mul(HISTORY_PERIOD_NS);
            }
            let wake = schedule.next_wake(next, elapsed).min(next_history);
            let wait = Duration::from_nanos(wake.saturating_sub(elapsed));
            match stop.recv_timeout(wait) {
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
    }
}

/// The Demo.History values' period, ns.
const HISTORY_PERIOD_NS: u64 = 1_000_000_000;

impl DemoParts {
    /// Sets Demo.History.Level and .Count for tick `n` (one a second).
    fn set_history(&self, n: u64) {
        let t = crate::clock::utc_now();
        let hour_ticks = 36_000_000_000i64;
        let phase = t.0.rem_euclid(hour_ticks) as f64 / hour_ticks as f64;
        let level = (5000.0 + 1000.0 * (phase * std::f64::consts::TAU).sin()).round() / 100.0;
        let _ = self.level.set(Variant::Double(level));
        let _ = self
            .count
            .set(Variant::Int32((n % (i32::MAX as u64)) as i32));
    }
}

impl Drop for DemoDriver {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for DemoDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DemoDriver")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_due_on_their_period() {
        let s = Schedule::new(10.0); // every 100 ms
        assert_eq!(s.due(1, 50_000_000), None);
        assert_eq!(s.due(1, 100_000_000), Some((1, 1)));
        assert_eq!(s.due(2, 350_000_000), Some((2, 3)));
        assert_eq!(s.next_wake(4, 350_000_000), 400_000_000);
    }

    #[test]
    fn a_driver_that_fell_behind_skips_the_oldest() {
        let s = Schedule::new(1000.0); // every 1 ms
        let (first, last) = s.due(1, 60_000_000_000).expect("due");
        assert_eq!(last, 60_000);
        assert_eq!(last - first + 1, MAX_CATCH_UP);
    }

    #[test]
    fn off_means_only_the_alarm_wakes() {
        let s = Schedule::new(0.0);
        assert_eq!(s.due(1, u64::MAX / 2), None);
        assert_eq!(s.next_wake(1, 3_000_000_000), 10_000_000_000);
    }

    #[test]
    fn the_alarm_alternates_every_half_period() {
        assert!(!Schedule::alarm_active(0));
        assert!(!Schedule::alarm_active(9_999_999_999));
        assert!(Schedule::alarm_active(10_000_000_000));
        assert!(!Schedule::alarm_active(20_000_000_000));
    }
}
