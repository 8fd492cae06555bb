//! open62541's client against the `plant` example of the `uaring` library (20 variables
//! pushed at 50 Hz, two shards, SecurityPolicy None): the plant namespace, a Browse of
//! `s=Plant`, Reads, a subscription to `s=Plant.V1` whose every push must arrive in order
//! with no gap and no overflow, the Setpoint's range check and the Reset method.
//!
//! The `plant` binary: `$UARING_EXAMPLES_DIR/plant`, else `examples/plant` in this test's
//! target directory (`cargo test --workspace` builds it; or `cargo build -p uaring
//! --examples`). A missing binary fails the test. No timing is asserted beyond the client's
//! own notification count (at least 80 % of the pushes in its 3 s window); the waits below
//! are hang guards.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const CLIENT: &str = env!("CARGO_BIN_EXE_open62541-interop-client");
const VARIABLES: &str = "20";
const RATE: &str = "50";

fn plant_bin() -> PathBuf {
    let p = match std::env::var_os("UARING_EXAMPLES_DIR") {
        Some(dir) => PathBuf::from(dir).join("plant"),
        // target/<profile>/deps/plant_client-… → target/<profile>/examples/plant
        None => std::env::current_exe()
            .unwrap()
            .parent()
            .and_then(|d| d.parent())
            .unwrap()
            .join("examples")
            .join("plant"),
    };
    assert!(
        p.exists(),
        "{} is missing: cargo build -p uaring --examples (or set UARING_EXAMPLES_DIR)",
        p.display()
    );
    p
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The plant process; SIGTERMed and reaped on drop if the test fails before it does so.
struct Plant {
    child: Child,
    /// Its output, line by line, after the `listening on` line.
    output: mpsc::Receiver<String>,
    pki: PathBuf,
}

impl Plant {
    /// Starts the plant and waits (hang guard: 120 s) for its `listening on` line.
    fn start(port: u16) -> Plant {
        let pki =
            std::env::temp_dir().join(format!("uaring-o6-plant-{}-{port}", std::process::id()));
        let mut child = Command::new(plant_bin())
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--variables",
                VARIABLES,
                "--rate",
                RATE,
                "--shards",
                "2",
            ])
            .arg("--pki")
            .arg(&pki)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the plant starts");
        let (tx, rx) = mpsc::channel();
        for r in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        drop(tx);
        let mut plant = Plant {
            child,
            output: rx,
            pki,
        };
        let want = format!("listening on opc.tcp://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match plant.output.recv_timeout(left) {
                Ok(line) => {
                    let ready = line.contains(&want);
                    seen.push(line);
                    if ready {
                        return plant;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "the plant did not print {want:?} within 120 s; output:\n{}",
                    seen.join("\n")
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = plant.child.wait().unwrap();
                    panic!(
                        "the plant exited ({status}) before printing {want:?}; output:\n{}",
                        seen.join("\n")
                    );
                }
            }
        }
    }

    /// SIGTERM, then the exit status (hang guard: 60 s, then SIGKILL and a panic) and the
    /// output since the `listening on` line.
    fn stop(mut self) -> (ExitStatus, String) {
        // SAFETY: SIGTERM to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the plant did not exit within 60 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The pipes close with the process: the rest of the output is buffered.
        let mut rest = Vec::new();
        while let Ok(line) = self.output.recv_timeout(Duration::from_secs(5)) {
            rest.push(line);
        }
        (status, rest.join("\n"))
    }
}

impl Drop for Plant {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SAFETY: SIGTERM to our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.pki);
    }
}

#[test]
fn open62541_client_against_the_uaring_plant_example() {
    let port = free_port();
    let plant = Plant::start(port);
    let out = Command::new(CLIENT)
        .args([
            "--url",
            &format!("opc.tcp://127.0.0.1:{port}"),
            "--security",
            "none",
            "--log-level",
            "5",
        ])
        .args(["--plant", "--variables", VARIABLES, "--rate", RATE])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "open62541 client (plant mode) failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for check in [
        "ok connect",
        "ok namespace: urn:uaring:example:plant",
        "ok browse: s=Plant references V0 … V19, Setpoint, Pushes and Reset",
        "ok read: s=Plant.V0 is the Double",
        "ok read: s=Plant.Pushes is the UInt64",
        "ok subscribe:",
        "ok subscription:",
        "in steps of 1, no overflow",
        "ok delete subscription",
        "ok write Setpoint 12.5: Good",
        "ok write Setpoint 1000: BadOutOfRange",
        "ok call Reset: Good",
        "ok disconnect",
    ] {
        assert!(
            stdout.contains(check),
            "missing {check:?}:\n{stdout}\n{stderr}"
        );
    }
    let (status, rest) = plant.stop();
    assert!(
        status.success(),
        "the plant's exit after SIGTERM: {status}; output:\n{rest}"
    );
}
