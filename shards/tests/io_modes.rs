//! The I/O modes of the shard loop against the real `uaring` binary: SQPOLL per shard (the
//! poller on any CPU and on the shard's own), one shared poller, spin-before-sleep
//! (`busy_poll_us`), SQPOLL with spinning, fixed files, zero-copy sends, and fixed files with
//! zero-copy sends and SQPOLL, each on one and on two shards (round robin, so connections are
//! handed over between rings), serve Reads, Writes and a subscription that receives every
//! written value in order. With fixed files, a session resumed on the shard that does not
//! own it moves there (the socket leaves one ring's file table for the other's), many times
//! over a table of four slots, so slots are emptied and reused. The statistics file and the process's threads
//! show the mode is really in force (the pollers are `iou-sqp-*` threads of the process, one
//! per shard or one in all), the metrics report it; and what cannot run is refused at start
//! with a message that says what to change, exit 1, without listening.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::int32::*;
use common::*;
use uaring_core::NodeId;
use uaring_harness::blocking::Client;

/// The names of the threads of process `pid`.
fn thread_names(pid: u32) -> Vec<String> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).expect("task dir") {
        let p = e.expect("task").path();
        if let Ok(n) = std::fs::read_to_string(p.join("comm")) {
            names.push(n.trim().to_string());
        }
    }
    names
}

/// The statistics file, freshly written (SIGUSR1).
fn stats(server: &Server, path: &std::path::Path) -> String {
    let before = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    server.signal(libc::SIGUSR1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline
        && std::fs::metadata(path).and_then(|m| m.modified()).ok() == before
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(50));
    std::fs::read_to_string(path).expect("stats file")
}

/// The string values of `"key":"…"` in a JSON text, in order.
fn string_values(json: &str, key: &str) -> Vec<String> {
    json.match_indices(&format!("\"{key}\":\""))
        .map(|(i, m)| {
            let rest = &json[i + m.len()..];
            rest[..rest.find('"').unwrap_or(rest.len())].to_string()
        })
        .collect()
}

/// `"key":N` or `"key":null` values in a JSON text, in order (`None` for null).
fn opt_values(json: &str, key: &str) -> Vec<Option<u64>> {
    json.match_indices(&format!("\"{key}\":"))
        .map(|(i, m)| {
            let rest = &json[i + m.len()..];
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            rest[..end].parse::<u64>().ok()
        })
        .collect()
}

/// One mode under test.
struct Mode {
    name: &'static str,
    args: &'static [&'static str],
    /// The `sqpoll` the statistics file must report.
    sqpoll: &'static str,
    busy: bool,
    /// `--fixed-files`.
    fixed: bool,
    /// `--zero-copy-send-min 1`: every send is a zero-copy send.
    zc: bool,
    /// `--fixed-send-buffers 8`: every connection sends from registered buffers.
    fixed_bufs: bool,
}

const PER_SHARD_ANY: Mode = Mode {
    name: "per-shard-any",
    args: &["--sqpoll", "per-shard"],
    sqpoll: "per-shard",
    busy: false,
    fixed: false,
    zc: false,
    fixed_bufs: false,
};
const PER_SHARD_SAME: Mode = Mode {
    name: "per-shard-same",
    args: &["--sqpoll", "per-shard", "--sqpoll-cpu", "same"],
    sqpoll: "per-shard",
    busy: false,
    fixed: false,
    zc: false,
    fixed_bufs: false,
};
const SHARED: Mode = Mode {
    name: "shared",
    args: &["--sqpoll", "shared", "--sqpoll-cpu", "same"],
    sqpoll: "shared",
    busy: false,
    fixed: false,
    zc: false,
    fixed_bufs: false,
};
const BUSY: Mode = Mode {
    name: "busy",
    args: &["--busy-poll-us", "50"],
    sqpoll: "off",
    busy: true,
    fixed: false,
    zc: false,
    fixed_bufs: false,
};
const SQPOLL_BUSY: Mode = Mode {
    name: "sqpoll-busy",
    args: &["--sqpoll", "per-shard", "--busy-poll-us", "50"],
    sqpoll: "per-shard",
    busy: true,
    fixed: false,
    zc: false,
    fixed_bufs: false,
};

const FIXED: Mode = Mode {
    name: "fixed-files",
    args: &["--fixed-files"],
    sqpoll: "off",
    busy: false,
    fixed: true,
    zc: false,
    fixed_bufs: false,
};
const ZC: Mode = Mode {
    name: "zc-send",
    args: &["--zero-copy-send-min", "1"],
    sqpoll: "off",
    busy: false,
    fixed: false,
    zc: true,
    fixed_bufs: false,
};
const FIXED_ZC_SQPOLL: Mode = Mode {
    name: "fixed-zc-sqpoll",
    args: &[
        "--fixed-files",
        "--zero-copy-send-min",
        "1",
        "--sqpoll",
        "per-shard",
    ],
    sqpoll: "per-shard",
    busy: false,
    fixed: true,
    zc: true,
    fixed_bufs: false,
};
/// Registered send buffers: eight per shard (four connections), every batch a zero-copy
/// send that names its buffer.
const FIXED_BUFS: Mode = Mode {
    name: "fixed-send-buffers",
    args: &["--fixed-send-buffers", "8", "--zero-copy-send-min", "1"],
    sqpoll: "off",
    busy: false,
    fixed: false,
    zc: true,
    fixed_bufs: true,
};
/// Everything that sends: fixed files, registered send buffers, zero-copy sends and SQPOLL.
const FIXED_BUFS_FILES_SQPOLL: Mode = Mode {
    name: "fixed-bufs-files-sqpoll",
    args: &[
        "--fixed-files",
        "--fixed-send-buffers",
        "8",
        "--zero-copy-send-min",
        "1",
        "--sqpoll",
        "per-shard",
    ],
    sqpoll: "per-shard",
    busy: false,
    fixed: true,
    zc: true,
    fixed_bufs: true,
};

