//! Servers under test as child processes: spawn (optionally pinned from the
//! first instruction), wait for a readiness line, learn the port from a
//! `listening on …` line, keep draining the output, SIGTERM at the end.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub struct ServerProcess {
    child: Child,
    pub pid: i32,
    pub port: u16,
    pub host: String,
    /// Output lines seen until readiness, for error messages.
    pub early_output: Vec<String>,
    lines: mpsc::Receiver<String>,
}

pub struct SpawnSpec {
    pub exe: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Substring of a stdout/stderr line that says the server is ready.
    pub ready: String,
    /// Pin the process (all threads, inherited from exec) to these CPUs.
    pub pin: Option<Vec<usize>>,
    /// The port when the harness chose it; otherwise parsed from `listening on`.
    pub port: Option<u16>,
    pub timeout: Duration,
    /// `--server-priority`: set in the child before exec (every thread it starts inherits
    /// it) and on all its threads once it is ready; `None`: the default priority.
    pub priority: Option<crate::priority::Priority>,
}

/// A free loopback port (bound and released; a small race is accepted).
pub fn free_port() -> std::io::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Finds `host:port` after `listening on` (with or without `opc.tcp://`).
pub fn parse_listening(line: &str) -> Option<(String, u16)> {
    let idx = line.find("listening on")?;
    let rest = line[idx + "listening on".len()..].trim();
    let rest = rest.split_whitespace().next()?;
    let rest = rest.strip_prefix("opc.tcp://").unwrap_or(rest);
    let rest = rest.trim_end_matches('/');
    let hostport = rest.split('/').next()?;
    let (host, port) = hostport.rsplit_once(':')?;
    let port: u16 = port
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() || host == "0.0.0.0" || host == "::" {
        "127.0.0.1"
    } else {
        host
    };
    Some((host.to_string(), port))
}

fn forward_lines<R: Read + Send + 'static>(r: R, tx: mpsc::Sender<String>) {
    std::thread::spawn(move || {
        let reader = BufReader::new(r);
        for line in reader.lines() {
            match line {
                Ok(l) => {
                    // After readiness nobody listens: keep draining anyway.
                    let _ = tx.send(l);
                }
                Err(_) => break,
            }
        }
    });
}

