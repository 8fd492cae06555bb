//! /proc accounting: CPU time per process and per thread, peak RSS, context
//! switches, and the machine-wide busy time from /proc/stat.
//!
//! CPU time comes from `/proc/PID/task/*/schedstat` (nanoseconds on CPU) where
//! the kernel has it, and from the `utime`/`stime` ticks of `/proc/PID/stat`
//! otherwise. The user/system split always comes from the ticks.
//!
//! Every thread of a process counts, kernel threads that belong to it included: an io_uring
//! SQPOLL poller (`iou-sqp-<tid>`) and io_uring workers (`iou-wrk-<tid>`) are listed under
//! `/proc/PID/task` of the process that created them, so their CPU is the process's CPU. The
//! scheduler states per thread — run time, run delay (runnable but waiting for a CPU) and
//! timeslices from `schedstat`, migrations from `sched` — are summed by thread class
//! ([`thread_class`], [`by_class`]).

use std::fs;
use std::path::Path;

/// Clock ticks per second for `/proc/*/stat` and `/proc/stat`.
pub fn clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 {
        v as u64
    } else {
        100
    }
}

/// The fields of one `/proc/PID/stat` (or task stat) line that the harness uses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatLine {
    pub comm: String,
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub num_threads: u64,
}

/// Parses a `/proc/PID/stat` line. The command name is in parentheses and may
/// contain spaces and parentheses itself, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<StatLine> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let comm = text[open + 1..close].to_string();
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime 15, num_threads 20.
    let field = |n: usize| -> Option<u64> { rest.get(n - 3)?.parse().ok() };
    Some(StatLine {
        comm,
        utime_ticks: field(14)?,
        stime_ticks: field(15)?,
        num_threads: field(20)?,
    })
}

/// Peak RSS and context switches from a `/proc/PID/status` text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusInfo {
    pub vm_hwm_kb: u64,
    pub vm_rss_kb: u64,
    pub voluntary_ctxt_switches: u64,
    pub nonvoluntary_ctxt_switches: u64,
}

pub fn parse_status(text: &str) -> StatusInfo {
    let mut s = StatusInfo::default();
    for line in text.lines() {
        let mut it = line.splitn(2, ':');
        let key = it.next().unwrap_or("");
        let val = it
            .next()
            .unwrap_or("")
            .split_whitespace()
            .next()
            .unwrap_or("0");
        let num: u64 = val.parse().unwrap_or(0);
        match key {
            "VmHWM" => s.vm_hwm_kb = num,
            "VmRSS" => s.vm_rss_kb = num,
            "voluntary_ctxt_switches" => s.voluntary_ctxt_switches = num,
            "nonvoluntary_ctxt_switches" => s.nonvoluntary_ctxt_switches = num,
            _ => {}
        }
    }
    s
}

/// One thread of a process at one instant.
#[derive(Clone, Debug, Default)]
pub struct ThreadSample {
    pub tid: i32,
    pub name: String,
    pub cpu_ns: u64,
    /// schedstat: time runnable but waiting for a CPU, ns (0 without schedstat).
    pub run_delay_ns: u64,
    /// schedstat: timeslices run on a CPU.
    pub timeslices: u64,
    /// `se.nr_migrations` of `/proc/PID/task/TID/sched` (None where the kernel has no such file).
    pub migrations: Option<u64>,
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub voluntary: u64,
    pub nonvoluntary: u64,
}

/// A process (all its threads) at one instant.
#[derive(Clone, Debug, Default)]
pub struct ProcSample {
    pub pid: i32,
    /// Sum over live threads of schedstat ns (or ticks converted when absent).
    pub cpu_ns: u64,
    /// utime/stime of the whole process (includes exited threads).
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub voluntary: u64,
    pub nonvoluntary: u64,
    pub vm_hwm_kb: u64,
    pub threads: Vec<ThreadSample>,
}