/// The shards' CPUs as the server pins them (`--cpus` default: all allowed, round-robin).
fn shard_cpus(shards: usize) -> Vec<u64> {
    let allowed = uaring_affinity::allowed_cpus().expect("affinity");
    (0..shards)
        .map(|i| allowed[i % allowed.len()] as u64)
        .collect()
}

fn serves(mode: &Mode, shards: usize) {
    let dir = TempDir::new(&format!("uaring-io-{}-{shards}", mode.name));
    let stats_path = dir.join("stats.json");
    let n = shards.to_string();
    let mut args = vec![
        "--io-backend",
        "uring",
        "--shards",
        &n,
        "--distribution",
        "round-robin",
        "--stats-file",
        stats_path.to_str().expect("path"),
    ];
    args.extend_from_slice(mode.args);
    let server = Server::start(&args);
    let url = server.url();
    // Round robin: the writer, the reader and the subscriber spread over the shards.
    let mut writer = Client::connect(&url, T).expect("writer");
    writer.activate_session_anonymous().expect("writer session");
    let mut reader = Client::connect(&url, T).expect("reader");
    reader.activate_session_anonymous().expect("reader session");
    let mut sub = Client::connect(&url, T).expect("subscriber");
    sub.activate_session_anonymous()
        .expect("subscriber session");
    subscribe(&mut sub);
    let mut acks = Vec::new();
    write(&mut writer, 0);
    let mut seen = collect_until(&mut sub, &mut acks, 0);
    for v in 1..=20 {
        write(&mut writer, v);
        assert_eq!(
            read(&mut reader),
            v,
            "{}: a Read after the Write",
            mode.name
        );
        // Every other value is awaited at once, the rest are collected later: both an
        // immediate Publish answer and a queued one go through.
        if v % 2 == 0 {
            seen.extend(collect_until(&mut sub, &mut acks, v));
        }
    }
    seen.dedup();
    assert_eq!(
        seen,
        (0..=20).collect::<Vec<_>>(),
        "{}: every value once, in order",
        mode.name
    );

    // Quiet for longer than sqpoll_idle_ms (10 ms): the pollers go to sleep, and the next
    // submissions may wake them (counted). A request's arrival is task work that usually
    // wakes its poller first; the 20 ms publishing cycles above are the shard's timer.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(read(&mut reader), 20);
    write(&mut writer, 21);

    // The mode is in force: the statistics file per shard, and the process's poller threads.
    let json = stats(&server, &stats_path);
    let modes = string_values(&json, "sqpoll");
    assert_eq!(modes, vec![mode.sqpoll; shards], "{json}");
    let pollers = thread_names(server.child.id())
        .into_iter()
        .filter(|n| n.starts_with("iou-sqp-"))
        .count();
    let want_pollers = match mode.sqpoll {
        "per-shard" => shards,
        "shared" => 1,
        _ => 0,
    };
    assert_eq!(
        pollers, want_pollers,
        "{}: iou-sqp threads in the process",
        mode.name
    );
    let poller_cpus = opt_values(&json, "sqpoll_cpu");
    let cpus = shard_cpus(shards);
    match mode.name {
        "per-shard-same" => {
            assert_eq!(
                poller_cpus,
                cpus.iter().map(|&c| Some(c)).collect::<Vec<_>>()
            )
        }
        // One poller, on shard 0's CPU, for every shard.
        "shared" => assert_eq!(poller_cpus, vec![Some(cpus[0]); shards], "{json}"),
        _ => assert_eq!(poller_cpus, vec![None; shards], "{json}"),
    }
    let mut wakeups: u64 = field_values(&json, "sqpoll_wakeups").iter().sum();
    if mode.sqpoll == "off" {
        assert_eq!(wakeups, 0, "{json}");
    } else {
        // Some submission (a publishing cycle, a request after the quiet time) found a
        // poller asleep. A request's arrival may wake its poller before the shard submits
        // (CI saw a run with none), so up to five more quiet periods give it the chance.
        let mut json = json.clone();
        for _ in 0..5 {
            if wakeups >= 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
            assert_eq!(read(&mut reader), 21);
            json = stats(&server, &stats_path);
            wakeups = field_values(&json, "sqpoll_wakeups").iter().sum();
        }
        assert!(wakeups >= 1, "{json}");
    }
    let spins: u64 = field_values(&json, "busy_polls").iter().sum();
    let spun_ns: u64 = field_values(&json, "busy_poll_ns").iter().sum();
    if mode.busy {
        assert!(
            spins > 0 && spun_ns > 0,
            "{}: spins counted: {json}",
            mode.name
        );
        assert_eq!(field_values(&json, "busy_poll_us"), vec![50; shards]);
    } else {
        assert_eq!((spins, spun_ns), (0, 0), "{json}");
    }
    check_fixed_and_zc(mode, shards, &json, 3);
    drop((writer, reader, sub));
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
    assert!(
        err.contains(&format!("io modes: sqpoll {}", mode.sqpoll)),
        "the start log names the mode:\n{err}"
    );
    if mode.sqpoll != "off" {
        assert!(
            err.contains("on: SQPOLL") && err.contains("DEFER_TASKRUN"),
            "SQPOLL on, DEFER_TASKRUN off (the kernel refuses it with SQPOLL):\n{err}"
        );
    }
}

