//! A process whose system calls are known exactly, for the integration
//! tests (see `sonic_probe_tests::workload` for the numbers).
//!
//! Usage: sp-workload [--name NAME] MODE [ARGS]
//!   exact                      the fixed sequence of workload::exact
//!   futex-wait MS              the main thread waits on a futex until a
//!                              second thread wakes it MS ms later
//!   spawn THREADS FORKS READS  threads and forked children read /dev/zero
//!   stall OP MS                the main thread waits MS ms in futex operation
//!                              OP (wait, wait_bitset, lock_pi, lock_pi2,
//!                              wait_requeue_pi, waitv) until a thread named
//!                              "holder" wakes it or unlocks, MS ms after it
//!                              saw it blocked (in /proc)
//!   io PATH                    the fixed sequence of workload::io (pread64,
//!                              write, pwrite64, ioctl) on PATH, a pipe and
//!                              /dev/null
//!   rename NAME N              N reads of /dev/zero, then under the process
//!                              name NAME 3*N reads, then under the first
//!                              name again N reads (the kernel's slot cache
//!                              follows the name)
//!   names K N                  N reads of /dev/zero under each of K process
//!                              names: its own name's first 9 characters,
//!                              then ".1" to ".K" (more keys than the
//!                              kernel has statistics slots), 0.2 ms apart
//!   fdreuse PATH               pipes' descriptor numbers taken over by
//!                              PATH, by dup2 and by an open after
//!                              close_range (see workload::fdreuse)
//!   fdexec PATH                a close-on-exec pipe read at one number,
//!                              then exec, and PATH dup2'd onto that number
//!                              and read (see workload::fdexec)
//!   reopen PATH HOLD_MS        PATH opened read-only, read and closed
//!                              again and again, in bursts, and opened
//!                              read-write once a burst (see
//!                              workload::reopen); then HOLD_MS ms idle
//!   move N M                   N reads of /dev/zero, then "paused" on
//!                              stdout and a second go read, then M reads
//!                              (the test moves it to another cgroup
//!                              between the two go signals)
//!   idle                       nothing after the go signal
//!   cpu SECS                   threads spin_a and spin_b pinned to CPU 0
//!                              and solo pinned to CPU 1, named and
//!                              blocked: "thread NAME TID" each, "named";
//!                              at the next byte on stdin each spins SECS
//!                              s, prints "thread NAME TID START_NS END_NS"
//!                              (CLOCK_MONOTONIC) and blocks again; then
//!                              "parked", and it exits at the next byte
//!   woken NAPS MS              threads hog (nice 0) and napper (nice 19,
//!                              timer slack 1 ns) pinned to CPU 0: "thread
//!                              napper TID", "named"; at the next byte on
//!                              stdin the hog spins until the napper has
//!                              slept NAPS x MS ms in nanosleep, each sleep
//!                              followed by a wait for the hog's slice to
//!                              end; then "thread napper TID START_NS END_NS
//!                              LATE_NS" (LATE_NS: how much later than asked
//!                              its sleeps returned, and how long after the
//!                              go it started), both block, "parked", and
//!                              it exits at the next byte
//!   spin CPU SECS              the main thread, pinned to CPU (a number,
//!                              or "any" for no pinning), spins SECS s
//!                              after the go signal, prints "done" and
//!                              waits for one more byte before it exits
//!   blocked [DIR]              threads blocked for known times, each in
//!                              one kind of call: sleeper (nanosleep 4 x
//!                              0.5 s), waiter (a futex wait woken 1.5 s
//!                              after it blocked), piper (a pipe read
//!                              written 1 s after), socker (a read of a
//!                              unix socket written 1 s after) and, with
//!                              DIR (`blocked DIR`), filer (slow_fs::READS
//!                              preads of DIR's slow file: the test serves
//!                              a FUSE filesystem there whose reads take
//!                              slow_fs::READ_DELAY each); each
//!                              prints "thread NAME TID START_NS END_NS
//!                              BLOCKED_NS SPAWN_NS" (its life, the time it
//!                              measured around its blocking calls, when
//!                              its parent was about to spawn it) and
//!                              exits; then "done"
//!
//! Calls go straight to libc (no allocation, no std I/O) after the go
//! signal so that nothing else is counted; it ends with _exit.

use std::ffi::CString;

use sonic_probe_tests::{
    slow_fs,
    workload::{exact, fdexec, fdreuse, io, reopen},
};

static mut BUF: [u8; 4096] = [0; 4096];

fn die(msg: &str) -> ! {
    eprintln!("sp-workload: {msg}");
    std::process::exit(2)
}

fn buf() -> *mut libc::c_void {
    std::ptr::addr_of_mut!(BUF).cast()
}

