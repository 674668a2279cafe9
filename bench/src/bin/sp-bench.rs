//! The per-syscall microbenchmark of `cargo xtask bench`: N calls of one
//! kind in a loop, timed with CLOCK_MONOTONIC, in nanoseconds per call.
//!
//! Usage: sp-bench CALL N [--rate CALLS_PER_SECOND] [--threads T] [--open-files K] [--cpu C] [--wait]
//!   read       read 1 KiB from /dev/zero          (traced)
//!   read-file  read 1 KiB from a 1 MiB regular file, from its start again
//!              at its end (traced; an lseek, not traced, every 1025 reads):
//!              the small-read accounting of scenario 3
//!   futex      FUTEX_WAKE with no waiter          (traced)
//!   openat     openat + close of a regular file   (traced, two calls):
//!              read-only, so most are counted in the kernel, not sent
//!   openat-rw  the same opened read-write: every open sent with its path
//!   mmap       mmap + munmap of 64 KiB            (traced, two calls)
//!   write      write 1 byte to /dev/null          (not traced by run's
//!              default; its failures are counted)
//!   getppid    getppid                            (not traced)
//!   pingpong   two threads on one CPU waking each other through a futex:
//!              N round trips, two context switches (and two wake-ups)
//!              each; prints per switch (run with --cpu to pin both)
//!   cuda-sync  cudaStreamSynchronize(NULL) of the CUDA runtime library
//!              at $SP_BENCH_CUDA_LIB (loaded with dlopen before --wait;
//!              NVIDIA's real one returns an error at once without a
//!              driver): a call the GPU uprobes probe
//!   cuda-other cudaGetDeviceCount of the same library: one they do not
//! With --rate it paces itself to that many calls per second (per thread);
//! --open-files keeps K more regular files open meanwhile; --wait prints
//! `ready` and waits for a byte on stdin before starting (so that a probe
//! can attach to exactly the benchmark, or read its counters just before);
//! --cpu pins it to CPU C (the bench keeps the tracer on another CPU).
//! Prints `ns_per_call=<f64> calls=<n> calls_per_second=<f64>`: ns per
//! system call, so for openat and mmap the mean of the pair.

use std::{
    ffi::CString,
    sync::OnceLock,
    time::{Duration, Instant},
};

/// The CUDA runtime function of a cuda-* call: one pointer argument, an
/// int result (cudaStreamSynchronize(stream), cudaGetDeviceCount(&n)).
type CudaCall = unsafe extern "C" fn(*mut libc::c_void) -> libc::c_int;
static CUDA_CALL: OnceLock<CudaCall> = OnceLock::new();

/// Loads $SP_BENCH_CUDA_LIB and finds `symbol` in it.
fn load_cuda(symbol: &str) -> CudaCall {
    let lib = std::env::var("SP_BENCH_CUDA_LIB").unwrap_or_else(|_| die("cuda-*: set SP_BENCH_CUDA_LIB"));
    let path = CString::new(lib.clone()).unwrap_or_else(|_| die("bad SP_BENCH_CUDA_LIB"));
    let name = CString::new(symbol).expect("a symbol name");
    // SAFETY: loading a library and looking up a symbol by name; the
    // symbol is a C function of the CudaCall signature.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            die(&format!("dlopen {lib} failed"));
        }
        let f = libc::dlsym(handle, name.as_ptr());
        if f.is_null() {
            die(&format!("{symbol} not in {lib}"));
        }
        std::mem::transmute::<*mut libc::c_void, CudaCall>(f)
    }
}

fn die(msg: &str) -> ! {
    eprintln!("sp-bench: {msg}");
    std::process::exit(2)
}