/// What the statistics file says of fixed files and zero-copy sends, `clients` connections in.
fn check_fixed_and_zc(mode: &Mode, shards: usize, json: &str, clients: u64) {
    let flags: Vec<bool> = json
        .match_indices("\"fixed_files\":")
        .map(|(i, m)| json[i + m.len()..].starts_with("true"))
        .collect();
    assert_eq!(flags, vec![mode.fixed; shards], "{}: {json}", mode.name);
    let registered: u64 = field_values(json, "fixed_files_registered").iter().sum();
    if mode.fixed {
        // The default table: max_connections_per_shard slots on every shard.
        assert_eq!(field_values(json, "fixed_file_slots"), vec![4096; shards]);
        assert!(registered >= clients, "{}: {json}", mode.name);
    } else {
        assert_eq!(field_values(json, "fixed_file_slots"), vec![0; shards]);
        assert_eq!(registered, 0, "{json}");
    }
    let sum = |key: &str| -> u64 { field_values(json, key).iter().sum() };
    let (sends, bytes, notifs, copied) = (
        sum("zc_sends"),
        sum("zc_bytes"),
        sum("zc_notifs"),
        sum("zc_copied"),
    );
    if mode.zc {
        assert_eq!(field_values(json, "zero_copy_send_min"), vec![1; shards]);
        // Every send was a zero-copy send. The file is a snapshot: a send per connection
        // may still wait for its notification (its bytes are counted in `bytes_out` once it
        // is in), the rest have had theirs.
        assert!(sends > 0, "{json}");
        assert!(
            notifs <= sends && sends <= notifs + clients,
            "{}: a notification per send: {json}",
            mode.name
        );
        assert!(
            bytes >= sum("bytes_out") && bytes > 0,
            "{}: {json}",
            mode.name
        );
        // Loopback: the receiving socket copies the pages, the kernel says so.
        assert!(copied >= 1 && copied <= notifs, "{}: {json}", mode.name);
    } else {
        assert_eq!(field_values(json, "zero_copy_send_min"), vec![0; shards]);
        assert_eq!((sends, bytes, notifs, copied), (0, 0, 0, 0), "{json}");
    }
    let fixed_sends = sum("fixed_buf_sends");
    if mode.fixed_bufs {
        assert_eq!(field_values(json, "fixed_send_buffers"), vec![8; shards]);
        // Every connection holds two (the region has four connections' worth a shard), so
        // every send named its buffer: none went out of ordinary memory.
        assert_eq!(sum("fixed_bufs_lent"), 2 * clients, "{json}");
        assert!(fixed_sends > 0 && fixed_sends == sends, "{json}");
        assert_eq!(
            (sum("fixed_buf_exhausted"), sum("fixed_buf_outgrown")),
            (0, 0),
            "{json}"
        );
    } else {
        assert_eq!(field_values(json, "fixed_send_buffers"), vec![0; shards]);
        assert_eq!((fixed_sends, sum("fixed_bufs_lent")), (0, 0), "{json}");
    }
}

macro_rules! on_one_and_two_shards {
    ($name:ident, $mode:expr) => {
        mod $name {
            #[test]
            fn one_shard() {
                super::serves(&$mode, 1);
            }

            #[test]
            fn two_shards() {
                super::serves(&$mode, 2);
            }
        }
    };
}

on_one_and_two_shards!(sqpoll_per_shard_any_cpu, super::PER_SHARD_ANY);
on_one_and_two_shards!(sqpoll_per_shard_same_cpu, super::PER_SHARD_SAME);
on_one_and_two_shards!(sqpoll_shared, super::SHARED);
on_one_and_two_shards!(busy_poll, super::BUSY);
on_one_and_two_shards!(sqpoll_and_busy_poll, super::SQPOLL_BUSY);
on_one_and_two_shards!(fixed_files, super::FIXED);
on_one_and_two_shards!(zero_copy_send, super::ZC);
on_one_and_two_shards!(fixed_files_zero_copy_and_sqpoll, super::FIXED_ZC_SQPOLL);
on_one_and_two_shards!(fixed_send_buffers, super::FIXED_BUFS);
on_one_and_two_shards!(
    fixed_send_buffers_fixed_files_and_sqpoll,
    super::FIXED_BUFS_FILES_SQPOLL
);

