//! Pinning threads and processes with dynamically sized CPU masks.
//!
//! glibc's `cpu_set_t` holds 1024 CPUs; the raw system calls take any size,
//! so masks here are vectors of `unsigned long` words in the kernel's layout
//! (bit n of word w = CPU w * BITS + n), sized to the highest CPU requested.

use std::collections::BTreeSet;
use std::io;

use crate::cpulist::{format_compact, CPU_LIMIT};

type Word = libc::c_ulong;
const WORD_BITS: usize = Word::BITS as usize;

/// A CPU mask in the layout the kernel's affinity system calls expect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuMask {
    words: Vec<Word>,
}

impl CpuMask {
    /// A mask with exactly `cpus` set. Fails on an empty list or a CPU at or
    /// above [`CPU_LIMIT`].
    pub fn from_cpus(cpus: &[usize]) -> io::Result<CpuMask> {
        let Some(&max) = cpus.iter().max() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "empty CPU list: nothing to pin to",
            ));
        };
        if max >= CPU_LIMIT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("CPU {max} is above the supported limit {CPU_LIMIT}"),
            ));
        }
        let mut words = vec![0 as Word; max / WORD_BITS + 1];
        for &cpu in cpus {
            words[cpu / WORD_BITS] |= (1 as Word) << (cpu % WORD_BITS);
        }
        Ok(CpuMask { words })
    }

    /// CPUs set in the mask, ascending.
    pub fn cpus(&self) -> Vec<usize> {
        let mut cpus = Vec::new();
        for (w, &word) in self.words.iter().enumerate() {
            for bit in 0..WORD_BITS {
                if word & ((1 as Word) << bit) != 0 {
                    cpus.push(w * WORD_BITS + bit);
                }
            }
        }
        cpus
    }

    /// Size of the mask in bytes, as passed to the kernel.
    pub fn byte_len(&self) -> usize {
        self.words.len() * std::mem::size_of::<Word>()
    }
}

fn with_context(error: io::Error, what: String) -> io::Error {
    io::Error::new(error.kind(), format!("{what}: {error}"))
}

fn set_affinity(tid: libc::pid_t, cpus: &[usize]) -> io::Result<()> {
    let mask = CpuMask::from_cpus(cpus)?;
    // SAFETY: the pointer and length describe `mask.words`, which lives
    // across the call; the kernel only reads `byte_len` bytes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            tid,
            mask.byte_len(),
            mask.words.as_ptr(),
        )
    };
    if rc != 0 {
        let error = io::Error::last_os_error();
        let who = if tid == 0 {
            "the current thread".to_string()
        } else {
            format!("thread {tid}")
        };
        return Err(with_context(
            error,
            format!("sched_setaffinity({who}, CPUs {})", format_compact(cpus)),
        ));
    }
    Ok(())
}

fn get_affinity(tid: libc::pid_t) -> io::Result<Vec<usize>> {
    let mut words: Vec<Word> = vec![0; 1024 / WORD_BITS];
    loop {
        let byte_len = words.len() * std::mem::size_of::<Word>();
        // SAFETY: the kernel writes at most `byte_len` bytes into `words`.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_getaffinity,
                tid,
                byte_len,
                words.as_mut_ptr(),
            )
        };
        if rc >= 0 {
            // The raw system call returns the number of bytes it filled.
            let filled = usize::try_from(rc).unwrap_or(byte_len).min(byte_len);
            let used = filled.div_ceil(std::mem::size_of::<Word>());
            words.truncate(used);
            return Ok(CpuMask { words }.cpus());
        }
        let error = io::Error::last_os_error();
        // EINVAL: the mask is smaller than the kernel's; try a bigger one.
        if error.raw_os_error() == Some(libc::EINVAL) && words.len() * WORD_BITS < CPU_LIMIT {
            let new_len = words.len() * 2;
            words = vec![0; new_len];
            continue;
        }
        let who = if tid == 0 {
            "the current thread".to_string()
        } else {
            format!("thread {tid}")
        };
        return Err(with_context(error, format!("sched_getaffinity({who})")));
    }
}

