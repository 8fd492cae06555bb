//! `--profile`: a `perf record` of the server during the measured window, turned into
//! per-thread busy shares (each thread's top functions by self time) and a flame graph.
//!
//! perf attaches to the server's process(es) when every connection is ready, with its events
//! disabled (`--delay -1`); the harness enables them through perf's control FIFO right before
//! the window starts and disables them right after it ends (each acknowledged by perf), so
//! warm-up and shutdown are not in the profile. The event is `cpu-clock` (a software timer:
//! it needs no hardware counters, which VMs often lack, and its period is nanoseconds of CPU,
//! so a thread's samples × period ÷ window is its share of one CPU). Stacks are recorded with
//! `-g` (`--call-graph fp`, the default) or `--call-graph dwarf` (`--profile-call-graph`).
//! perf follows threads created during the window (they inherit the events); each sample
//! carries its thread id, so the attribution is per thread without `--per-thread`.
//!
//! After the run: `perf script` → the per-thread shares (parsed here) and, through inferno,
//! the collapsed stacks (`NAME.folded`, weighted by period, ns) and the flame graph
//! (`NAME.svg`, one tower per thread name); `NAME.perf.data` stays beside them.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::report::round;

/// How to profile, from the run's options.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileSpec {
    /// Directory of the files.
    pub dir: PathBuf,
    /// File name stem: NAME.perf.data, NAME.folded, NAME.svg.
    pub name: String,
    /// Sampling frequency, Hz.
    pub freq_hz: u32,
    /// `fp` or `dwarf`.
    pub call_graph: String,
    /// Functions listed per thread.
    pub top: usize,
}

impl ProfileSpec {
    pub fn path(&self, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", self.name))
    }
}

/// The default directory of `run --profile` without `--profile-dir`.
pub const DEFAULT_DIR: &str = "uaring-profiles";

/// The perf executable: `$PERF`, else `perf` on the PATH.
fn perf_exe() -> String {
    std::env::var("PERF").unwrap_or_else(|_| "perf".into())
}

/// Checks that perf runs at all (before a server is started).
pub fn check_perf() -> Result<(), String> {
    let exe = perf_exe();
    match Command::new(&exe)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "--profile: `{exe} --version` failed ({}): {}; install perf for the running kernel (Debian: apt-get install linux-perf)",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!(
            "--profile needs perf ({exe}: {e}); install it (Debian: apt-get install linux-perf; elsewhere the linux-tools / perf package) or set $PERF"
        )),
    }
}

/// A running `perf record`, attached with its events disabled.
pub struct Recorder {
    spec: ProfileSpec,
    child: Child,
    ctl: File,
    ack: File,
    fifos: [PathBuf; 2],
    enabled_at: Option<Instant>,
    /// Seconds between the enable acknowledgement and the disable command.
    pub window_s: f64,
}