/// A session resumed on the other shard with fixed files: the new connection is put into the
/// first shard's file table, moves (the process's fd goes to the owning shard, the slot is
/// emptied), is put into the owner's table and goes on: the subscription gets every value.
/// Four slots per shard and ten reconnects: the owner's table is emptied and reused. With
/// registered send buffers too, which a moving connection gives back and takes anew.
#[test]
fn fixed_files_resume_on_another_shard() {
    let dir = TempDir::new("uaring-io-fixed-move");
    let stats_path = dir.join("stats.json");
    let cfg = dir.join("uaring.toml");
    std::fs::write(
        &cfg,
        "[runtime]\nfixed_files = true\nmax_connections_per_shard = 4\nfixed_send_buffers = 8\nzero_copy_send_min = 1\n",
    )
    .expect("config");
    let server = Server::start(&[
        "--io-backend",
        "uring",
        "--shards",
        "2",
        "--distribution",
        "round-robin",
        "--config",
        cfg.to_str().expect("path"),
        "--stats-file",
        stats_path.to_str().expect("path"),
    ]);
    let url = server.url();
    let mut writer = Client::connect(&url, T).expect("writer");
    writer.activate_session_anonymous().expect("writer session");
    let mut sub = Client::connect(&url, T).expect("subscriber");
    sub.activate_session_anonymous()
        .expect("subscriber session");
    let token = sub.connection().authentication_token().clone();
    subscribe(&mut sub);
    write(&mut writer, 0);
    let mut acks = Vec::new();
    let mut seen = collect_until(&mut sub, &mut acks, 0);
    let mut v = 0;
    for _ in 0..10 {
        // Dropped without closing; a value changes while it is away.
        drop(sub);
        v += 1;
        write(&mut writer, v);
        sub = resume(&url, &token);
        seen.extend(collect_until(&mut sub, &mut acks, v));
        assert_eq!(read(&mut sub), v, "a Read on the resumed connection");
    }
    assert_eq!(
        seen,
        (0..=v).collect::<Vec<_>>(),
        "every value once, in order"
    );
    let json = stats(&server, &stats_path);
    let sum = |key: &str| -> u64 { field_values(&json, key).iter().sum() };
    assert_eq!(sum("move_refused"), 0, "{json}");
    assert_eq!(sum("moved_out"), sum("moved_in"), "{json}");
    assert!(sum("moved_in") >= 4, "every other reconnect moves: {json}");
    assert_eq!(field_values(&json, "fixed_file_slots"), vec![4, 4]);
    // Every accepted and every moved-in connection was put into a table, and one table saw
    // more connections than it has slots.
    let registered = field_values(&json, "fixed_files_registered");
    assert!(
        registered.iter().sum::<u64>()
            >= field_values(&json, "accepted").iter().take(2).sum::<u64>() + sum("moved_in"),
        "{json}"
    );
    assert!(registered.iter().any(|&r| r > 4), "slots reused: {json}");
    assert_eq!(sum("refused"), 0, "{json}");
    // Registered send buffers: a connection that moves gives its two back on the shard it
    // leaves and takes two on the owner's; once the dropped connections are gone, the two
    // open ones hold two each, and every send named one.
    assert!(sum("fixed_buf_sends") > 0, "{json}");
    let deadline = Instant::now() + T;
    loop {
        let json = stats(&server, &stats_path);
        if field_values(&json, "fixed_bufs_lent").iter().sum::<u64>() == 4 {
            break;
        }
        assert!(Instant::now() < deadline, "buffers left lent: {json}");
    }
    drop((writer, sub));
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
    assert!(err.contains("fixed_files on (4 slots per shard"), "{err}");
}

/// Runs the server without CAP_IPC_LOCK under a locked-memory limit of `limit_bytes`, as a
/// service user would: the kernel charges its rings, registered buffers and zero-copy sends.
fn without_ipc_lock(cmd: &mut Command, limit_bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls (setrlimit, prctl, capget/capset) between fork
    // and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: limit_bytes,
                rlim_max: limit_bytes,
            };
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim);
            // Root keeps no CAP_IPC_LOCK across exec: out of the bounding set and the
            // inheritable and ambient sets (errors mean it was not there to drop).
            const CAP_IPC_LOCK: u32 = 14;
            libc::prctl(
                libc::PR_CAPBSET_DROP,
                CAP_IPC_LOCK as libc::c_ulong,
                0,
                0,
                0,
            );
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            );
            #[repr(C)]
            struct Header {
                version: u32,
                pid: i32,
            }
            #[repr(C)]
            #[derive(Clone, Copy)]
            struct Data {
                effective: u32,
                permitted: u32,
                inheritable: u32,
            }
            let mut h = Header {
                version: 0x2008_0522,
                pid: 0,
            };
            let mut d = [Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            }; 2];
            if libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()) == 0 {
                d[0].inheritable &= !(1 << CAP_IPC_LOCK);
                libc::syscall(libc::SYS_capset, &mut h, d.as_ptr());
            }
            Ok(())
        });
    }
}

/// The server runs without CAP_IPC_LOCK.
fn assert_no_ipc_lock(server: &Server) {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).expect("status");
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .expect("CapEff");
    assert_eq!(eff & (1 << 14), 0, "the server runs without CAP_IPC_LOCK");
}