unsafe fn futex(word: *const u32, op: i32, val: u32, timeout: *const libc::timespec) -> i64 {
    libc::syscall(libc::SYS_futex, word, op, val, timeout, 0usize, 0u32)
}

/// The futex words of `stall`.
static WORD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
static PI: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
static HELD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
/// Set by the holder once its last futex call has returned.
static DONE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

const PRIVATE: i32 = libc::FUTEX_PRIVATE_FLAG;
const FUTEX_LOCK_PI2: i32 = 13;
const SYS_FUTEX_WAITV: libc::c_long = 449;

#[repr(C)]
struct FutexWaitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The main thread waits `ms` in futex operation `op` for the "holder".
fn stall(op: &str, ms: u64) {
    use std::sync::atomic::Ordering::SeqCst;
    let pi = matches!(op, "lock_pi" | "lock_pi2" | "wait_requeue_pi");
    let op_owned = op.to_string();
    let waiter = gettid();
    let holder = std::thread::spawn(move || {
        let name = CString::new("holder").unwrap();
        // SAFETY: naming our own thread; raw futex calls on static words.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, name.as_ptr());
            if pi {
                PI.store(gettid(), SeqCst); // take the PI lock, uncontended
            }
            HELD.store(1, SeqCst);
            // The wait lasts `ms` from when the waiter is blocked in it, however
            // late a loaded machine lets it get there.
            let syscall = format!("/proc/self/task/{waiter}/syscall");
            while !std::fs::read_to_string(&syscall).is_ok_and(|s| {
                s.starts_with(&format!("{} ", libc::SYS_futex))
                    || s.starts_with(&format!("{SYS_FUTEX_WAITV} "))
            }) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            std::thread::sleep(std::time::Duration::from_millis(ms));
            WORD.store(1, SeqCst);
            match op_owned.as_str() {
                "wait" | "waitv" => {
                    futex(WORD.as_ptr(), libc::FUTEX_WAKE | PRIVATE, 1, std::ptr::null());
                }
                "wait_bitset" => {
                    libc::syscall(
                        libc::SYS_futex,
                        WORD.as_ptr(),
                        libc::FUTEX_WAKE_BITSET | PRIVATE,
                        1,
                        0usize,
                        0usize,
                        u32::MAX,
                    );
                }
                "lock_pi" | "lock_pi2" => {
                    futex(PI.as_ptr(), libc::FUTEX_UNLOCK_PI | PRIVATE, 0, std::ptr::null());
                }
                "wait_requeue_pi" => {
                    // Wake one waiter onto PI (it can't take it: we hold it), then unlock.
                    libc::syscall(
                        libc::SYS_futex,
                        WORD.as_ptr(),
                        libc::FUTEX_CMP_REQUEUE_PI | PRIVATE,
                        1,
                        1usize,
                        PI.as_ptr(),
                        1u32,
                    );
                    futex(PI.as_ptr(), libc::FUTEX_UNLOCK_PI | PRIVATE, 0, std::ptr::null());
                }
                _ => {}
            }
            // Park in a call no test counts until _exit ends us. A thread
            // killed inside a system call (its own exit included) is seen by
            // the tracepoints but not by `strace -c`, which never sees that
            // call return: the oracle would miss it.
            DONE.store(1, SeqCst);
            loop {
                libc::pause();
            }
        }
    });
    while HELD.load(SeqCst) == 0 {
        std::thread::yield_now();
    }
    // SAFETY: raw futex calls on static words.
    let ret = unsafe {
        match op {
            "wait" => futex(WORD.as_ptr(), libc::FUTEX_WAIT | PRIVATE, 0, std::ptr::null()),
            "wait_bitset" => libc::syscall(
                libc::SYS_futex,
                WORD.as_ptr(),
                libc::FUTEX_WAIT_BITSET | PRIVATE,
                0,
                0usize,
                0usize,
                u32::MAX,
            ),
            "lock_pi" => futex(PI.as_ptr(), libc::FUTEX_LOCK_PI | PRIVATE, 0, std::ptr::null()),
            "lock_pi2" => futex(PI.as_ptr(), FUTEX_LOCK_PI2 | PRIVATE, 0, std::ptr::null()),
            "wait_requeue_pi" => libc::syscall(
                libc::SYS_futex,
                WORD.as_ptr(),
                libc::FUTEX_WAIT_REQUEUE_PI | PRIVATE,
                0,
                0usize,
                PI.as_ptr(),
                0u32,
            ),
            "waitv" => {
                let w = FutexWaitv { val: 0, uaddr: WORD.as_ptr() as u64, flags: 2 | 128, reserved: 0 };
                libc::syscall(SYS_FUTEX_WAITV, &w as *const FutexWaitv, 1u32, 0u32, 0usize, 0i32)
            }
            other => die(&format!("unknown futex op {other}")),
        }
    };
    if ret != 0 {
        die(&format!("futex {op} returned {ret}: {}", std::io::Error::last_os_error()));
    }
    // No join: pthread_join would add a futex wait of its own. Wait until
    // the holder's last futex call has returned; _exit then ends it in pause.
    while DONE.load(SeqCst) == 0 {
        std::thread::yield_now();
    }
    drop(holder);
}