fn mkfifo(p: &Path) -> Result<(), String> {
    let _ = std::fs::remove_file(p);
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(format!(
            "mkfifo {}: {}",
            p.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s.trim().to_string()
}

/// What to say when perf could not attach.
fn attach_advice(stderr: &str) -> String {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    if stderr.contains("ermission") || stderr.contains("paranoid") || stderr.contains("EACCES") {
        format!(
            " (kernel.perf_event_paranoid is {paranoid}: lower it, e.g. sysctl kernel.perf_event_paranoid=1, or run with CAP_PERFMON)"
        )
    } else {
        String::new()
    }
}

impl Recorder {
    /// Starts `perf record` on `pids` with its events disabled.
    pub fn start(spec: &ProfileSpec, pids: &[i32]) -> Result<Recorder, String> {
        if pids.is_empty() {
            return Err("--profile: no server process id to attach to".into());
        }
        std::fs::create_dir_all(&spec.dir)
            .map_err(|e| format!("--profile-dir {}: {e}", spec.dir.display()))?;
        let data = spec.path("perf.data");
        // A repeated run (foreign load) records again under the same name: perf would keep
        // the earlier file as perf.data.old beside it.
        let _ = std::fs::remove_file(&data);
        let tag = format!("{}-{}", std::process::id(), spec.name);
        let fifos = [
            std::env::temp_dir().join(format!("uaring-bench-perf-{tag}.ctl")),
            std::env::temp_dir().join(format!("uaring-bench-perf-{tag}.ack")),
        ];
        for f in &fifos {
            mkfifo(f)?;
        }
        // Read-write opens of a FIFO do not wait for the other end.
        let open = |p: &Path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .map_err(|e| format!("{}: {e}", p.display()))
        };
        let ctl = open(&fifos[0])?;
        let ack = open(&fifos[1])?;
        let pid_list = pids
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let exe = perf_exe();
        let mut cmd = Command::new(&exe);
        cmd.args(["record", "-e", "cpu-clock", "-F"])
            .arg(spec.freq_hz.to_string())
            .arg("--call-graph")
            .arg(&spec.call_graph)
            .args(["-p", &pid_list, "--delay", "-1", "--control"])
            .arg(format!(
                "fifo:{},{}",
                fifos[0].display(),
                fifos[1].display()
            ))
            .arg("-o")
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // perf is not the load client: it runs at the default priority (the harness may run
        // at --client-priority).
        crate::priority::reset_in_child(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("--profile: cannot start {exe}: {e}"))?;
        Ok(Recorder {
            spec: spec.clone(),
            child,
            ctl,
            ack,
            fifos,
            enabled_at: None,
            window_s: 0.0,
        })
    }

    /// Sends a control command and waits for perf's `ack`.
    fn command(&mut self, what: &str) -> Result<(), String> {
        self.ctl
            .write_all(format!("{what}\n").as_bytes())
            .map_err(|e| format!("perf control: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut got = Vec::new();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let err = stderr_of(&mut self.child);
                let advice = attach_advice(&err);
                return Err(format!(
                    "--profile: perf record exited ({status}) before it could {what} its events: {err}{advice}"
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "--profile: perf did not acknowledge {what:?} in 20 s"
                ));
            }
            let mut pfd = libc::pollfd {
                fd: self.ack.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, 100) };
            if n > 0 {
                let mut buf = [0u8; 64];
                let k = self.ack.read(&mut buf).map_err(|e| e.to_string())?;
                got.extend_from_slice(&buf[..k]);
                if String::from_utf8_lossy(&got).contains("ack") {
                    return Ok(());
                }
            }
        }
    }

    /// Enables the events: the profile's window starts.
    pub fn enable(&mut self) -> Result<(), String> {
        self.command("enable")?;
        self.enabled_at = Some(Instant::now());
        Ok(())
    }

    /// Disables the events: the window ends.
    pub fn disable(&mut self) -> Result<(), String> {
        if let Some(t) = self.enabled_at.take() {
            self.window_s = t.elapsed().as_secs_f64();
        }
        self.command("disable")
    }

    /// Stops perf (SIGINT) and waits until it has written its file.
    pub fn finish(mut self) -> Result<Recorded, String> {
        // SAFETY: kill with the pid of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() > deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err("--profile: perf record did not stop within 60 s".into());
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(e.to_string()),
            }
        }
        let err = stderr_of(&mut self.child);
        let data = self.spec.path("perf.data");
        if !data.exists() {
            return Err(format!(
                "--profile: perf wrote no {}: {err}",
                data.display()
            ));
        }
        Ok(Recorded {
            spec: self.spec.clone(),
            window_s: self.window_s,
            perf_stderr: err,
        })
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        for f in &self.fifos {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// A finished recording: perf.data written.
pub struct Recorded {
    pub spec: ProfileSpec,
    pub window_s: f64,
    pub perf_stderr: String,
}

/// One sample of `perf script`: its thread, period and leaf frame.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub comm: String,
    pub tid: i32,
    pub period: u64,
    /// The leaf (self) function and its object, `None` without a stack line.
    pub leaf: Option<(String, String)>,
}