/// Zero-copy sends of a server without CAP_IPC_LOCK: the kernel charges each send's pages to
/// RLIMIT_MEMLOCK until its notification. A response larger than the whole limit (512 KiB
/// here) is refused by it (ENOMEM), goes out with an ordinary send, arrives whole, and is
/// counted (`zc_refused`); the small ones before and after go zero-copy. With registered send
/// buffers (`fixed`), which the kernel charged at start within the same limit, the small ones
/// name their buffer; the big one outgrows it and takes the same way as without them.
fn zero_copy_under_memlock(fixed: bool) {
    // The kernel counts locked memory per user, not per process: two servers of this user
    // without CAP_IPC_LOCK under a tight limit would be charged for each other's rings and
    // buffers. One at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new(&format!("uaring-io-zc-memlock-{fixed}"));
    let stats_path = dir.join("stats.json");
    let pki = dir.join("pki");
    let mut args = vec![
        "--pki",
        pki.to_str().expect("path"),
        "--contract",
        "--io-backend",
        "uring",
        "--shards",
        "1",
        "--zero-copy-send-min",
        "1",
        "--stats-file",
        stats_path.to_str().expect("path"),
    ];
    if fixed {
        args.extend_from_slice(&["--fixed-send-buffers", "4"]);
    }
    let server = Server::start_with(&args, |cmd| without_ipc_lock(cmd, 512 << 10));
    assert_no_ipc_lock(&server);
    let mut c = Client::connect(&server.url(), T).expect("client");
    c.activate_session_anonymous().expect("session");
    let value = NodeId::numeric(1, 1001);
    let small = c
        .read_values(std::slice::from_ref(&value))
        .expect("small read");
    assert_eq!(small.len(), 1);
    // 100,000 values: a response of more than 512 KiB.
    let nodes = vec![value.clone(); 100_000];
    let big = c.read_values(&nodes).expect("big read");
    assert_eq!(big.len(), 100_000);
    assert!(
        big.iter().all(|v| v.value == small[0].value),
        "every value read"
    );
    assert_eq!(c.read_values(&[value]).expect("read after").len(), 1);
    let json = stats(&server, &stats_path);
    let refused: u64 = field_values(&json, "zc_refused").iter().sum();
    assert!(
        refused >= 1,
        "the big response was refused zero-copy: {json}"
    );
    assert!(field_values(&json, "zc_notifs")[0] >= 3, "{json}");
    if fixed {
        assert!(field_values(&json, "fixed_buf_sends")[0] >= 3, "{json}");
        assert!(field_values(&json, "fixed_buf_outgrown")[0] >= 1, "{json}");
    }
    drop(c);
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
}

#[test]
fn zero_copy_sends_the_locked_memory_limit_refuses_go_out_copied() {
    zero_copy_under_memlock(false);
}

#[test]
fn registered_send_buffers_within_the_locked_memory_limit() {
    zero_copy_under_memlock(true);
}

#[test]
fn metrics_report_the_modes() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let dir = TempDir::new("uaring-io-metrics");
    let cfg = dir.join("uaring.toml");
    std::fs::write(
        &cfg,
        format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n\n[runtime]\nsqpoll = \"per-shard\"\nsqpoll_cpu = \"same\"\nsqpoll_idle_ms = 1\nbusy_poll_us = 20\nfixed_files = true\nzero_copy_send_min = 1\nfixed_send_buffers = 8\nnapi_busy_poll_us = 20\n"),
    )
    .expect("config");
    let server = Server::start(&["--shards", "1", "--config", cfg.to_str().expect("path")]);
    let mut c = Client::connect(&server.url(), T).expect("client");
    c.activate_session_anonymous().expect("session");
    for v in 0..5 {
        write(&mut c, v);
    }
    let metrics = || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics");
        s.set_read_timeout(Some(T)).expect("timeout");
        write!(s, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("request");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("response");
        text
    };
    let counter = |body: &str, name: &str| -> Option<f64> {
        body.lines()
            .find(|l| l.starts_with(&format!("{name}{{shard=\"0\"}}")))
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse().ok())
    };
    // A wake-up is a submission that finds the poller asleep. A request seldom makes one:
    // its arrival is handled as task work on the poller, which is then usually awake when
    // the response is submitted (a Write after a quiet spell found it asleep in some runs
    // and never in others). A publishing cycle does: it is the shard's timer, 20 ms after the Write
    // that changed the value, and the poller has slept since sqpoll_idle_ms (1 ms). The
    // shard publishes its counters from time to time, so the count is awaited.
    let _sub = subscribe(&mut c);
    let mut acks = Vec::new();
    let deadline = Instant::now() + T;
    let mut v = 100;
    let body = loop {
        write(&mut c, v);
        collect_until(&mut c, &mut acks, v);
        v += 1;
        let body = metrics();
        if counter(&body, "uaring_uring_sqpoll_wakeups_total").is_some_and(|v| v >= 1.0)
            || Instant::now() > deadline
        {
            break body;
        }
    };
    let cpu = shard_cpus(1)[0];
    assert!(
        body.contains(&format!("uaring_uring_io_mode_info{{shard=\"0\",sqpoll=\"per-shard\",sqpoll_cpu=\"{cpu}\",busy_poll_us=\"20\",fixed_files=\"4096\",zero_copy_send_min=\"1\",recv_bundles=\"false\",fixed_send_buffers=\"8\",napi_busy_poll_us=\"20\"}} 1")),
        "{body}"
    );
    let value =
        |name: &str| counter(&body, name).unwrap_or_else(|| panic!("{name} missing:\n{body}"));
    assert!(value("uaring_uring_sqpoll_wakeups_total") >= 1.0);
    assert!(value("uaring_uring_busy_polls_total") >= 1.0);
    assert!(value("uaring_uring_busy_poll_seconds_total") > 0.0);
    value("uaring_uring_busy_poll_hits_total");
    assert!(value("uaring_uring_fixed_files_registered_total") >= 1.0);
    assert!(value("uaring_uring_zc_sends_total") >= 1.0);
    assert!(value("uaring_uring_zc_bytes_total") > 0.0);
    assert!(value("uaring_uring_zc_notifications_total") >= 1.0);
    value("uaring_uring_zc_copied_total");
    assert!(value("uaring_uring_fixed_buf_sends_total") >= 1.0);
    assert_eq!(value("uaring_uring_fixed_buf_exhausted_total"), 0.0);
    assert_eq!(value("uaring_uring_fixed_bufs_lent"), 2.0);
    value("uaring_uring_fixed_buf_outgrown_total");
    // NAPI busy polling is registered, and says plainly that it has nothing to poll here: the
    // client came over loopback, whose sockets have no NAPI id.
    assert_eq!(value("uaring_uring_napi_sockets_total"), 0.0);
    assert!(value("uaring_uring_napi_none_total") >= 1.0);
    drop(c);
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("napi_busy_poll_us 20 (registered on every ring")
            && err.contains(
                "listening on loopback, where sockets have no NAPI id: it does nothing here"
            ),
        "the start log says NAPI busy polling does nothing on loopback:\n{err}"
    );
    assert!(err.contains("on: ") && err.contains("NAPI"), "{err}");
}

