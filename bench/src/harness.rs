//! The benchmark's harness: where its binaries are (sonic-probe,
//! sp-bench, sp-reference, built in target/release), which CPU the
//! benchmark and the tracers run on (pinned apart), starting a process
//! until it says it is ready, and reading processes' CPU time. What every
//! measure shares, whatever it measures.

use std::{
    io::{BufRead, BufReader},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

/// Where the benchmark and the tracers run: two different CPUs of those we
/// may use, so that the daemon draining its ring buffer or bpftrace's
/// process never takes the benchmark's CPU from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cpus {
    pub(crate) tracer: usize,
    pub(crate) bench: usize,
}

fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the set we pass; CPU_ISSET reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Makes `cmd`'s process run on `cpu` only (its children inherit it).
fn pin(cmd: &mut Command, cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes within it.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        set
    };
    // SAFETY: between fork and exec the closure makes one system call,
    // which is async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

pub(crate) struct Bench {
    pub(crate) root: PathBuf,
    pub(crate) smoke: bool,
    pub(crate) sonic: PathBuf,
    pub(crate) spbench: PathBuf,
    /// Attaches the floor or the minimal reference programs.
    pub(crate) reference: PathBuf,
    /// None with a single CPU: nothing pinned.
    pub(crate) cpus: Option<Cpus>,
}

impl Bench {
    pub(crate) fn new(root: &Path, smoke: bool) -> Bench {
        let allowed = allowed_cpus();
        let cpus =
            (allowed.len() >= 2).then(|| Cpus { tracer: allowed[0], bench: allowed[allowed.len() - 1] });
        Bench {
            root: root.to_path_buf(),
            smoke,
            sonic: root.join("target/release/sonic-probe"),
            spbench: root.join("target/release/sp-bench"),
            reference: root.join("target/release/sp-reference"),
            cpus,
        }
    }

    /// Pins a tracer's process (and, unless told otherwise, its children)
    /// to the tracer's CPU.
    pub(crate) fn pin_tracer(&self, cmd: &mut Command) {
        if let Some(c) = self.cpus {
            pin(cmd, c.tracer);
        }
    }

    /// sp-bench's arguments: CALL N, pinned to the benchmark's CPU.
    pub(crate) fn bench_args(&self, call: &str, n: u64) -> Vec<String> {
        let mut v = vec![call.to_string(), n.to_string()];
        if let Some(c) = self.cpus {
            v.extend(["--cpu".to_string(), c.bench.to_string()]);
        }
        v
    }
}

/// Starts a process and waits for a line of its stderr (or stdout, with
/// `on_stdout`) containing `ready`.
pub(crate) fn spawn_until(mut cmd: Command, ready: &str, on_stdout: bool) -> Result<Child> {
    let mut child = if on_stdout {
        cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn()
    } else {
        cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn()
    }
    .context("spawn tracer")?;
    let stream: Box<dyn std::io::Read + Send> = if on_stdout {
        Box::new(child.stdout.take().expect("piped"))
    } else {
        Box::new(child.stderr.take().expect("piped"))
    };
    let mut lines = BufReader::new(stream).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains(ready) => break,
            Some(Ok(_)) => {}
            _ => bail!("{cmd:?} ended before it was ready"),
        }
        if Instant::now() > deadline {
            bail!("{cmd:?} not ready in 60 s");
        }
    }
    // Keep draining its stderr so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok(child)
}

/// CPU time of the children reaped so far (user + system), seconds.
pub(crate) fn children_cpu() -> f64 {
    // SAFETY: getrusage writes into the struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// Clock ticks of user + system time of a live process.
pub(crate) fn process_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let f: Vec<&str> = stat.rsplit_once(')').map(|x| x.1).unwrap_or("").split_whitespace().collect();
    Ok(f[11].parse::<u64>()? + f[12].parse::<u64>()?)
}

pub(crate) fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}