/// Parses an event line of `perf script -F comm,tid,time,period,event,ip,sym,dso`:
/// `COMM TID TIME: PERIOD EVENT:` (COMM may hold spaces).
fn parse_event_line(line: &str) -> Option<(String, i32, u64)> {
    let (head, rest) = line.split_once(": ")?;
    // head: "COMM TID TIME"
    let (head, _time) = head.trim_end().rsplit_once(' ')?;
    let (comm, tid) = head.trim_end().rsplit_once(' ')?;
    let tid: i32 = tid.parse().ok()?;
    let period: u64 = rest.split_whitespace().next()?.parse().ok()?;
    Some((comm.trim().to_string(), tid, period))
}

/// Parses a stack line `ADDR SYMBOL (DSO)` into (symbol, dso file name).
fn parse_frame(line: &str) -> Option<(String, String)> {
    let line = line.trim();
    let (_addr, rest) = line.split_once(char::is_whitespace)?;
    let rest = rest.trim();
    let (sym, dso) = match rest.rfind(" (") {
        Some(i) if rest.ends_with(')') => (&rest[..i], &rest[i + 2..rest.len() - 1]),
        _ => (rest, ""),
    };
    let dso = Path::new(dso)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| dso.to_string());
    Some((sym.trim().to_string(), dso))
}

/// The samples of a `perf script` text.
pub fn parse_script(text: &str) -> Vec<Sample> {
    let mut out: Vec<Sample> = Vec::new();
    let mut in_stack = false;
    for line in text.lines() {
        if line.trim().is_empty() {
            in_stack = false;
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            if let Some((comm, tid, period)) = parse_event_line(line) {
                out.push(Sample {
                    comm,
                    tid,
                    period,
                    leaf: None,
                });
                in_stack = true;
            }
            continue;
        }
        if in_stack {
            if let Some(s) = out.last_mut() {
                if s.leaf.is_none() {
                    s.leaf = parse_frame(line);
                }
            }
        }
    }
    out
}

/// One thread of the profile.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadProfile {
    pub tid: i32,
    pub name: String,
    pub samples: u64,
    pub period_ns: u64,
    /// (function, dso, samples), most first.
    pub top: Vec<(String, String, u64)>,
}

/// Samples grouped by thread, most busy first; each thread's `top` leaf functions.
pub fn by_thread(samples: &[Sample], top: usize) -> Vec<ThreadProfile> {
    use std::collections::BTreeMap;
    /// Per thread: name, samples, period sum, samples per leaf (function, dso).
    type Acc = (String, u64, u64, BTreeMap<(String, String), u64>);
    let mut threads: BTreeMap<i32, Acc> = BTreeMap::new();
    for s in samples {
        let e = threads
            .entry(s.tid)
            .or_insert_with(|| (s.comm.clone(), 0, 0, BTreeMap::new()));
        // The thread's name as of its last sample (a thread may rename itself).
        e.0.clone_from(&s.comm);
        e.1 += 1;
        e.2 += s.period;
        let leaf = s
            .leaf
            .clone()
            .unwrap_or_else(|| ("[no stack]".into(), String::new()));
        *e.3.entry(leaf).or_insert(0) += 1;
    }
    let mut out: Vec<ThreadProfile> = threads
        .into_iter()
        .map(|(tid, (name, samples, period_ns, funcs))| {
            let mut f: Vec<(String, String, u64)> =
                funcs.into_iter().map(|((s, d), n)| (s, d, n)).collect();
            f.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
            f.truncate(top);
            ThreadProfile {
                tid,
                name,
                samples,
                period_ns,
                top: f,
            }
        })
        .collect();
    out.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.tid.cmp(&b.tid)));
    out
}