/// Registered send buffers on one shard: four buffers (two connections' worth) of 4 KiB, every
/// batch a zero-copy send. The third client finds the region exhausted and is served from
/// ordinary buffers (counted); a response larger than a buffer outgrows it (sent from ordinary
/// memory, the index given new memory, counted) and the next ones are sent from registered
/// buffers again; a client that leaves gives its two back, and the next one takes them.
#[test]
fn fixed_send_buffers_exhausted_outgrown_and_given_back() {
    let dir = TempDir::new("uaring-io-fixed-bufs");
    let stats_path = dir.join("stats.json");
    let server = Server::start(&[
        "--io-backend",
        "uring",
        "--shards",
        "1",
        "--fixed-send-buffers",
        "4",
        "--fixed-send-buffer-bytes",
        "4096",
        "--zero-copy-send-min",
        "1",
        "--stats-file",
        stats_path.to_str().expect("path"),
    ]);
    let url = server.url();
    let sum = |json: &str, key: &str| -> u64 { field_values(json, key).iter().sum() };
    let value = NodeId::numeric(1, 1001);
    let mut a = Client::connect(&url, T).expect("a");
    a.activate_session_anonymous().expect("a session");
    let mut b = Client::connect(&url, T).expect("b");
    b.activate_session_anonymous().expect("b session");
    let json = stats(&server, &stats_path);
    assert_eq!(sum(&json, "fixed_bufs_lent"), 4, "{json}");
    assert_eq!(sum(&json, "fixed_buf_exhausted"), 0, "{json}");
    // The third client finds none left: its sends go out of ordinary buffers.
    let mut c = Client::connect(&url, T).expect("c");
    c.activate_session_anonymous().expect("c session");
    for _ in 0..5 {
        assert_eq!(
            c.read_values(std::slice::from_ref(&value))
                .expect("c read")
                .len(),
            1
        );
    }
    let json = stats(&server, &stats_path);
    let exhausted = sum(&json, "fixed_buf_exhausted");
    assert!(
        exhausted >= 7,
        "the handshake's and five Reads' sends: {json}"
    );
    assert_eq!(sum(&json, "fixed_bufs_lent"), 4, "{json}");
    let sends_before = sum(&json, "fixed_buf_sends");
    // 2,000 values (about 20 KiB): larger than a 4 KiB buffer.
    let nodes: Vec<NodeId> = (0..2000)
        .map(|i| NodeId::numeric(1, 1001 + i % 100))
        .collect();
    let values = a.read_values(&nodes).expect("a big read");
    assert_eq!(values.len(), 2000);
    for (i, v) in values.iter().enumerate() {
        assert_eq!(
            v.value,
            uaring_core::Variant::Int32((i % 100) as i32),
            "node {i}"
        );
    }
    for _ in 0..5 {
        assert_eq!(
            a.read_values(std::slice::from_ref(&value))
                .expect("a read")
                .len(),
            1
        );
    }
    let json = stats(&server, &stats_path);
    assert!(sum(&json, "fixed_buf_outgrown") >= 1, "{json}");
    assert!(
        sum(&json, "fixed_buf_sends") >= sends_before + 5,
        "the small Reads after the big one are sent from registered buffers again: {json}"
    );
    assert_eq!(sum(&json, "fixed_buf_exhausted"), exhausted, "{json}");
    assert_eq!(sum(&json, "fixed_bufs_lent"), 4, "{json}");
    // b leaves: its two buffers go home, and the next client takes them.
    drop(b);
    let deadline = Instant::now() + T;
    loop {
        let json = stats(&server, &stats_path);
        if sum(&json, "fixed_bufs_lent") == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "b's buffers never came back: {json}"
        );
    }
    let mut d = Client::connect(&url, T).expect("d");
    d.activate_session_anonymous().expect("d session");
    assert_eq!(d.read_values(&[value]).expect("d read").len(), 1);
    let json = stats(&server, &stats_path);
    assert_eq!(sum(&json, "fixed_bufs_lent"), 4, "{json}");
    assert_eq!(
        sum(&json, "fixed_buf_exhausted"),
        exhausted,
        "d sent from registered buffers: {json}"
    );
    drop((a, c, d));
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
    assert!(
        err.contains(
            "fixed_send_buffers 4 of 4096 bytes per shard (32 KiB of locked memory per shard"
        ),
        "the start log names the region:\n{err}"
    );
}

/// Whether this kernel lets IORING_OP_SEND name a registered buffer
/// (IORING_RECVSEND_FIXED_BUF): one byte over a socket pair.
fn plain_fixed_sends() -> bool {
    use io_uring::{opcode, types, IoUring};
    use std::os::fd::AsRawFd;
    let Ok(mut ring) = IoUring::new(4) else {
        return false;
    };
    let mut buf = vec![7u8; 4096];
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `buf` outlives the ring's use of it (the send is awaited below).
    if unsafe { ring.submitter().register_buffers(&[iov]) }.is_err() {
        return false;
    }
    let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socket pair");
    let e = opcode::Send::new(types::Fd(a.as_raw_fd()), buf.as_ptr(), 1)
        .ioprio(1 << 2)
        .buf_group(0)
        .build();
    // SAFETY: as above.
    unsafe { ring.submission().push(&e).expect("push") };
    ring.submit_and_wait(1).expect("submit");
    let res = ring.completion().next().map(|c| c.result());
    res == Some(1)
}