/// Runs `n` iterations of `call`; at `rate` per second if given.
fn run(n: u64, rate: Option<u64>, mut call: impl FnMut()) -> Duration {
    let start = Instant::now();
    match rate {
        None => {
            for _ in 0..n {
                call();
            }
        }
        Some(r) => {
            // Batches of 1 ms worth of calls, then sleep to the schedule.
            let batch = (r / 1000).max(1);
            let mut done = 0;
            while done < n {
                for _ in 0..batch.min(n - done) {
                    call();
                }
                done += batch.min(n - done);
                let due = start + Duration::from_secs_f64(done as f64 / r as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
        }
    }
    start.elapsed()
}

fn bench(call: &str, n: u64, rate: Option<u64>) -> (Duration, u64) {
    let mut buf = vec![0u8; 1024];
    // SAFETY (all arms): raw system calls on our own buffers and fds.
    unsafe {
        match call {
            "read" => {
                let path = CString::new("/dev/zero").unwrap();
                let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
                let t = run(n, rate, || {
                    libc::read(fd, buf.as_mut_ptr().cast(), 1024);
                });
                (t, n)
            }
            "read-file" => {
                // One file per thread (--threads): each removes its own once open.
                let tid = libc::syscall(libc::SYS_gettid);
                let path = std::env::temp_dir().join(format!("sp-bench-file-{}-{tid}", std::process::id()));
                std::fs::write(&path, vec![0u8; 1 << 20])
                    .unwrap_or_else(|e| die(&format!("{}: {e}", path.display())));
                let file =
                    std::fs::File::open(&path).unwrap_or_else(|e| die(&format!("{}: {e}", path.display())));
                let _ = std::fs::remove_file(&path);
                let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
                let t = run(n, rate, || {
                    if libc::read(fd, buf.as_mut_ptr().cast(), 1024) == 0 {
                        libc::lseek(fd, 0, libc::SEEK_SET);
                    }
                });
                (t, n)
            }
            "futex" => {
                let word: u32 = 0;
                let t = run(n, rate, || {
                    libc::syscall(libc::SYS_futex, &word, libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1);
                });
                (t, n)
            }
            // A futex wait that returns at once (the word is not the value
            // it waits for: EAGAIN): the wait path of the programs, where
            // the stall captures note every wait while it lasts.
            "futex_wait" => {
                let word: u32 = 0;
                let t = run(n, rate, || {
                    libc::syscall(libc::SYS_futex, &word, libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, 1, 0);
                });
                (t, n)
            }
            "openat" | "openat-rw" => {
                let path = CString::new(format!("/tmp/sp-bench-{}", std::process::id())).unwrap();
                let fd = libc::open(path.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o600);
                libc::close(fd);
                let flags = if call == "openat" { libc::O_RDONLY } else { libc::O_RDWR };
                let t = run(n, rate, || {
                    let fd = libc::open(path.as_ptr(), flags);
                    libc::close(fd);
                });
                libc::unlink(path.as_ptr());
                (t, 2 * n)
            }
            "mmap" => {
                let t = run(n, rate, || {
                    let p = libc::mmap(
                        std::ptr::null_mut(),
                        64 << 10,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    );
                    libc::munmap(p, 64 << 10);
                });
                (t, 2 * n)
            }
            "cuda-sync" | "cuda-other" => {
                let f = *CUDA_CALL.get().expect("loaded in main");
                let mut count: libc::c_int = 0;
                let arg = if call == "cuda-sync" {
                    std::ptr::null_mut()
                } else {
                    (&mut count as *mut libc::c_int).cast()
                };
                let t = run(n, rate, || {
                    f(arg);
                });
                (t, n)
            }
            "pingpong" => {
                use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
                static TURN: AtomicU32 = AtomicU32::new(0);
                let futex = |op: i32, val: u32| {
                    libc::syscall(
                        libc::SYS_futex,
                        TURN.as_ptr(),
                        op | libc::FUTEX_PRIVATE_FLAG,
                        val,
                        std::ptr::null::<libc::timespec>(),
                    );
                };
                // Whose turn: 1 the other thread's, 0 ours.
                let other = std::thread::spawn(move || {
                    for _ in 0..n {
                        while TURN.load(SeqCst) != 1 {
                            futex(libc::FUTEX_WAIT, 0);
                        }
                        TURN.store(0, SeqCst);
                        futex(libc::FUTEX_WAKE, 1);
                    }
                });
                let t = run(n, None, || {
                    TURN.store(1, SeqCst);
                    futex(libc::FUTEX_WAKE, 1);
                    while TURN.load(SeqCst) != 0 {
                        futex(libc::FUTEX_WAIT, 1);
                    }
                });
                let _ = other.join();
                (t, 2 * n)
            }
            "getppid" => {
                let t = run(n, rate, || {
                    libc::syscall(libc::SYS_getppid);
                });
                (t, n)
            }
            "write" => {
                let path = CString::new("/dev/null").unwrap();
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
                let t = run(n, rate, || {
                    libc::write(fd, buf.as_ptr().cast(), 1);
                });
                (t, n)
            }
            other => die(&format!("unknown call {other}")),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let call =
        args.first().cloned().unwrap_or_else(|| die("usage: sp-bench CALL N [--rate R] [--threads T]"));
    let n: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| die("N: a number of iterations"));
    let opt = |name: &str| {
        args.iter().position(|a| a == name).map(|i| {
            args.get(i + 1)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| die(&format!("{name} needs a number")))
        })
    };
    let rate = opt("--rate");
    if let Some(cpu) = opt("--cpu") {
        // SAFETY: a cpu_set_t on the stack, filled by the libc macros, for
        // this process (threads spawned later inherit it).
        let ok = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        };
        if !ok {
            die(&format!("--cpu {cpu}: {}", std::io::Error::last_os_error()));
        }
    }
    let threads = opt("--threads").unwrap_or(1).max(1);
    let mut kept = Vec::new();
    for i in 0..opt("--open-files").unwrap_or(0) {
        let path = std::env::temp_dir().join(format!("sp-bench-{}-{i}", std::process::id()));
        std::fs::write(&path, b"x").unwrap_or_else(|e| die(&format!("{}: {e}", path.display())));
        kept.push(std::fs::File::open(&path).unwrap_or_else(|e| die(&e.to_string())));
        let _ = std::fs::remove_file(&path);
    }
    match call.as_str() {
        "cuda-sync" => {
            let _ = CUDA_CALL.set(load_cuda("cudaStreamSynchronize"));
        }
        "cuda-other" => {
            let _ = CUDA_CALL.set(load_cuda("cudaGetDeviceCount"));
        }
        _ => {}
    }
    if args.iter().any(|a| a == "--wait") {
        println!("ready");
        let mut b = [0u8; 1];
        let _ = std::io::Read::read(&mut std::io::stdin(), &mut b);
    }
    let wall = Instant::now();
    let results: Vec<(Duration, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(|| bench(&call, n, rate))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ns: f64 = results.iter().map(|(t, c)| t.as_nanos() as f64 / *c as f64).sum::<f64>() / threads as f64;
    let calls: u64 = results.iter().map(|(_, c)| c).sum();
    let per_second = calls as f64 / wall.elapsed().as_secs_f64();
    println!("ns_per_call={ns:.1} calls={calls} calls_per_second={per_second:.0}");
    drop(kept);
}