fn read(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// The first field of a schedstat file: nanoseconds spent on a CPU.
pub fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// All three fields of a schedstat file: (ns on a CPU, ns runnable but waiting, timeslices).
pub fn parse_schedstat_all(text: &str) -> Option<(u64, u64, u64)> {
    let mut it = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

/// `se.nr_migrations` from a `/proc/PID/task/TID/sched` text.
pub fn parse_migrations(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.trim_start().starts_with("se.nr_migrations"))
        .and_then(|l| l.rsplit(':').next())
        .and_then(|v| v.trim().parse().ok())
}

/// The class of a thread by its name: `shard` (`uaring-shard-*`), `poller` (an io_uring SQPOLL
/// kernel thread, `iou-sqp-*`), `io-worker` (io_uring's async workers, `iou-wrk-*`), `load` (the
/// harness's load threads, `load-*`), else `helper` (main thread, handshake and application
/// workers, anything else).
pub fn thread_class(name: &str) -> &'static str {
    if name.starts_with("uaring-shard-") {
        "shard"
    } else if name.starts_with("iou-sqp-") {
        "poller"
    } else if name.starts_with("iou-wrk-") {
        "io-worker"
    } else if name.starts_with("load-") {
        "load"
    } else {
        "helper"
    }
}

/// The threads of one class, summed over a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassDelta {
    pub class: &'static str,
    pub threads: usize,
    pub cpu_ns: u64,
    pub run_delay_ns: u64,
    pub timeslices: u64,
    /// None when no thread of the class had a `sched` file.
    pub migrations: Option<u64>,
}

/// A delta's threads summed by [`thread_class`], in a fixed order (shard, poller, io-worker,
/// load, helper); classes without threads are left out.
pub fn by_class(d: &ProcDelta) -> Vec<ClassDelta> {
    let order = ["shard", "poller", "io-worker", "load", "helper"];
    let mut out: Vec<ClassDelta> = Vec::new();
    for class in order {
        let mut c = ClassDelta {
            class,
            ..ClassDelta::default()
        };
        for t in d.threads.iter().filter(|t| thread_class(&t.name) == class) {
            c.threads += 1;
            c.cpu_ns += t.cpu_ns;
            c.run_delay_ns += t.run_delay_ns;
            c.timeslices += t.timeslices;
            if let Some(m) = t.migrations {
                c.migrations = Some(c.migrations.unwrap_or(0) + m);
            }
        }
        if c.threads > 0 {
            out.push(c);
        }
    }
    out
}

/// Samples a process and each of its threads. `None` when the process is gone.
/// Several processes as one (a fleet of server instances and their load balancer): CPU times,
/// context switches and peak memory summed, threads side by side (thread ids are unique across
/// processes). `None` when any of them cannot be read.
pub fn sample_processes(pids: &[i32]) -> Option<ProcSample> {
    let mut all: Option<ProcSample> = None;
    for &pid in pids {
        let s = sample_process(pid)?;
        all = Some(match all {
            None => s,
            Some(mut a) => {
                a.cpu_ns += s.cpu_ns;
                a.utime_ticks += s.utime_ticks;
                a.stime_ticks += s.stime_ticks;
                a.voluntary += s.voluntary;
                a.nonvoluntary += s.nonvoluntary;
                a.vm_hwm_kb += s.vm_hwm_kb;
                a.threads.extend(s.threads);
                a
            }
        });
    }
    all
}

pub fn sample_process(pid: i32) -> Option<ProcSample> {
    let base = format!("/proc/{pid}");
    let stat = parse_stat(&read(Path::new(&format!("{base}/stat")))?)?;
    let status = parse_status(&read(Path::new(&format!("{base}/status"))).unwrap_or_default());
    let tck = clk_tck();
    let mut sample = ProcSample {
        pid,
        utime_ticks: stat.utime_ticks,
        stime_ticks: stat.stime_ticks,
        vm_hwm_kb: status.vm_hwm_kb,
        ..ProcSample::default()
    };
    let mut have_schedstat = true;
    if let Ok(dir) = fs::read_dir(format!("{base}/task")) {
        for entry in dir.flatten() {
            let tid: i32 = match entry.file_name().to_str().and_then(|s| s.parse().ok()) {
                Some(t) => t,
                None => continue,
            };
            let tbase = entry.path();
            let Some(tstat) = read(&tbase.join("stat")).and_then(|t| parse_stat(&t)) else {
                continue;
            };
            let tstatus = parse_status(&read(&tbase.join("status")).unwrap_or_default());
            let name = read(&tbase.join("comm"))
                .map(|s| s.trim().to_string())
                .unwrap_or(tstat.comm.clone());
            let sched = read(&tbase.join("schedstat"));
            let (cpu_ns, run_delay_ns, timeslices) =
                match sched.as_deref().and_then(parse_schedstat_all) {
                    Some(all) => all,
                    None => match sched.as_deref().and_then(parse_schedstat) {
                        Some(ns) => (ns, 0, 0),
                        None => {
                            have_schedstat = false;
                            (
                                (tstat.utime_ticks + tstat.stime_ticks) * 1_000_000_000 / tck,
                                0,
                                0,
                            )
                        }
                    },
                };
            let migrations = read(&tbase.join("sched")).and_then(|t| parse_migrations(&t));
            sample.voluntary += tstatus.voluntary_ctxt_switches;
            sample.nonvoluntary += tstatus.nonvoluntary_ctxt_switches;
            sample.threads.push(ThreadSample {
                tid,
                name,
                cpu_ns,
                run_delay_ns,
                timeslices,
                migrations,
                utime_ticks: tstat.utime_ticks,
                stime_ticks: tstat.stime_ticks,
                voluntary: tstatus.voluntary_ctxt_switches,
                nonvoluntary: tstatus.nonvoluntary_ctxt_switches,
            });
        }
    }
    sample.cpu_ns = if have_schedstat && !sample.threads.is_empty() {
        sample.threads.iter().map(|t| t.cpu_ns).sum()
    } else {
        (stat.utime_ticks + stat.stime_ticks) * 1_000_000_000 / tck
    };
    sample.threads.sort_by_key(|t| t.tid);
    Some(sample)
}

