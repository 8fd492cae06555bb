//! `--server-priority` and `--client-priority`: the scheduling priority of every thread of
//! the server and of the load client.
//!
//! Syntax: `nice:N` (SCHED_OTHER at nice N, -20..=19), `fifo:P` or `rr:P` (SCHED_FIFO or
//! SCHED_RR at real-time priority P, 1..=99). Linux keeps the policy and nice value per
//! thread, and a thread inherits them from the thread that creates it: the server gets its
//! priority in the child between fork and exec (so every thread it ever starts inherits it),
//! and again on every thread it has once it is ready; the client's is set on every thread of
//! the harness before the load starts (the load threads are created after). The server, perf
//! and other children of the harness otherwise start at the default (SCHED_OTHER, nice 0),
//! whatever the client's priority. A refusal (EPERM, or EACCES for a nice value) is an error
//! that names the limit.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// A scheduling priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// SCHED_OTHER at this nice value.
    Nice(i32),
    /// SCHED_FIFO at this real-time priority.
    Fifo(i32),
    /// SCHED_RR at this real-time priority.
    Rr(i32),
}

impl Priority {
    /// The default: SCHED_OTHER at nice 0.
    pub const DEFAULT: Priority = Priority::Nice(0);

    pub fn parse(s: &str) -> Result<Priority, String> {
        let (kind, v) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: expected nice:N (-20..19), fifo:P or rr:P (1..99)"))?;
        let n: i32 = v
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: {v:?} is not an integer"))?;
        match kind.trim() {
            "nice" if (-20..=19).contains(&n) => Ok(Priority::Nice(n)),
            "nice" => Err(format!("{s:?}: a nice value is -20..19")),
            "fifo" | "rr" if (1..=99).contains(&n) => Ok(if kind.trim() == "fifo" {
                Priority::Fifo(n)
            } else {
                Priority::Rr(n)
            }),
            "fifo" | "rr" => Err(format!("{s:?}: a real-time priority is 1..99")),
            k => Err(format!(
                "{s:?}: unknown kind {k:?}; nice:N (-20..19), fifo:P or rr:P (1..99)"
            )),
        }
    }

    fn policy(self) -> libc::c_int {
        match self {
            Priority::Nice(_) => libc::SCHED_OTHER,
            Priority::Fifo(_) => libc::SCHED_FIFO,
            Priority::Rr(_) => libc::SCHED_RR,
        }
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Priority::Nice(n) => write!(f, "nice:{n}"),
            Priority::Fifo(p) => write!(f, "fifo:{p}"),
            Priority::Rr(p) => write!(f, "rr:{p}"),
        }
    }
}

/// clap's value parser.
pub fn parse_arg(s: &str) -> Result<Priority, String> {
    Priority::parse(s)
}