/// CLOCK_MONOTONIC in ns (bpf_ktime_get_ns's clock).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writing into a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Spins on the CPU for `ms` ms, says "done" and waits for a last byte.
fn spin(ms: u64) {
    let start = monotonic_ns();
    while monotonic_ns() - start < ms * 1_000_000 {
        std::hint::spin_loop();
    }
    println!("done");
    let mut b = [0u8; 1];
    // SAFETY: reading one byte into a local buffer.
    unsafe { libc::read(0, b.as_mut_ptr().cast(), 1) };
}

/// Names the calling thread.
fn name_thread(name: &str) {
    let c = CString::new(name).unwrap_or_else(|_| die("bad name"));
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of <= 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr()) };
}

/// Pins the calling thread to one CPU.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t with one bit set, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            die(&format!("cannot pin to CPU {cpu}: {}", std::io::Error::last_os_error()));
        }
    }
}

/// Whether thread `tid` of this process sits in system call `nr`.
/// This thread's time on a CPU and waiting for one so far, as the kernel
/// counts it (/proc/thread-self/schedstat), in nanoseconds.
fn own_cpu_and_runqueue_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    text.split_whitespace().take(2).filter_map(|v| v.parse::<u64>().ok()).sum()
}

fn in_syscall(tid: u32, nr: i64) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
        .is_ok_and(|s| s.split_whitespace().next() == Some(&nr.to_string()))
}

/// Mode cpu: see the usage.
fn cpu(secs: u64) {
    use std::sync::{Arc, Mutex};
    let named = Arc::new(Mutex::new(Vec::new()));
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (mut start, mut park) = ([-1; 2], [-1; 2]);
    // SAFETY: pipes into our own arrays; nobody ever writes park.
    unsafe {
        libc::pipe(start.as_mut_ptr());
        libc::pipe(park.as_mut_ptr());
    }
    let threads = [("spin_a", 0), ("spin_b", 0), ("solo", 1)];
    for (name, cpu) in threads {
        let (named, lines) = (named.clone(), lines.clone());
        let (start_fd, park_fd) = (start[0], park[0]);
        std::thread::spawn(move || {
            name_thread(name);
            pin_to(cpu);
            named.lock().unwrap().push(format!("thread {name} {}", gettid()));
            let mut b = [0u8; 1];
            // SAFETY: blocking reads of our own pipes into a local buffer.
            unsafe { libc::read(start_fd, b.as_mut_ptr().cast(), 1) };
            let start = monotonic_ns();
            while monotonic_ns() - start < secs * 1_000_000_000 {
                std::hint::spin_loop();
            }
            let end = monotonic_ns();
            lines.lock().unwrap().push(format!("thread {name} {} {start} {end}", gettid()));
            // SAFETY: as above; blocks for good.
            unsafe { libc::read(park_fd, b.as_mut_ptr().cast(), 1) };
        });
    }
    let wait_for = |v: &Arc<Mutex<Vec<String>>>| {
        while v.lock().unwrap().len() < threads.len() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for l in v.lock().unwrap().iter() {
            println!("{l}");
        }
    };
    wait_for(&named);
    println!("named");
    let mut b = [0u8; 1];
    // SAFETY: reading one byte of stdin, writing three into our own pipe.
    unsafe {
        libc::read(0, b.as_mut_ptr().cast(), 1);
        libc::write(start[1], b"xyz".as_ptr().cast(), 3);
    }
    wait_for(&lines);
    println!("parked");
    // SAFETY: reading one byte into a local buffer.
    unsafe { libc::read(0, b.as_mut_ptr().cast(), 1) };
}