/// CPUs the calling thread may run on (sched_getaffinity; the kernel keeps
/// this within the cgroup cpuset). Works with any number of CPUs.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    get_affinity(0)
}

/// CPUs the thread `tid` (a pid names its main thread) may run on.
pub fn allowed_cpus_of(tid: i32) -> io::Result<Vec<usize>> {
    if tid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid thread id {tid}"),
        ));
    }
    get_affinity(tid)
}

/// Restricts the calling thread to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    set_affinity(0, cpus)
}

/// Restricts one thread (`pid` may be a thread id; a process id names the
/// main thread only) to `cpus`.
pub fn pin_pid(pid: i32, cpus: &[usize]) -> io::Result<()> {
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid process id {pid}"),
        ));
    }
    set_affinity(pid, cpus)
}

/// Restricts every thread of process `pid` to `cpus`, iterating
/// `/proc/PID/task`. The listing is repeated until it shows no unpinned
/// thread, so threads started during the call are caught too (threads
/// started afterwards inherit the mask from their pinned creator). Threads
/// that exit meanwhile are skipped; any other failure is returned.
pub fn pin_process_all_threads(pid: i32, cpus: &[usize]) -> io::Result<()> {
    pin_threads(pid, cpus, false)
}

/// Keeps every thread of process `pid` within `cpus` without undoing the process's own
/// placement: a thread already restricted to a subset of `cpus` (a server's shard pinned to
/// one of them, its background threads to others) keeps its mask; any other thread is
/// restricted to `cpus`, as by [`pin_process_all_threads`].
pub fn confine_process_threads(pid: i32, cpus: &[usize]) -> io::Result<()> {
    pin_threads(pid, cpus, true)
}