/// Sets `p` on thread `tid` (0: the calling thread). Async-signal-safe (two system calls):
/// usable between fork and exec.
fn set_raw(tid: i32, p: Priority) -> std::io::Result<()> {
    let prio = match p {
        Priority::Nice(_) => 0,
        Priority::Fifo(x) | Priority::Rr(x) => x,
    };
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: a valid sched_param for the call's duration.
    if unsafe { libc::sched_setscheduler(tid, p.policy(), &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if let Priority::Nice(n) = p {
        // SAFETY: plain system call. PRIO_PROCESS with a thread id sets that thread's nice.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, n) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether this process has CAP_SYS_NICE in its effective set.
fn has_cap_sys_nice() -> bool {
    const CAP_SYS_NICE: u32 = 23;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_NICE) != 0)
}

fn rlimit(res: libc::__rlimit_resource_t) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit out-parameter.
    unsafe { libc::getrlimit(res, &mut r) };
    r.rlim_cur
}

/// Whether `e` is the kernel's refusal of a priority: EPERM from sched_setscheduler, EACCES
/// from setpriority (a lower nice value without the privilege).
pub fn is_refusal(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

/// The message of a refused priority: which limit or capability it needs.
pub fn refusal(option: &str, p: Priority, e: &std::io::Error) -> String {
    let cap = if has_cap_sys_nice() {
        "this process has CAP_SYS_NICE"
    } else {
        "this process lacks CAP_SYS_NICE"
    };
    let need = match p {
        Priority::Nice(n) => format!(
            "nice {n} below the current needs CAP_SYS_NICE or RLIMIT_NICE ≥ {} (now {}; raise it with `ulimit -e {}` or a `nice` line in /etc/security/limits.conf)",
            20 - n,
            rlimit(libc::RLIMIT_NICE),
            20 - n
        ),
        Priority::Fifo(x) | Priority::Rr(x) => format!(
            "a real-time policy needs CAP_SYS_NICE or RLIMIT_RTPRIO ≥ {x} (now {}; raise it with `ulimit -r {x}` or an `rtprio` line in /etc/security/limits.conf); with CAP_SYS_NICE, a cgroup without real-time runtime (cpu.rt_runtime_us, CONFIG_RT_GROUP_SCHED) refuses it too",
            rlimit(libc::RLIMIT_RTPRIO)
        ),
    };
    format!("{option} {p}: not permitted ({e}): {need}; {cap}")
}

/// The thread ids of process `pid`.
fn tasks(pid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// Sets `p` on every thread of `pid` (threads it creates later inherit it from their
/// creator). The first refusal is an error; a thread that exited meanwhile is skipped.
/// Kernel threads of the process that refuse a change (EINVAL, EPERM on io_uring workers)
/// are left as they are when `strict` is false; [`observe`] reports them.
pub fn apply_to_process(option: &str, pid: i32, p: Priority, strict: bool) -> Result<(), String> {
    for tid in tasks(pid) {
        match set_raw(tid, p) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) if strict => {
                return Err(if is_refusal(&e) {
                    refusal(option, p, &e)
                } else {
                    format!("{option} {p}: thread {tid}: {e}")
                })
            }
            Err(_) => {}
        }
    }
    Ok(())
}

/// Sets `p` in a child between fork and exec, so the program starts with it and every
/// thread it starts inherits it. A refusal makes the spawn fail with EPERM.
pub fn set_in_child(cmd: &mut Command, p: Priority) {
    // SAFETY: pre_exec runs in the child between fork and exec; set_raw makes only
    // async-signal-safe system calls and allocates nothing.
    unsafe {
        // A refusal reads EPERM whichever call refused (setpriority says EACCES), so that
        // the spawn's caller tells it from an EACCES of exec itself.
        cmd.pre_exec(move || {
            set_raw(0, p).map_err(|e| {
                if is_refusal(&e) {
                    std::io::Error::from_raw_os_error(libc::EPERM)
                } else {
                    e
                }
            })
        });
    }
}

/// A child of the harness (perf, the server) that is not the load client: when the harness
/// itself runs at a changed priority, the child starts at the default instead. Lowering a
/// priority is always permitted; nothing is done when the harness runs at the default.
pub fn reset_in_child(cmd: &mut Command) {
    if current(0) != Some(Priority::DEFAULT) {
        // SAFETY: as in set_in_child; errors are ignored (the child keeps what it inherited).
        unsafe {
            cmd.pre_exec(|| {
                let _ = set_raw(0, Priority::DEFAULT);
                Ok(())
            });
        }
    }
}

/// The priority of thread `tid` (0: the calling thread), `None` when it cannot be read.
pub fn current(tid: i32) -> Option<Priority> {
    // SAFETY: plain system calls with a valid out-parameter.
    let policy = unsafe { libc::sched_getscheduler(tid) };
    if policy < 0 {
        return None;
    }
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: as above.
    if unsafe { libc::sched_getparam(tid, &mut param) } != 0 {
        return None;
    }
    match policy {
        libc::SCHED_FIFO => Some(Priority::Fifo(param.sched_priority)),
        libc::SCHED_RR => Some(Priority::Rr(param.sched_priority)),
        libc::SCHED_OTHER => {
            // getpriority returns the nice value; -1 is also a valid value, hence errno.
            // SAFETY: errno is thread-local; plain system call.
            unsafe { *libc::__errno_location() = 0 };
            let n = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
            // SAFETY: as above.
            if n == -1 && unsafe { *libc::__errno_location() } != 0 {
                return None;
            }
            Some(Priority::Nice(n))
        }
        // SCHED_BATCH, SCHED_IDLE, SCHED_DEADLINE: none of ours.
        _ => None,
    }
}

/// What the threads of `pids` run at: `{"requested": …, "threads": N, "at_requested": M,
/// "others": ["name tid: nice:0", …]}` (the others: threads that did not take it, such as
/// kernel threads of the process).
pub fn observe(pids: &[i32], requested: Priority) -> serde_json::Value {
    let mut n = 0;
    let mut at = 0;
    let mut others = Vec::new();
    for &pid in pids {
        for tid in tasks(pid) {
            let Some(p) = current(tid) else { continue };
            n += 1;
            if p == requested {
                at += 1;
            } else {
                let name = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                    .unwrap_or_default();
                others.push(format!("{} {tid}: {p}", name.trim()));
            }
        }
    }
    serde_json::json!({
        "requested": requested.to_string(),
        "threads": n,
        "at_requested": at,
        "others": others,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax() {
        assert_eq!(Priority::parse("nice:-5"), Ok(Priority::Nice(-5)));
        assert_eq!(Priority::parse("nice:10"), Ok(Priority::Nice(10)));
        assert_eq!(Priority::parse("fifo:10"), Ok(Priority::Fifo(10)));
        assert_eq!(Priority::parse("rr:5"), Ok(Priority::Rr(5)));
        for bad in [
            "nice", "nice:x", "nice:20", "nice:-21", "fifo:0", "rr:100", "idle:1", "",
        ] {
            assert!(Priority::parse(bad).is_err(), "{bad:?} parsed");
        }
        for s in ["nice:-5", "nice:0", "fifo:10", "rr:5"] {
            assert_eq!(Priority::parse(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn a_new_thread_reads_as_its_creator() {
        // A thread this test creates starts at the test thread's priority (whatever it is);
        // raising its own nice value is always permitted and is then what it reads.
        let before = current(0).expect("readable");
        let got = std::thread::spawn(move || {
            let inherited = current(0);
            let lower = match before {
                Priority::Nice(n) if n < 19 => Priority::Nice(n + 1),
                other => other,
            };
            set_raw(0, lower).expect("a lower priority is always permitted");
            (inherited, current(0), lower)
        })
        .join()
        .unwrap();
        assert_eq!(got.0, Some(before));
        assert_eq!(got.1, Some(got.2));
    }

    #[test]
    fn refusal_names_the_limit() {
        let e = std::io::Error::from_raw_os_error(libc::EPERM);
        let m = refusal("--client-priority", Priority::Fifo(10), &e);
        assert!(
            m.contains("RLIMIT_RTPRIO ≥ 10") && m.contains("CAP_SYS_NICE"),
            "{m}"
        );
        let m = refusal("--server-priority", Priority::Nice(-5), &e);
        assert!(
            m.contains("RLIMIT_NICE ≥ 25") && m.contains("ulimit -e 25"),
            "{m}"
        );
    }
}