/// Per-thread delta between two samples, matched by tid.
#[derive(Clone, Debug, Default)]
pub struct ThreadDelta {
    pub name: String,
    pub cpu_ns: u64,
    pub run_delay_ns: u64,
    pub timeslices: u64,
    pub migrations: Option<u64>,
    pub voluntary: u64,
    pub nonvoluntary: u64,
}

/// The difference of two samples of one process.
#[derive(Clone, Debug, Default)]
pub struct ProcDelta {
    pub cpu_ns: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
    pub voluntary: u64,
    pub nonvoluntary: u64,
    pub threads: Vec<ThreadDelta>,
}

pub fn delta(a: &ProcSample, b: &ProcSample) -> ProcDelta {
    let tck = clk_tck();
    let mut threads = Vec::new();
    for tb in &b.threads {
        let ta = a.threads.iter().find(|t| t.tid == tb.tid);
        let (cpu0, v0, n0) = ta
            .map(|t| (t.cpu_ns, t.voluntary, t.nonvoluntary))
            .unwrap_or((0, 0, 0));
        let (rd0, ts0) = ta.map(|t| (t.run_delay_ns, t.timeslices)).unwrap_or((0, 0));
        let migrations = tb
            .migrations
            .map(|m| m.saturating_sub(ta.and_then(|t| t.migrations).unwrap_or(0)));
        threads.push(ThreadDelta {
            name: tb.name.clone(),
            cpu_ns: tb.cpu_ns.saturating_sub(cpu0),
            run_delay_ns: tb.run_delay_ns.saturating_sub(rd0),
            timeslices: tb.timeslices.saturating_sub(ts0),
            migrations,
            voluntary: tb.voluntary.saturating_sub(v0),
            nonvoluntary: tb.nonvoluntary.saturating_sub(n0),
        });
    }
    // Sum of per-thread deltas: a thread that exited between the samples
    // drops out of both sides instead of making the total go backwards.
    let cpu_ns = if b.threads.is_empty() {
        b.cpu_ns.saturating_sub(a.cpu_ns)
    } else {
        threads.iter().map(|t| t.cpu_ns).sum()
    };
    ProcDelta {
        cpu_ns,
        user_ns: b.utime_ticks.saturating_sub(a.utime_ticks) * 1_000_000_000 / tck,
        sys_ns: b.stime_ticks.saturating_sub(a.stime_ticks) * 1_000_000_000 / tck,
        voluntary: b.voluntary.saturating_sub(a.voluntary),
        nonvoluntary: b.nonvoluntary.saturating_sub(a.nonvoluntary),
        threads,
    }
}

/// Machine-wide CPU time from the first line of /proc/stat, in ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MachineSample {
    /// user + nice + system + irq + softirq + steal.
    pub busy_ticks: u64,
    pub steal_ticks: u64,
    pub total_ticks: u64,
}

pub fn parse_proc_stat(text: &str) -> Option<MachineSample> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let g = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal guest guest_nice
    let busy = g(0) + g(1) + g(2) + g(5) + g(6) + g(7);
    let total = busy + g(3) + g(4);
    Some(MachineSample {
        busy_ticks: busy,
        steal_ticks: g(7),
        total_ticks: total,
    })
}