impl ServerProcess {
    pub fn spawn(spec: &SpawnSpec) -> Result<ServerProcess, String> {
        let mut cmd = Command::new(&spec.exe);
        cmd.args(&spec.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        if let Some(cpus) = spec.pin.clone() {
            if cpus.is_empty() {
                return Err("empty CPU list for the server".into());
            }
            let bits = usize::BITS as usize;
            let mut words = vec![0usize; cpus.iter().max().unwrap() / bits + 1];
            for &c in &cpus {
                words[c / bits] |= 1usize << (c % bits);
            }
            // SAFETY: pre_exec runs in the child between fork and exec; it makes
            // one system call over memory allocated before the fork.
            unsafe {
                cmd.pre_exec(move || {
                    let rc = libc::syscall(
                        libc::SYS_sched_setaffinity,
                        0,
                        words.len() * std::mem::size_of::<usize>(),
                        words.as_ptr(),
                    );
                    if rc != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        match spec.priority {
            Some(p) => crate::priority::set_in_child(&mut cmd, p),
            None => crate::priority::reset_in_child(&mut cmd),
        }
        let mut child = cmd.spawn().map_err(|e| match spec.priority {
            // set_in_child reports a refused priority as EPERM.
            Some(p) if e.raw_os_error() == Some(libc::EPERM) => {
                crate::priority::refusal("--server-priority", p, &e)
            }
            _ => format!("cannot start {}: {e}", spec.exe),
        })?;
        let pid = child.id() as i32;
        let (tx, rx) = mpsc::channel();
        forward_lines(child.stdout.take().unwrap(), tx.clone());
        forward_lines(child.stderr.take().unwrap(), tx);
        let deadline = Instant::now() + spec.timeout;
        let mut early = Vec::new();
        let mut ready = false;
        let mut found: Option<(String, u16)> = spec.port.map(|p| ("127.0.0.1".to_string(), p));
        while !(ready && found.is_some()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let mut sp = ServerProcess {
                    child,
                    pid,
                    port: 0,
                    host: String::new(),
                    early_output: early,
                    lines: rx,
                };
                sp.stop();
                return Err(format!(
                    "server {} not ready within {:?} (waiting for {:?}); output:\n{}",
                    spec.exe,
                    spec.timeout,
                    spec.ready,
                    sp.early_output.join("\n")
                ));
            }
            match rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) => {
                    if line.contains(&spec.ready) {
                        ready = true;
                    }
                    if spec.port.is_none() {
                        if let Some(hp) = parse_listening(&line) {
                            found = Some(hp);
                        }
                    }
                    if early.len() < 200 {
                        early.push(line);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Ok(Some(status)) = child.try_wait() {
                        return Err(format!(
                            "server {} exited ({status}) before ready; output:\n{}",
                            spec.exe,
                            early.join("\n")
                        ));
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                    return Err(format!(
                        "server {} exited ({status}) before ready; output:\n{}",
                        spec.exe,
                        early.join("\n")
                    ));
                }
            }
        }
        let (host, port) = found.unwrap();
        let sp = ServerProcess {
            child,
            pid,
            port,
            host,
            early_output: early,
            lines: rx,
        };
        if let Some(cpus) = &spec.pin {
            // Threads started after exec inherit the mask; a thread the server moved
            // outside it is brought back, but one it placed on a subset (a shard on
            // one of the CPUs, its background threads on another) keeps its place.
            let _ = uaring_affinity::confine_process_threads(pid, cpus);
        }
        if let Some(p) = spec.priority {
            // Inherited from exec on; set again in case the server changed its own.
            crate::priority::apply_to_process("--server-priority", pid, p, false)?;
        }
        Ok(sp)
    }

    /// Output lines produced since readiness (drained, non-blocking).
    pub fn drain_output(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, up to 5 s for a clean exit, then SIGKILL.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        if let Ok(Some(s)) = self.child.try_wait() {
            return Some(s);
        }
        // SAFETY: kill with a pid of our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_lines() {
        assert_eq!(
            parse_listening("uaring: listening on opc.tcp://127.0.0.1:48400"),
            Some(("127.0.0.1".into(), 48400))
        );
        assert_eq!(
            parse_listening("listening on opc.tcp://0.0.0.0:4840/ (2 shards)"),
            Some(("127.0.0.1".into(), 4840))
        );
        assert_eq!(
            parse_listening("listening on 127.0.0.1:5000"),
            Some(("127.0.0.1".into(), 5000))
        );
        assert_eq!(
            parse_listening("listening on opc.tcp://[::1]:4841"),
            Some(("::1".into(), 4841))
        );
        assert_eq!(parse_listening("ready"), None);
    }

    #[test]
    fn spawn_waits_for_ready_and_stops() {
        let port = free_port().unwrap();
        let spec = SpawnSpec {
            exe: "/bin/sh".into(),
            args: vec!["-c".into(), format!("echo starting; echo 'listening on opc.tcp://127.0.0.1:{port}'; echo 'benchmark server ready'; exec sleep 30")],
            env: vec![],
            ready: "benchmark server ready".into(),
            pin: None,
            port: None,
            timeout: Duration::from_secs(10),
            priority: None,
        };
        let mut s = ServerProcess::spawn(&spec).unwrap();
        assert_eq!(s.port, port);
        assert!(s.is_running());
        let status = s.stop().unwrap();
        assert!(!status.success());
    }

    #[test]
    fn spawn_reports_early_exit() {
        let spec = SpawnSpec {
            exe: "/bin/sh".into(),
            args: vec!["-c".into(), "echo boom; exit 3".into()],
            env: vec![],
            ready: "listening on".into(),
            pin: None,
            port: None,
            timeout: Duration::from_secs(10),
            priority: None,
        };
        let err = ServerProcess::spawn(&spec).err().unwrap();
        assert!(err.contains("boom"), "{err}");
    }
}