/// Mode woken: see the usage.
fn woken(naps: u64, ms: u64) {
    use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
    static DONE: AtomicBool = AtomicBool::new(false);
    static NAPPER: AtomicU32 = AtomicU32::new(0);
    static GO_NS: AtomicU64 = AtomicU64::new(0);
    let (mut start, mut park) = ([-1; 2], [-1; 2]);
    // SAFETY: pipes into our own arrays; nobody ever writes park.
    unsafe {
        libc::pipe(start.as_mut_ptr());
        libc::pipe(park.as_mut_ptr());
    }
    let (start_fd, park_fd) = (start[0], park[0]);
    let wait_on = |fd: i32| {
        let mut b = [0u8; 1];
        // SAFETY: a blocking read of our own pipe into a local buffer.
        unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
    };
    std::thread::spawn(move || {
        name_thread("hog");
        pin_to(0);
        wait_on(start_fd);
        while !DONE.load(SeqCst) {
            std::hint::spin_loop();
        }
        wait_on(park_fd);
    });
    let (line_tx, line_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        name_thread("napper");
        pin_to(0);
        let tid = gettid();
        // SAFETY: this thread's own nice value (a tid is a "process" here)
        // and timer slack (so that a sleep returns late only by its waits).
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, tid, 19);
            libc::prctl(libc::PR_SET_TIMERSLACK, 1u64);
        }
        NAPPER.store(tid, SeqCst);
        wait_on(start_fd);
        let begin = monotonic_ns();
        let mut late = begin - GO_NS.load(SeqCst);
        let nap = libc::timespec { tv_sec: (ms / 1000) as i64, tv_nsec: ((ms % 1000) * 1_000_000) as i64 };
        for _ in 0..naps {
            let t = monotonic_ns();
            // SAFETY: a plain nanosleep.
            unsafe { libc::nanosleep(&nap, std::ptr::null_mut()) };
            late += (monotonic_ns() - t).saturating_sub(ms * 1_000_000);
        }
        let end = monotonic_ns();
        DONE.store(true, SeqCst);
        let _ = line_tx.send(format!("thread napper {tid} {begin} {end} {late}"));
        wait_on(park_fd);
    });
    while NAPPER.load(SeqCst) == 0 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    println!("thread napper {}", NAPPER.load(SeqCst));
    println!("named");
    let mut b = [0u8; 1];
    // SAFETY: reading one byte of stdin, writing two into our own pipe.
    unsafe {
        libc::read(0, b.as_mut_ptr().cast(), 1);
        GO_NS.store(monotonic_ns(), SeqCst);
        libc::write(start[1], b"xy".as_ptr().cast(), 2);
    }
    let line = line_rx.recv().unwrap_or_else(|_| die("napper ended"));
    println!("{line}");
    println!("parked");
    // SAFETY: reading one byte into a local buffer.
    unsafe { libc::read(0, b.as_mut_ptr().cast(), 1) };
}