pub fn sample_machine() -> MachineSample {
    read(Path::new("/proc/stat"))
        .and_then(|t| parse_proc_stat(&t))
        .unwrap_or_default()
}

/// Foreign load in cores: machine busy time in the window not accounted to the
/// measured processes, divided by the window length.
pub fn foreign_cores(a: MachineSample, b: MachineSample, accounted_ns: u64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    let busy_ns = b.busy_ticks.saturating_sub(a.busy_ticks) as f64 * 1e9 / clk_tck() as f64;
    ((busy_ns - accounted_ns as f64) / 1e9 / seconds).max(0.0)
}

/// Host facts for reports: host name, kernel, CPU model, online CPUs.
pub fn host_facts() -> (String, String, String, usize) {
    let host = read(Path::new("/proc/sys/kernel/hostname"))
        .unwrap_or_default()
        .trim()
        .to_string();
    let kernel = read(Path::new("/proc/sys/kernel/osrelease"))
        .unwrap_or_default()
        .trim()
        .to_string();
    let cpuinfo = read(Path::new("/proc/cpuinfo")).unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_default();
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    (host, kernel, model, cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parens_in_comm() {
        let line = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 7 0 123 456 789";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.comm, "my (odd) name");
        assert_eq!(s.utime_ticks, 250);
        assert_eq!(s.stime_ticks, 75);
        assert_eq!(s.num_threads, 7);
    }

    #[test]
    fn status_fields() {
        let text = "Name:\tx\nVmHWM:\t  12345 kB\nVmRSS:\t  1000 kB\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t3\n";
        let s = parse_status(text);
        assert_eq!(
            s,
            StatusInfo {
                vm_hwm_kb: 12345,
                vm_rss_kb: 1000,
                voluntary_ctxt_switches: 17,
                nonvoluntary_ctxt_switches: 3
            }
        );
    }

    #[test]
    fn proc_stat_busy() {
        let text = "cpu  100 5 40 1000 7 2 3 4 0 0\ncpu0 1 2 3 4\n";
        let m = parse_proc_stat(text).unwrap();
        assert_eq!(m.busy_ticks, 100 + 5 + 40 + 2 + 3 + 4);
        assert_eq!(m.steal_ticks, 4);
        assert_eq!(m.total_ticks, m.busy_ticks + 1000 + 7);
    }

    #[test]
    fn foreign_subtracts_accounted() {
        let t = clk_tck();
        let a = MachineSample {
            busy_ticks: 0,
            ..Default::default()
        };
        let b = MachineSample {
            busy_ticks: 2 * t,
            ..Default::default()
        };
        // 2 s busy over 2 s, 1.5 s accounted: 0.25 cores foreign.
        let f = foreign_cores(a, b, 1_500_000_000, 2.0);
        assert!((f - 0.25).abs() < 1e-9);
        // More accounted than busy never goes negative.
        assert_eq!(foreign_cores(a, b, 5_000_000_000, 2.0), 0.0);
    }

    #[test]
    fn several_processes_are_summed() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let kid = child.id() as i32;
        let a = sample_process(me).unwrap();
        let b = sample_process(kid).unwrap();
        let both = sample_processes(&[me, kid]).unwrap();
        assert_eq!(both.threads.len(), a.threads.len() + b.threads.len());
        assert!(both.threads.iter().any(|t| t.tid == kid));
        assert!(both.vm_hwm_kb >= a.vm_hwm_kb + b.vm_hwm_kb);
        assert!(both.cpu_ns >= a.cpu_ns);
        assert!(
            sample_processes(&[me, i32::MAX]).is_none(),
            "an unreadable pid fails the sample"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn sample_self_has_threads() {
        let s = sample_process(std::process::id() as i32).unwrap();
        assert!(!s.threads.is_empty());
        assert!(s.vm_hwm_kb > 0);
    }

    #[test]
    fn schedstat_sched_and_classes() {
        assert_eq!(
            parse_schedstat_all("52041910 689676 29\n"),
            Some((52041910, 689676, 29))
        );
        assert_eq!(parse_schedstat_all("5"), None);
        let sched = "iou-sqp-3075 (3077, #threads: 4)\n---\nse.exec_start : 1.0\nse.nr_migrations                             :                    7\nnr_switches : 3\n";
        assert_eq!(parse_migrations(sched), Some(7));
        assert_eq!(parse_migrations("nr_switches : 3\n"), None);
        assert_eq!(thread_class("uaring-shard-0"), "shard");
        assert_eq!(thread_class("iou-sqp-3075"), "poller");
        assert_eq!(thread_class("iou-wrk-3075"), "io-worker");
        assert_eq!(thread_class("load-1"), "load");
        assert_eq!(thread_class("uaring-handshak"), "helper");
        assert_eq!(thread_class("uaring"), "helper");
        let t = |name: &str, cpu: u64, delay: u64, mig: Option<u64>| ThreadDelta {
            name: name.into(),
            cpu_ns: cpu,
            run_delay_ns: delay,
            timeslices: 1,
            migrations: mig,
            ..Default::default()
        };
        let d = ProcDelta {
            threads: vec![
                t("uaring", 5, 1, Some(0)),
                t("uaring-shard-0", 100, 10, Some(2)),
                t("iou-sqp-9", 40, 4, Some(1)),
                t("uaring-shard-1", 50, 5, None),
            ],
            ..Default::default()
        };
        let c = by_class(&d);
        assert_eq!(
            c.iter().map(|c| c.class).collect::<Vec<_>>(),
            ["shard", "poller", "helper"]
        );
        assert_eq!(
            (
                c[0].threads,
                c[0].cpu_ns,
                c[0].run_delay_ns,
                c[0].timeslices,
                c[0].migrations
            ),
            (2, 150, 15, 2, Some(2))
        );
        assert_eq!((c[1].cpu_ns, c[1].migrations), (40, Some(1)));
    }

    /// A SQPOLL poller is a thread of the process that set up the ring: it is in the
    /// process's sample, classed `poller`, and its CPU time is in the process's total.
    #[test]
    fn sqpoll_poller_is_counted_in_the_process() {
        let mut b =
            io_uring::IoUring::<io_uring::squeue::Entry, io_uring::cqueue::Entry>::builder();
        // Polls for 50 ms after each submission: it burns CPU the test can see.
        b.setup_sqpoll(50);
        let Ok(mut ring) = b.build(8) else {
            eprintln!("no io_uring SQPOLL here (sandbox?): nothing to count");
            return;
        };
        let me = std::process::id() as i32;
        let before = sample_process(me).unwrap();
        for i in 0..20u64 {
            // SAFETY: a Nop references no memory.
            unsafe {
                ring.submission()
                    .push(&io_uring::opcode::Nop::new().build().user_data(i))
                    .unwrap();
            }
            ring.submit_and_wait(1).unwrap();
            ring.completion().for_each(drop);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let after = sample_process(me).unwrap();
        let d = delta(&before, &after);
        let pollers: Vec<&ThreadDelta> = d
            .threads
            .iter()
            .filter(|t| thread_class(&t.name) == "poller")
            .collect();
        assert!(!pollers.is_empty(), "no iou-sqp thread in {:?}", d.threads);
        let poller_ns: u64 = pollers.iter().map(|t| t.cpu_ns).sum();
        assert!(poller_ns > 0, "the poller ran: {pollers:?}");
        assert_eq!(
            d.cpu_ns,
            d.threads.iter().map(|t| t.cpu_ns).sum::<u64>(),
            "the process total is the sum of its threads, the poller's included"
        );
        assert!(d.cpu_ns >= poller_ns);
        let classes = by_class(&d);
        let p = classes.iter().find(|c| c.class == "poller").unwrap();
        assert_eq!(p.cpu_ns, poller_ns);
        drop(ring);
    }

    #[test]
    fn thread_delta_matches_by_tid() {
        let a = ProcSample {
            threads: vec![ThreadSample {
                tid: 1,
                name: "shard-0".into(),
                cpu_ns: 100,
                ..Default::default()
            }],
            cpu_ns: 100,
            ..Default::default()
        };
        let b = ProcSample {
            threads: vec![
                ThreadSample {
                    tid: 1,
                    name: "shard-0".into(),
                    cpu_ns: 400,
                    ..Default::default()
                },
                ThreadSample {
                    tid: 2,
                    name: "shard-1".into(),
                    cpu_ns: 50,
                    ..Default::default()
                },
            ],
            cpu_ns: 450,
            ..Default::default()
        };
        let d = delta(&a, &b);
        assert_eq!(d.cpu_ns, 350);
        assert_eq!(d.threads[0].cpu_ns, 300);
        assert_eq!(d.threads[1].cpu_ns, 50);
    }
}