/// The `profile` object of a run's result.
pub fn profile_json(
    threads: &[ThreadProfile],
    window_s: f64,
    spec: &ProfileSpec,
    files: &[(&str, String)],
) -> Value {
    let total: u64 = threads.iter().map(|t| t.samples).sum();
    let share = |n: u64| {
        if total > 0 {
            round(n as f64 / total as f64, 4)
        } else {
            0.0
        }
    };
    let cpu = |ns: u64| {
        if window_s > 0.0 {
            round(ns as f64 / 1e9 / window_s, 4)
        } else {
            0.0
        }
    };
    let list: Vec<Value> = threads
        .iter()
        .map(|t| {
            json!({
                "tid": t.tid,
                "name": t.name,
                "class": crate::procstat::thread_class(&t.name),
                "samples": t.samples,
                "share": share(t.samples),
                "cpu": cpu(t.period_ns),
                "top": t.top.iter().map(|(f, d, n)| json!({
                    "function": f,
                    "dso": d,
                    "samples": n,
                    "share": if t.samples > 0 { round(*n as f64 / t.samples as f64, 4) } else { 0.0 },
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut classes = Map::new();
    for class in ["shard", "poller", "io-worker", "load", "helper"] {
        let of: Vec<&ThreadProfile> = threads
            .iter()
            .filter(|t| crate::procstat::thread_class(&t.name) == class)
            .collect();
        if of.is_empty() {
            continue;
        }
        let n: u64 = of.iter().map(|t| t.samples).sum();
        let ns: u64 = of.iter().map(|t| t.period_ns).sum();
        classes.insert(
            class.into(),
            json!({"threads": of.len(), "samples": n, "share": share(n), "cpu": cpu(ns)}),
        );
    }
    let mut f = Map::new();
    for (k, v) in files {
        f.insert((*k).into(), json!(v));
    }
    json!({
        "event": "cpu-clock",
        "frequency_hz": spec.freq_hz,
        "call_graph": spec.call_graph,
        "window_s": round(window_s, 3),
        "samples": total,
        "threads": list,
        "classes": classes,
        "files": f,
    })
}

/// Turns a recording into the collapsed stacks, the flame graph and the `profile` object.
pub fn analyze(rec: &Recorded, title: &str) -> Result<Value, String> {
    let spec = &rec.spec;
    let data = spec.path("perf.data");
    let out = Command::new(perf_exe())
        .arg("script")
        .arg("-i")
        .arg(&data)
        .args(["-F", "comm,tid,time,period,event,ip,sym,dso"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("perf script: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "perf script -i {} failed ({}): {}",
            data.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = out.stdout;
    let samples = parse_script(&String::from_utf8_lossy(&text));
    let threads = by_thread(&samples, spec.top);
    // Collapsed stacks (inferno's perf folder: the root frame is the thread's name).
    let mut folded = Vec::new();
    {
        use inferno::collapse::Collapse;
        let mut o = inferno::collapse::perf::Options::default();
        o.nthreads = 1;
        let mut folder = inferno::collapse::perf::Folder::from(o);
        folder
            .collapse(&text[..], &mut folded)
            .map_err(|e| format!("collapsing the stacks: {e}"))?;
    }
    let folded_path = spec.path("folded");
    std::fs::write(&folded_path, &folded).map_err(|e| format!("{}: {e}", folded_path.display()))?;
    let svg_path = spec.path("svg");
    if folded.is_empty() {
        return Err(format!(
            "--profile: perf recorded no sample of the server in the window ({}); perf said: {}",
            data.display(),
            rec.perf_stderr
        ));
    }
    {
        let mut o = inferno::flamegraph::Options::default();
        o.title = title.to_string();
        o.subtitle = Some(format!(
            "perf record -e cpu-clock -F {} --call-graph {}, {:.2} s measured window; widths: ns of CPU",
            spec.freq_hz, spec.call_graph, rec.window_s
        ));
        o.count_name = "ns".into();
        let f = File::create(&svg_path).map_err(|e| format!("{}: {e}", svg_path.display()))?;
        let folded_text = String::from_utf8_lossy(&folded);
        inferno::flamegraph::from_lines(&mut o, folded_text.lines(), std::io::BufWriter::new(f))
            .map_err(|e| format!("flame graph: {e}"))?;
    }
    let shown = |p: PathBuf| p.to_string_lossy().into_owned();
    Ok(profile_json(
        &threads,
        rec.window_s,
        spec,
        &[
            ("perf_data", shown(data)),
            ("folded", shown(folded_path)),
            ("svg", shown(svg_path)),
        ],
    ))
}

/// The profile's lines of the readable block.
pub fn readable(p: &Value) -> String {
    let g = |k: &str| p.get(k).map(crate::report::fmt).unwrap_or_default();
    let mut s = format!(
        "  profile     {} samples at {} Hz ({}, call graph {}) over {} s; flame graph {}\n",
        g("samples"),
        g("frequency_hz"),
        g("event"),
        g("call_graph"),
        g("window_s"),
        p.pointer("/files/svg")
            .map(crate::report::fmt)
            .unwrap_or_default()
    );
    for t in p
        .get("threads")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let f = |k: &str| t.get(k).map(crate::report::fmt).unwrap_or_default();
        let top: Vec<String> = t
            .get("top")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|x| {
                format!(
                    "{} {:.1} %",
                    x.get("function")
                        .map(crate::report::fmt)
                        .unwrap_or_default(),
                    x.get("share").and_then(Value::as_f64).unwrap_or(0.0) * 100.0
                )
            })
            .collect();
        s.push_str(&format!(
            "    {} [{}, tid {}]: {:.1} % of samples, {} CPU; {}\n",
            f("name"),
            f("class"),
            f("tid"),
            t.get("share").and_then(Value::as_f64).unwrap_or(0.0) * 100.0,
            f("cpu"),
            top.join(", ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "\
uaring-shard-0 4242 11529.840697:    1001001 cpu-clock: \n\
\tffffffff82242f24 tcp_sendmsg ([kernel.kallsyms])\n\
\t           cf439 uaring::shard::run (/work/target/release/uaring)\n\
\n\
uaring-shard-0 4242 11529.841697:    1001001 cpu-clock: \n\
\t           fd932 memcpy (/usr/lib/x86_64-linux-gnu/libc.so.6)\n\
\n\
uaring-shard-0 4242 11529.842697:    1001001 cpu-clock: \n\
\tffffffff82242f24 tcp_sendmsg ([kernel.kallsyms])\n\
\n\
Web Content 77 11529.843697:    2002002 cpu-clock: \n\
\t           fd932 [unknown] ([unknown])\n\
\n\
iou-sqp-4242 4243 11529.844697:    1001001 cpu-clock: \n\
\n";

    #[test]
    fn script_lines() {
        let s = parse_script(SCRIPT);
        assert_eq!(s.len(), 5);
        assert_eq!(s[0].comm, "uaring-shard-0");
        assert_eq!(s[0].tid, 4242);
        assert_eq!(s[0].period, 1001001);
        assert_eq!(
            s[0].leaf,
            Some(("tcp_sendmsg".into(), "[kernel.kallsyms]".into()))
        );
        assert_eq!(s[1].leaf, Some(("memcpy".into(), "libc.so.6".into())));
        assert_eq!(s[3].comm, "Web Content", "a name with a space");
        assert_eq!(s[3].period, 2002002);
        assert_eq!(s[4].leaf, None, "no stack line");
    }

    #[test]
    fn threads_shares_and_top_functions() {
        let t = by_thread(&parse_script(SCRIPT), 1);
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].name, "uaring-shard-0");
        assert_eq!(t[0].samples, 3);
        assert_eq!(t[0].period_ns, 3003003);
        assert_eq!(
            t[0].top,
            vec![("tcp_sendmsg".into(), "[kernel.kallsyms]".into(), 2)]
        );
        let spec = ProfileSpec {
            dir: "d".into(),
            name: "n".into(),
            freq_hz: 999,
            call_graph: "fp".into(),
            top: 1,
        };
        let j = profile_json(&t, 0.01, &spec, &[("svg", "d/n.svg".into())]);
        assert_eq!(j["samples"], json!(5));
        assert_eq!(j["threads"][0]["share"], json!(0.6));
        assert_eq!(j["threads"][0]["class"], json!("shard"));
        // 3 ms of CPU in a 10 ms window.
        assert_eq!(j["threads"][0]["cpu"], json!(0.3003));
        assert_eq!(j["threads"][0]["top"][0]["share"], json!(0.6667));
        assert_eq!(j["classes"]["poller"]["threads"], json!(1));
        assert_eq!(j["classes"]["helper"]["samples"], json!(1));
        let text = readable(&j);
        assert!(
            text.contains("uaring-shard-0 [shard, tid 4242]: 60.0 % of samples, 0.3003 CPU; tcp_sendmsg 66.7 %"),
            "{text}"
        );
        assert!(text.contains("flame graph d/n.svg"), "{text}");
    }
}
