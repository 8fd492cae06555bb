//! A PostgreSQL server of the test's own: Debian's package (`postgresql`, which
//! scripts/test-all.sh installs when missing), `initdb` into a fresh temporary directory
//! and `postgres` listening on a Unix socket in it only (no TCP port, so nothing to
//! collide with), with password authentication (scram-sha-256) for the user `uaring`.
//! Run as root (as CI does), both run as the `postgres` user of the package (else
//! `nobody`): PostgreSQL refuses to run as root. Stopped and removed when dropped.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Pg {
    dir: PathBuf,
    bin: PathBuf,
    owner: Option<(u32, u32)>,
    child: Option<Child>,
    /// The password of `uaring`, in a file.
    pub password_file: PathBuf,
}

/// Where Debian keeps the server's programs: `/usr/lib/postgresql/<major>/bin` (the newest),
/// or wherever `initdb` is on the PATH.
fn bin_dir() -> PathBuf {
    let mut majors: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((major, bin))
        })
        .collect();
    majors.sort();
    if let Some((_, b)) = majors.pop() {
        return b;
    }
    if let Ok(path) = std::env::var("PATH") {
        for p in path.split(':') {
            let p = Path::new(p);
            if p.join("initdb").exists() && p.join("postgres").exists() {
                return p.to_path_buf();
            }
        }
    }
    panic!("PostgreSQL's server is not installed (Debian: apt-get install postgresql; scripts/test-all.sh does it)");
}

/// The user and group to run PostgreSQL as when we are root.
fn owner() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    for name in [c"postgres", c"nobody"] {
        // SAFETY: a NUL-terminated name; the entry is read at once, before any other
        // call that could reuse its storage.
        let pw = unsafe { libc::getpwnam(name.as_ptr()) };
        if !pw.is_null() {
            // SAFETY: non-null entry from getpwnam.
            return Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) });
        }
    }
    Some((65534, 65534))
}

fn chown(p: &Path, owner: Option<(u32, u32)>) {
    if let Some((u, g)) = owner {
        std::os::unix::fs::chown(p, Some(u), Some(g)).expect("chown");
    }
}

impl Pg {
    /// initdb and start.
    pub fn start(tag: &str) -> Pg {
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("uaring-pg-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sock")).unwrap();
        let owner = owner();
        chown(&dir, owner);
        chown(&dir.join("sock"), owner);
        let password_file = dir.join("password");
        std::fs::write(&password_file, format!("pw-{}-{n}\n", std::process::id())).unwrap();
        std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        chown(&password_file, owner);
        let mut pg = Pg {
            dir,
            bin: bin_dir(),
            owner,
            child: None,
            password_file,
        };
        let out = pg
            .command("initdb")
            .arg("-D")
            .arg(pg.dir.join("data"))
            .args([
                "-U",
                "uaring",
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
                "--locale=C",
            ])
            .arg(format!("--pwfile={}", pg.password_file.display()))
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        pg.run();
        pg
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        if let Some((u, g)) = self.owner {
            c.uid(u).gid(g);
        }
        c.current_dir(&self.dir);
        c
    }

    /// Starts the server (again) on the same data directory and waits until it answers.
    pub fn run(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-k")
            .arg(self.dir.join("sock"))
            .args([
                "-c",
                "listen_addresses=",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=40",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start postgres");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.client().is_ok() {
                return;
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    panic!("postgres exited: {st}");
                }
            }
            assert!(Instant::now() < deadline, "postgres did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server (fast shutdown: clients are disconnected) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(30);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The connection string, without the password.
    pub fn connection(&self) -> String {
        format!(
            "host={} user=uaring dbname=postgres",
            self.dir.join("sock").display()
        )
    }

    /// A client of the test's own (to look at the tables).
    pub fn client(&self) -> Result<postgres::Client, postgres::Error> {
        let pw = std::fs::read_to_string(&self.password_file).unwrap();
        let mut c: postgres::Config = self.connection().parse()?;
        c.password(pw.trim_end());
        c.connect_timeout(Duration::from_secs(5));
        c.connect(postgres::NoTls)
    }

    /// `[history]` for this database.
    pub fn history_toml(&self) -> String {
        format!(
            "[history]\nenabled = true\nbackend = \"postgres\"\n[history.postgres]\nconnection = {:?}\npassword_file = {:?}\nreconnect_max_ms = 500\nconnect_timeout_ms = 2000\n",
            self.connection(),
            self.password_file.display().to_string()
        )
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