fn pin_threads(pid: i32, cpus: &[usize], keep_subsets: bool) -> io::Result<()> {
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid process id {pid}"),
        ));
    }
    // Validate the mask once, before touching any thread.
    CpuMask::from_cpus(cpus)?;
    let task_dir = format!("/proc/{pid}/task");
    let mut pinned: BTreeSet<i32> = BTreeSet::new();
    const PASSES_MAX: usize = 16;
    for _ in 0..PASSES_MAX {
        let entries = std::fs::read_dir(&task_dir).map_err(|e| {
            with_context(
                e,
                format!("cannot list threads of process {pid} ({task_dir})"),
            )
        })?;
        let mut found_new = false;
        for entry in entries {
            let entry = entry
                .map_err(|e| with_context(e, format!("cannot list threads of process {pid}")))?;
            let Some(tid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if pinned.contains(&tid) {
                continue;
            }
            found_new = true;
            if keep_subsets {
                if let Ok(now) = get_affinity(tid) {
                    if now.iter().all(|c| cpus.contains(c)) {
                        pinned.insert(tid);
                        continue;
                    }
                }
            }
            match set_affinity(tid, cpus) {
                Ok(()) => {}
                // The thread exited between listing and pinning.
                Err(e)
                    if e.raw_os_error() == Some(libc::ESRCH)
                        || e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(with_context(e, format!("pinning process {pid}"))),
            }
            pinned.insert(tid);
        }
        if !found_new {
            return Ok(());
        }
    }
    Err(io::Error::other(format!(
        "process {pid} kept starting threads through {PASSES_MAX} passes over {task_dir}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Tests that change the affinity of threads of this process.
    static AFFINITY_LOCK: Mutex<()> = Mutex::new(());

    #[test]
    fn confining_keeps_a_thread_placed_on_a_subset() {
        // A child process, so that no other test's threads of this process are in the way.
        let all = allowed_cpus().unwrap();
        let one = vec![all[0]];
        let mut child = match std::process::Command::new("sleep").arg("30").spawn() {
            Ok(child) => child,
            Err(e) => panic!("cannot start `sleep` for the test: {e}"),
        };
        let pid = i32::try_from(child.id()).unwrap();
        let kept = pin_pid(pid, &one)
            .and_then(|()| confine_process_threads(pid, &all))
            .and_then(|()| allowed_cpus_of(pid));
        let widened = pin_process_all_threads(pid, &all).and_then(|()| allowed_cpus_of(pid));
        let _ = child.kill();
        let _ = child.wait();
        // Placed on one CPU of the set, it keeps it; pinning all threads widens it.
        assert_eq!(kept.unwrap(), one);
        assert_eq!(widened.unwrap(), all);
    }

    #[test]
    fn masks_beyond_1024_cpus() {
        let mask = CpuMask::from_cpus(&[0, 63, 64, 1500, 4095]).unwrap();
        assert_eq!(mask.cpus(), vec![0, 63, 64, 1500, 4095]);
        assert_eq!(mask.byte_len(), 4096 / 8);
        assert!(mask.byte_len() > std::mem::size_of::<libc::cpu_set_t>());
    }

    #[test]
    fn bad_masks_are_errors() {
        assert_eq!(
            CpuMask::from_cpus(&[]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            CpuMask::from_cpus(&[CPU_LIMIT]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(pin_pid(0, &[0]).is_err());
        assert!(pin_process_all_threads(-5, &[0]).is_err());
        assert!(allowed_cpus_of(0).is_err());
    }

    #[test]
    fn allowed_cpus_is_nonempty_and_sorted() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn pin_and_read_back_in_a_thread() {
        let _guard = AFFINITY_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let allowed = allowed_cpus().unwrap();
        let target = *allowed.last().unwrap();
        let handle = std::thread::spawn(move || -> io::Result<Vec<usize>> {
            pin_current_thread(&[target])?;
            allowed_cpus()
        });
        let after = handle.join().expect("thread panicked").unwrap();
        assert_eq!(after, vec![target]);
    }

    #[test]
    fn pinning_to_an_impossible_cpu_is_reported() {
        // CPU 100000 exists nowhere; the kernel rejects the mask (EINVAL).
        let handle = std::thread::spawn(|| pin_current_thread(&[100_000]));
        let result = handle.join().expect("thread panicked");
        let error = result.unwrap_err();
        assert!(error.to_string().contains("sched_setaffinity"), "{error}");
    }

    #[test]
    fn pin_all_threads_of_a_child_process() {
        let allowed = allowed_cpus().unwrap();
        let target = allowed[0];
        let mut child = match std::process::Command::new("sleep").arg("30").spawn() {
            Ok(child) => child,
            Err(e) => panic!("cannot start `sleep` for the test: {e}"),
        };
        let pid = i32::try_from(child.id()).unwrap();
        let result = pin_process_all_threads(pid, &[target]).and_then(|()| allowed_cpus_of(pid));
        let single = pin_pid(pid, &allowed);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(result.unwrap(), vec![target]);
        single.unwrap();
        // The process is gone now: errors, not silence.
        assert!(pin_process_all_threads(pid, &[target]).is_err());
    }

    #[test]
    fn pin_all_threads_of_this_multithreaded_process() {
        let _guard = AFFINITY_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let allowed = allowed_cpus().unwrap();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let stop_rx = std::sync::Arc::new(Mutex::new(stop_rx));
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let rx = std::sync::Arc::clone(&stop_rx);
                std::thread::spawn(move || {
                    let _ = rx
                        .lock()
                        .map(|r| r.recv_timeout(std::time::Duration::from_secs(30)));
                })
            })
            .collect();
        let pid = i32::try_from(std::process::id()).unwrap();
        // Pinning to the whole allowed set changes nothing for other tests.
        let result = pin_process_all_threads(pid, &allowed);
        let mut tids = Vec::new();
        for entry in std::fs::read_dir("/proc/self/task").unwrap() {
            let name = entry.unwrap().file_name();
            tids.push(name.to_string_lossy().parse::<i32>().unwrap());
        }
        let masks: Vec<io::Result<Vec<usize>>> =
            tids.iter().map(|&tid| allowed_cpus_of(tid)).collect();
        drop(stop_tx);
        for worker in workers {
            worker.join().unwrap();
        }
        result.unwrap();
        assert!(tids.len() >= 4, "{tids:?}");
        for (tid, mask) in tids.iter().zip(masks) {
            // A thread may have finished meanwhile; every live one is pinned.
            if let Ok(mask) = mask {
                assert_eq!(mask, allowed, "thread {tid}");
            }
        }
    }
}