/// `uaring serve --listen 127.0.0.1:0 ARGS`: (exit code, stdout, stderr), within 20 s.
fn serve_fails(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("RUST_LOG", "info")
        .output()
        .expect("run uaring");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn what_cannot_run_is_refused_before_listening() {
    let no_smt = {
        let cpu = shard_cpus(1)[0];
        std::fs::read_to_string(format!(
            "/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
        ))
        .map(|s| s.trim() == cpu.to_string())
        .unwrap_or(false)
    };
    let mut cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        // A poller CPU that does not exist here.
        (
            vec!["--sqpoll", "per-shard", "--sqpoll-cpu", "4095"],
            vec!["runtime.sqpoll_cpu = \"4095\"", "not online"],
        ),
        // One shared poller on two CPUs.
        (
            vec!["--sqpoll", "shared", "--sqpoll-cpu", "0-1", "--shards", "2"],
            vec!["one poller: give one CPU"],
        ),
        // SQPOLL on epoll, and busy polling on epoll.
        (
            vec!["--sqpoll", "per-shard", "--io-backend", "epoll"],
            vec!["needs io_uring", "runtime.sqpoll = \"off\""],
        ),
        (
            vec!["--busy-poll-us", "10", "--io-backend", "epoll"],
            vec!["needs io_uring", "runtime.busy_poll_us = 0"],
        ),
        // Fixed files and zero-copy sends on epoll.
        (
            vec!["--fixed-files", "--io-backend", "epoll"],
            vec!["needs io_uring", "runtime.fixed_files = false"],
        ),
        (
            vec!["--zero-copy-send-min", "4096", "--io-backend", "epoll"],
            vec!["needs io_uring", "runtime.zero_copy_send_min = 0"],
        ),
        // A poller placement without a poller.
        (
            vec!["--sqpoll-cpu", "same"],
            vec!["runtime.sqpoll is \"off\""],
        ),
        // Registered send buffers beyond the locked-memory limit: how much to raise it, and
        // how many would fit.
        (
            vec![
                "--fixed-send-buffers",
                "16384",
                "--fixed-send-buffer-bytes",
                "65536",
                "--zero-copy-send-min",
                "1",
                "--shards",
                "1",
            ],
            vec![
                "registered send buffers",
                "RLIMIT_MEMLOCK",
                "raise it by",
                "lower runtime.fixed_send_buffers to",
                "runtime.fixed_send_buffers = 0",
            ],
        ),
        // Registered send buffers and NAPI busy polling on epoll.
        (
            vec!["--fixed-send-buffers", "8", "--io-backend", "epoll"],
            vec!["needs io_uring", "runtime.fixed_send_buffers = 0"],
        ),
        (
            vec!["--napi-busy-poll-us", "50", "--io-backend", "epoll"],
            vec!["needs io_uring", "runtime.napi_busy_poll_us = 0"],
        ),
        (
            vec!["--napi-prefer-busy-poll"],
            vec!["napi_busy_poll_us is 0"],
        ),
    ];
    if no_smt {
        // This machine's cores have one logical CPU each: no sibling to put a poller on.
        cases.push((
            vec!["--sqpoll", "per-shard", "--sqpoll-cpu", "sibling"],
            vec!["no other logical CPU", "runtime.sqpoll = \"off\""],
        ));
    }
    if !plain_fixed_sends() {
        // Registered send buffers without zero-copy sends, where the kernel names them in
        // zero-copy sends only (6.18 does).
        cases.push((
            vec!["--fixed-send-buffers", "8"],
            vec!["zero-copy sends only", "runtime.zero_copy_send_min"],
        ));
    }
    // A file table larger than the open-files limit (the kernel's EMFILE), from a file.
    let dir = TempDir::new("uaring-io-refused");
    let big = dir.join("big.toml");
    let nofile = {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) }, 0);
        rl.rlim_cur
    };
    std::fs::write(
        &big,
        format!(
            "[runtime]\nfixed_files = true\nmax_connections_per_shard = {}\n",
            (nofile + 1).min(1 << 24)
        ),
    )
    .expect("config");
    let big_arg = format!("--config={}", big.to_str().expect("path"));
    cases.push((
        vec![&big_arg, "--shards", "1"],
        vec![
            "io_uring fixed files refused",
            "max_connections_per_shard",
            "runtime.fixed_files = false",
        ],
    ));
    for (args, says) in cases {
        let (code, stdout, stderr) = serve_fails(&args);
        assert_eq!(code, Some(1), "{args:?}: exit 1; stderr:\n{stderr}");
        assert!(
            !stdout.contains("listening on"),
            "{args:?}: must not listen: {stdout}"
        );
        for s in says {
            assert!(stderr.contains(s), "{args:?}: {s:?} in stderr:\n{stderr}");
        }
    }
    // The command line refuses what is out of range before anything starts (exit 2).
    for args in [
        vec!["--sqpoll", "sometimes"],
        vec!["--sqpoll-idle-ms", "0"],
        vec!["--busy-poll-us", "10001"],
        vec!["--zero-copy-send-min", "67108865"],
        vec!["--fixed-files=yes"],
        vec!["--fixed-send-buffers", "16386"],
        vec!["--fixed-send-buffer-bytes", "1024"],
        vec!["--napi-busy-poll-us", "10001"],
    ] {
        let (code, _, stderr) = serve_fails(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
    }
}