/// Mode blocked: see the usage.
fn blocked(slow_file: Option<std::fs::File>) {
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    use std::time::Duration;
    static WAIT_WORD: AtomicU32 = AtomicU32::new(0);
    let mut pipe = [-1; 2];
    let mut sock = [-1; 2];
    // SAFETY: into our own arrays.
    unsafe {
        libc::pipe(pipe.as_mut_ptr());
        libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sock.as_mut_ptr());
    }
    // Each thread blocks in its one call and nowhere else (no lock, no
    // allocation), so that what it measures around the call is all its
    // block: its tid goes to an atomic, its line is written by main.
    static TIDS: [AtomicU32; 5] =
        [AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)];
    const NAMES: [&str; 5] = ["sleeper", "waiter", "piper", "socker", "filer"];
    let spawn = |name: &'static str, body: Box<dyn FnOnce() -> u64 + Send>| {
        let spawned = monotonic_ns();
        let slot = NAMES.iter().position(|n| *n == name).unwrap_or_else(|| die("unknown thread"));
        let handle = std::thread::spawn(move || {
            name_thread(name);
            let start = monotonic_ns();
            TIDS[slot].store(gettid(), SeqCst);
            // The kernel's count of its time on and waiting for a CPU
            // around the calls (read outside them): what of its own
            // measurement was not a block.
            let busy_before = own_cpu_and_runqueue_ns();
            let blocked_ns = body();
            let busy_ns = own_cpu_and_runqueue_ns().saturating_sub(busy_before);
            let end = monotonic_ns();
            (start, end, blocked_ns, busy_ns)
        });
        (name, slot, spawned, handle)
    };
    let timed = |f: &dyn Fn()| {
        let t = monotonic_ns();
        f();
        monotonic_ns() - t
    };
    let (pipe_r, sock_r) = (pipe[0], sock[0]);
    let slow_fd = slow_file.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    let mut handles = vec![
        spawn(
            "sleeper",
            Box::new(move || {
                (0..4)
                    .map(|_| {
                        timed(&|| {
                            let ts = libc::timespec { tv_sec: 0, tv_nsec: 500_000_000 };
                            // SAFETY: a plain nanosleep.
                            unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
                        })
                    })
                    .sum()
            }),
        ),
        spawn(
            "waiter",
            Box::new(move || {
                timed(&|| {
                    while WAIT_WORD.load(SeqCst) == 0 {
                        // SAFETY: a futex wait on our own static word.
                        unsafe { futex(WAIT_WORD.as_ptr(), libc::FUTEX_WAIT | PRIVATE, 0, std::ptr::null()) };
                    }
                })
            }),
        ),
        spawn(
            "piper",
            Box::new(move || {
                // SAFETY: a read of our own pipe into a local buffer.
                timed(&|| unsafe {
                    let mut b = [0u8; 1];
                    libc::read(pipe_r, b.as_mut_ptr().cast(), 1);
                })
            }),
        ),
        spawn(
            "socker",
            Box::new(move || {
                // SAFETY: a read of our own socket into a local buffer.
                timed(&|| unsafe {
                    let mut b = [0u8; 1];
                    libc::read(sock_r, b.as_mut_ptr().cast(), 1);
                })
            }),
        ),
    ];
    if let Some(slow_fd) = slow_fd {
        handles.push(spawn(
            "filer",
            Box::new(move || {
                // SAFETY: reads of our own descriptor into a local buffer.
                timed(&|| unsafe {
                    let mut b = [0u8; 4096];
                    for i in 0..slow_fs::READS {
                        libc::pread(slow_fd, b.as_mut_ptr().cast(), b.len(), (i * 4096) as i64);
                    }
                })
            }),
        ));
    }
    // Each waker acts a known time after its thread is blocked in its call.
    let blocked_in = move |name: &str, nr: i64| {
        let slot = NAMES.iter().position(|n| *n == name).unwrap_or_else(|| die("unknown thread"));
        loop {
            let tid = TIDS[slot].load(SeqCst);
            if tid != 0 && in_syscall(tid, nr) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let wakers = vec![
        std::thread::spawn({
            move || {
                blocked_in("waiter", libc::SYS_futex);
                std::thread::sleep(Duration::from_millis(1500));
                WAIT_WORD.store(1, SeqCst);
                // SAFETY: waking our own static word.
                unsafe { futex(WAIT_WORD.as_ptr(), libc::FUTEX_WAKE | PRIVATE, 1, std::ptr::null()) };
            }
        }),
        std::thread::spawn({
            let fd = pipe[1];
            move || {
                blocked_in("piper", libc::SYS_read);
                std::thread::sleep(Duration::from_millis(1000));
                // SAFETY: one byte into our own pipe.
                unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) };
            }
        }),
        std::thread::spawn({
            let fd = sock[1];
            move || {
                blocked_in("socker", libc::SYS_read);
                std::thread::sleep(Duration::from_millis(1000));
                // SAFETY: one byte into our own socket.
                unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) };
            }
        }),
    ];
    for (name, slot, spawned, h) in handles {
        let (start, end, blocked_ns, busy_ns) = h.join().unwrap_or_else(|_| die("a thread panicked"));
        println!("thread {name} {} {start} {end} {blocked_ns} {spawned} {busy_ns}", TIDS[slot].load(SeqCst));
    }
    for w in wakers {
        let _ = w.join();
    }
    // Closed before "done": the test unmounts once it has read it.
    drop(slow_file);
    println!("done");
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let own_name =
        if args.first().map(String::as_str) == Some("--name") { args.get(1).cloned() } else { None };
    if args.first().map(String::as_str) == Some("--name") {
        if args.len() < 2 {
            die("--name needs a value");
        }
        let name = CString::new(args[1].clone()).unwrap_or_else(|_| die("bad name"));
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of <= 16 bytes.
        unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
        args.drain(..2);
    }
    let mode = args.first().cloned().unwrap_or_else(|| die("no mode"));
    let num =
        |i: usize| -> u64 { args.get(i).and_then(|s| s.parse().ok()).unwrap_or_else(|| die("bad number")) };
    // Everything that allocates or opens happens before the go signal.
    let zero = CString::new("/dev/zero").unwrap();
    let null = CString::new("/dev/null").unwrap();
    let missing = CString::new(exact::MISSING_PATH).unwrap();
    let (threads, forks, reads, wait_ms) = match mode.as_str() {
        "spawn" => (num(1), num(2), num(3), 0),
        "futex-wait" => (0, 0, 0, num(1)),
        "stall" => (0, 0, 0, num(2)),
        "rename" => (0, 0, num(2), 0),
        "move" => (0, 0, num(1), 0),
        "names" => (0, 0, num(2), 0),
        "exact" | "idle" | "io" | "fdreuse" | "fdexec" | "fdexec-after" | "reopen" | "blocked" => {
            (0, 0, 0, 0)
        }
        "cpu" => (0, 0, num(1), 0),
        "woken" => (0, 0, num(1), num(2)),
        "spin" => {
            if args.get(1).map(String::as_str) != Some("any") {
                pin_to(num(1) as usize);
            }
            (0, 0, 0, num(2) * 1000)
        }
        other => die(&format!("unknown mode {other}")),
    };
    let io_path = CString::new(args.get(1).cloned().unwrap_or_default()).unwrap_or_else(|_| die("bad path"));
    let mut pipe = [-1; 2];
    let null_fd = if mode == "io" {
        // SAFETY: valid NUL-terminated path; a pipe into our own array.
        unsafe {
            libc::pipe(pipe.as_mut_ptr());
            libc::open(null.as_ptr(), libc::O_WRONLY)
        }
    } else {
        -1
    };
    // Only in the naming modes: a whole-host test would count this open and
    // read.
    let many_names: Vec<CString> = if mode == "names" {
        let own = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
        let prefix: String = own.trim_end().chars().take(9).collect();
        (1..=num(1))
            .map(|i| CString::new(format!("{prefix}.{i}")).unwrap_or_else(|_| die("bad name")))
            .collect()
    } else {
        Vec::new()
    };
    let names = if mode == "rename" {
        let first_name = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
        let second =
            CString::new(args.get(1).cloned().unwrap_or_default()).unwrap_or_else(|_| die("bad name"));
        Some((second, CString::new(first_name.trim_end()).unwrap_or_else(|_| die("bad name"))))
    } else {
        None
    };
    let reused_file = if mode == "fdreuse" {
        // SAFETY: valid NUL-terminated path.
        let fd = unsafe { libc::open(io_path.as_ptr(), libc::O_RDONLY) };
        if fd < 0 {
            die(&format!("open {}: {}", args[1], std::io::Error::last_os_error()));
        }
        fd
    } else {
        -1
    };
    let zero_fd = if matches!(mode.as_str(), "spawn" | "rename" | "names" | "move") {
        // SAFETY: valid NUL-terminated path.
        unsafe { libc::open(zero.as_ptr(), libc::O_RDONLY) }
    } else {
        -1
    };

    // fdexec's second image: what it does is below, with no go signal.
    let exec_args: Vec<CString> = if mode == "fdexec" {
        let mut v = Vec::new();
        if let Some(n) = &own_name {
            v.push(CString::new("--name").unwrap());
            v.push(CString::new(n.as_str()).unwrap_or_else(|_| die("bad name")));
        }
        v.push(CString::new("fdexec-after").unwrap());
        v.push(io_path.clone());
        v
    } else {
        Vec::new()
    };
    let reads_after_move = if mode == "move" { num(2) } else { 0 };
    let self_exe = CString::new("/proc/self/exe").unwrap();
    if mode == "fdexec-after" {
        // SAFETY: raw system calls on our own buffers and fds.
        unsafe {
            // The daemon's sweep (every second) sees the exec first.
            let ts = libc::timespec { tv_sec: fdexec::SETTLE_SECS, tv_nsec: 0 };
            libc::nanosleep(&ts, std::ptr::null_mut());
            let fd = libc::open(io_path.as_ptr(), libc::O_RDONLY);
            if fd < 0 || libc::dup2(fd, fdexec::FD) != fdexec::FD {
                die("open or dup2");
            }
            for _ in 0..fdexec::FILE_READS {
                libc::read(fdexec::FD, buf(), fdexec::READ_SIZE as usize);
            }
            libc::_exit(0);
        }
    }

    // blocked DIR: the slow file of the filesystem the test serves at DIR,
    // opened (lookup and open answered at once; its reads are the slow
    // part). Not served here: a process killed while it holds a file of
    // a filesystem it serves itself never exits (its close waits in D
    // state for a FLUSH answer from a server thread already gone).
    let slow_file = if mode == "blocked" && args.len() > 1 {
        let path = std::path::Path::new(&args[1]).join(slow_fs::FILE);
        let file = std::fs::File::open(&path)
            .unwrap_or_else(|e| die(&format!("opening the slow file {}: {e}", path.display())));
        Some(file)
    } else {
        None
    };

    println!("ready");
    let mut go = [0u8; 1];
    // SAFETY: reading one byte into a local buffer.
    unsafe { libc::read(0, go.as_mut_ptr().cast(), 1) };

    match mode.as_str() {
        // SAFETY (all modes): raw system calls on our own buffers and fds.
        "rename" => unsafe {
            let (second, first) = names.as_ref().unwrap_or_else(|| die("no names"));
            for (name, n) in [(None, reads), (Some(second), 3 * reads), (Some(first), reads)] {
                if let Some(name) = name {
                    libc::prctl(libc::PR_SET_NAME, name.as_ptr());
                }
                for _ in 0..n {
                    libc::read(zero_fd, buf(), 64);
                }
            }
        },
        "move" => unsafe {
            for _ in 0..reads {
                libc::read(zero_fd, buf(), 64);
            }
            let paused = b"paused\n";
            libc::write(1, paused.as_ptr().cast(), paused.len());
            libc::read(0, go.as_mut_ptr().cast(), 1);
            for _ in 0..reads_after_move {
                libc::read(zero_fd, buf(), 64);
            }
        },
        "names" => unsafe {
            // A moment between names: each name past the statistics slots
            // takes a per-CPU hash entry, allocated in the tracepoint
            // (atomic context); on 5.10 that allocator refills its pages
            // from a work item, and hundreds of new names within a
            // millisecond (no service renames itself that fast) can find
            // it empty: their calls then count under "other", exact in
            // total but not by name.
            let pause = libc::timespec { tv_sec: 0, tv_nsec: 200_000 };
            for name in &many_names {
                libc::prctl(libc::PR_SET_NAME, name.as_ptr());
                for _ in 0..reads {
                    libc::read(zero_fd, buf(), 64);
                }
                libc::nanosleep(&pause, std::ptr::null_mut());
            }
        },
        "exact" => unsafe {
            let zfd = libc::open(zero.as_ptr(), libc::O_RDONLY);
            for _ in 0..exact::DEV_NULL_OPENS {
                let fd = libc::open(null.as_ptr(), libc::O_RDONLY);
                libc::close(fd);
            }
            for _ in 0..exact::ENOENT_OPENS {
                libc::open(missing.as_ptr(), libc::O_RDONLY);
            }
            for _ in 0..exact::READS_OK {
                libc::read(zfd, buf(), exact::READ_SIZE as usize);
            }
            for _ in 0..exact::READS_EBADF {
                libc::read(-1, buf(), 16);
            }
            for _ in 0..exact::MAPS_OK {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    exact::MAP_SIZE as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                libc::munmap(p, exact::MAP_SIZE as usize);
            }
            for _ in 0..exact::MMAP_EINVAL {
                libc::mmap(
                    std::ptr::null_mut(),
                    0,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
            }
            let word: u32 = 0;
            for _ in 0..exact::FUTEX_WAKES {
                futex(&word, libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1, std::ptr::null());
            }
            let ts = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
            futex(&word, libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, 0, &ts); // ETIMEDOUT
            futex(&word, libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, 1, &ts); // EAGAIN
        },
        "io" => unsafe {
            let fd = libc::open(io_path.as_ptr(), libc::O_RDONLY);
            if fd < 0 {
                die(&format!("open {}: {}", args[1], std::io::Error::last_os_error()));
            }
            for i in 0..io::PREADS_OK + io::PREADS_EOF {
                let off = (i * io::PREAD_SIZE) as libc::off_t;
                libc::pread(fd, buf(), io::PREAD_SIZE as usize, off);
            }
            for _ in 0..io::PREADS_EBADF {
                libc::pread(-1, buf(), 16, 0);
            }
            for _ in 0..io::PREADS_ESPIPE {
                libc::pread(pipe[0], buf(), 16, 0);
            }
            for _ in 0..io::WRITES_NULL {
                libc::write(null_fd, buf(), io::WRITE_SIZE as usize);
            }
            for _ in 0..io::WRITES_PIPE {
                libc::write(pipe[1], buf(), io::WRITE_SIZE as usize);
            }
            for _ in 0..io::WRITES_EBADF {
                libc::write(-1, buf(), 16);
            }
            for i in 0..io::PWRITES_NULL {
                let off = (i * io::PWRITE_SIZE) as libc::off_t;
                libc::pwrite(null_fd, buf(), io::PWRITE_SIZE as usize, off);
            }
            for _ in 0..io::PWRITES_ESPIPE {
                libc::pwrite(pipe[1], buf(), 16, 0);
            }
            for _ in 0..io::PWRITES_EBADF {
                libc::pwrite(-1, buf(), 16, 0);
            }
            let mut n: libc::c_int = 0;
            for _ in 0..io::IOCTLS_OK {
                libc::ioctl(pipe[0], libc::FIONREAD, &mut n);
            }
            let mut tio: libc::termios = std::mem::zeroed();
            for _ in 0..io::IOCTLS_ENOTTY {
                libc::ioctl(null_fd, libc::TCGETS, &mut tio);
            }
            for _ in 0..io::IOCTLS_EBADF {
                libc::ioctl(-1, libc::FIONREAD, &mut n);
            }
            libc::close(fd);
        },
        "reopen" => unsafe {
            for burst in 0..reopen::BURSTS {
                if burst > 0 {
                    let ms = reopen::GAP_MS as libc::c_long;
                    let ts = libc::timespec { tv_sec: 0, tv_nsec: ms * 1_000_000 };
                    libc::nanosleep(&ts, std::ptr::null_mut());
                }
                for _ in 0..reopen::READ_OPENS {
                    let fd = libc::open(io_path.as_ptr(), libc::O_RDONLY);
                    if fd < 0 {
                        die(&format!("open {}: {}", args[1], std::io::Error::last_os_error()));
                    }
                    libc::read(fd, buf(), reopen::FILE_SIZE as usize);
                    libc::close(fd);
                }
                let fd = libc::open(io_path.as_ptr(), libc::O_RDWR);
                libc::close(fd);
            }
            let hold = num(2);
            let ts = libc::timespec {
                tv_sec: (hold / 1000) as libc::time_t,
                tv_nsec: ((hold % 1000) * 1_000_000) as libc::c_long,
            };
            libc::nanosleep(&ts, std::ptr::null_mut());
        },
        "fdreuse" => unsafe {
            // A pipe read PIPE_READS times (1 byte each); returns its read end.
            let read_a_pipe = || {
                let mut p = [-1; 2];
                if libc::pipe(p.as_mut_ptr()) != 0 {
                    die("pipe");
                }
                for _ in 0..fdreuse::PIPE_READS {
                    libc::write(p[1], buf(), 1);
                    libc::read(p[0], buf(), 1);
                }
                libc::close(p[1]);
                p[0]
            };
            let read_the_file = |fd: libc::c_int| {
                libc::lseek(fd, 0, libc::SEEK_SET);
                for _ in 0..fdreuse::FILE_READS {
                    libc::read(fd, buf(), fdreuse::READ_SIZE as usize);
                }
            };
            // 1. closed (traced), the file dup2'd onto the number (not traced).
            let first = read_a_pipe();
            libc::close(first);
            if libc::dup2(reused_file, first) != first {
                die("dup2");
            }
            read_the_file(first);
            libc::close(first);
            // 2. closed by close_range (not traced), the file opened onto the number.
            let second = read_a_pipe();
            libc::syscall(libc::SYS_close_range, second as libc::c_uint, second as libc::c_uint, 0u32);
            let opened = libc::open(io_path.as_ptr(), libc::O_RDONLY);
            if opened != second {
                die(&format!("open gave {opened}, not the closed {second}"));
            }
            read_the_file(opened);
            libc::close(opened);
        },
        "fdexec" => unsafe {
            let mut p = [-1; 2];
            if libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) != 0
                || libc::dup3(p[0], fdexec::FD, libc::O_CLOEXEC) != fdexec::FD
            {
                die("pipe2 or dup3");
            }
            for _ in 0..fdexec::PIPE_READS {
                libc::write(p[1], buf(), 1);
                libc::read(fdexec::FD, buf(), 1);
            }
            let mut argv: Vec<*const libc::c_char> = vec![self_exe.as_ptr()];
            argv.extend(exec_args.iter().map(|a| a.as_ptr()));
            argv.push(std::ptr::null());
            libc::execv(self_exe.as_ptr(), argv.as_ptr());
            die("execv");
        },
        "futex-wait" => unsafe {
            static WORD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let mut tid: libc::pthread_t = 0;
            extern "C" fn waker(arg: *mut libc::c_void) -> *mut libc::c_void {
                let ms = arg as usize as u64;
                let ts =
                    libc::timespec { tv_sec: (ms / 1000) as i64, tv_nsec: ((ms % 1000) * 1_000_000) as i64 };
                // SAFETY: sleeping, then waking the main thread's futex.
                unsafe {
                    libc::nanosleep(&ts, std::ptr::null_mut());
                    WORD.store(1, std::sync::atomic::Ordering::SeqCst);
                    futex(WORD.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1, std::ptr::null());
                }
                std::ptr::null_mut()
            }
            libc::pthread_create(&mut tid, std::ptr::null(), waker, wait_ms as usize as *mut libc::c_void);
            while WORD.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                futex(WORD.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, 0, std::ptr::null());
            }
        },
        "spawn" => unsafe {
            let read_all = move |n: u64| {
                for _ in 0..n {
                    libc::read(zero_fd, buf(), 1024);
                }
            };
            let mut children = Vec::with_capacity(forks as usize);
            for _ in 0..forks {
                let pid = libc::fork();
                if pid < 0 {
                    die(&format!("fork: {}", std::io::Error::last_os_error()));
                }
                if pid == 0 {
                    read_all(reads);
                    libc::_exit(0);
                }
                children.push(pid);
            }
            let handles: Vec<_> = (0..threads).map(|_| std::thread::spawn(move || read_all(reads))).collect();
            for h in handles {
                let _ = h.join();
            }
            for pid in children {
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        },
        "stall" => stall(args.get(1).map(String::as_str).unwrap_or(""), wait_ms),
        "cpu" => cpu(reads),
        "woken" => woken(reads, wait_ms),
        "spin" => spin(wait_ms),
        "blocked" => blocked(slow_file),
        _ => {}
    }
    let _ = (threads, forks, reads);
    // SAFETY: ending without running exit handlers (they could make calls).
    unsafe { libc::_exit(0) }
}