#[test]
fn config_check_validates_the_io_mode_keys() {
    let dir = TempDir::new("uaring-io-check");
    let check = |text: &str| {
        let f = dir.join("c.toml");
        std::fs::write(&f, text).expect("write");
        let out = Command::new(bin())
            .args(["config", "check", f.to_str().expect("path")])
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = check(
        "[runtime]\nsqpoll = \"shared\"\nsqpoll_cpu = \"sibling\"\nsqpoll_idle_ms = 100\nbusy_poll_us = 25\nfixed_files = true\nzero_copy_send_min = 4096\nfixed_send_buffers = 64\nfixed_send_buffer_bytes = 8192\nnapi_busy_poll_us = 50\nnapi_prefer_busy_poll = true\n",
    );
    assert_eq!(code, Some(0), "{err}");
    for line in [
        "sqpoll = \"shared\"",
        "sqpoll_cpu = \"sibling\"",
        "sqpoll_idle_ms = 100",
        "busy_poll_us = 25",
        "fixed_files = true",
        "zero_copy_send_min = 4096",
        "fixed_send_buffers = 64",
        "fixed_send_buffer_bytes = 8192",
        "napi_busy_poll_us = 50",
        "napi_prefer_busy_poll = true",
    ] {
        assert!(out.contains(line), "{line} in:\n{out}");
    }
    for (bad, says) in [
        ("sqpoll = \"maybe\"", "unknown variant"),
        (
            "sqpoll = \"per-shard\"\nsqpoll_idle_ms = 0",
            "sqpoll_idle_ms",
        ),
        (
            "sqpoll = \"per-shard\"\nsqpoll_idle_ms = 20000",
            "1..=10000",
        ),
        ("busy_poll_us = 10001", "busy_poll_us"),
        ("zero_copy_send_min = 67108865", "zero_copy_send_min"),
        ("fixed_send_buffers = 7", "must be even"),
        ("fixed_send_buffer_bytes = 6000", "multiple of 4096"),
        ("napi_busy_poll_us = 10001", "napi_busy_poll_us"),
        ("napi_prefer_busy_poll = true", "napi_busy_poll_us is 0"),
        ("fixed_files = 1", "invalid type"),
        (
            "fixed_files = true\nio_backend = \"epoll\"",
            "runtime.fixed_files = false",
        ),
        ("sqpoll_cpu = \"1\"", "runtime.sqpoll is \"off\""),
        (
            "sqpoll = \"per-shard\"\nio_backend = \"epoll\"",
            "needs io_uring",
        ),
    ] {
        let (code, _, err) = check(&format!("[runtime]\n{bad}\n"));
        assert_eq!(code, Some(1), "{bad}: {err}");
        assert!(err.contains(says), "{bad}: {says:?} in {err}");
    }
}

/// Receive bundles with 512-byte buffers: a Read of 2,000 nodes (about 20 KiB on the wire)
/// arrives in receives that each fill several buffers of the ring, one completion apiece, and
/// is handled whole; the statistics file says bundles are on and counts them; on one and two
/// shards.
fn bundles(shards: usize) {
    let dir = TempDir::new(&format!("uaring-bundles-{shards}"));
    let stats_path = dir.join("stats.json");
    let cfg = dir.join("uaring.toml");
    std::fs::write(
        &cfg,
        format!(
            "[runtime]\nshards = {shards}\ndistribution = \"round-robin\"\nrecv_bundles = true\nrecv_buffer_bytes = 512\nrecv_buffers = 256\n"
        ),
    )
    .unwrap();
    let server = Server::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--stats-file",
        stats_path.to_str().unwrap(),
        "--pki",
        dir.join("pki").to_str().unwrap(),
    ]);
    for _ in 0..shards {
        let mut c = Client::connect(&server.url(), T).expect("connect");
        c.activate_session_anonymous().expect("session");
        // BenchmarkValue0 … 99, twenty times over: each holds its index.
        let nodes: Vec<NodeId> = (0..2000)
            .map(|i| NodeId::numeric(1, 1001 + i % 100))
            .collect();
        let values = c.read_values(&nodes).expect("a Read of 2,000 nodes");
        assert_eq!(values.len(), 2000);
        for (i, v) in values.iter().enumerate() {
            assert_eq!(
                v.value,
                uaring_core::Variant::Int32((i % 100) as i32),
                "node {i}"
            );
        }
    }
    let json = stats(&server, &stats_path);
    let on: Vec<bool> = json
        .match_indices("\"recv_bundles\":")
        .map(|(i, m)| json[i + m.len()..].starts_with("true"))
        .collect();
    assert_eq!(on, vec![true; shards], "{json}");
    let recvs: u64 = field_values(&json, "bundled_recvs").iter().sum();
    let bufs: u64 = field_values(&json, "bundled_bufs").iter().sum();
    assert!(recvs >= 1, "no receive filled more than one buffer: {json}");
    assert!(bufs >= 2 * recvs, "{json}");
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("recv_bundles on"),
        "the start log names the mode:\n{err}"
    );
    assert!(err.contains("RECVSEND_BUNDLE"), "{err}");
}

#[test]
fn receive_bundles_on_one_shard() {
    bundles(1);
}

#[test]
fn receive_bundles_on_two_shards() {
    bundles(2);
}
