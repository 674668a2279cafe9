//! `sonic-probe trace` against strace on the same commands: the same calls
//! in the same order per thread, the same decoded arguments and results, the
//! same -c counts; exit status passes through; Ctrl-C detaches.
//!
//! What may differ between two runs is normalized on both sides: addresses
//! (ASLR), thread ids, inode numbers in descriptor names, and read's buffer
//! (strace prints the data, sonic-probe its address).

use std::{collections::BTreeMap, path::Path, process::Command};

use sonic_probe_tests::{parse_strace_summary, privileged, sonic_probe_bin, unique_name, Workload};

const SYSCALLS: &str = "futex,openat,read,mmap,munmap,close";

/// Per thread (in order of first appearance), the normalized call lines.
fn calls_per_thread(text: &str) -> Vec<Vec<String>> {
    let mut order: Vec<String> = Vec::new();
    let mut threads: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut pending: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        let (pid, rest) = line.split_once(' ').unwrap_or(("", line));
        let rest = rest.trim_start();
        if rest.starts_with("+++") || rest.starts_with("---") || rest.is_empty() {
            continue;
        }
        // strace splits calls interleaved with other threads in two.
        let full = if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid.to_string(), head.to_string());
            continue;
        } else if rest.starts_with("<... ") {
            let tail = rest.split_once("resumed>").map(|x| x.1).unwrap_or("");
            format!("{}{}", pending.remove(pid).unwrap_or_default(), tail)
        } else {
            rest.to_string()
        };
        if !order.contains(&pid.to_string()) {
            order.push(pid.to_string());
        }
        threads.entry(pid.to_string()).or_default().push(normalize(&full));
    }
    order.into_iter().map(|p| threads.remove(&p).unwrap()).collect()
}

/// Erases what differs between two runs of the same command, and only that:
/// addresses (ASLR: mmap's and munmap's address and mmap's result, futex
/// words, futex_waitv's array), read's, pread64's, write's and pwrite64's buffer (strace
/// shows the data, we show its address), inode numbers in descriptor names, and the padding before
/// the result. Every other number (mmap offsets, futex values and bitsets,
/// sizes, flags, descriptors) must be strace's exactly.
fn normalize(line: &str) -> String {
    let (name, mut args, mut result) =
        split_call(line).unwrap_or_else(|| panic!("not a call line: {line:?}"));
    let erase = |s: &mut String| {
        if s.starts_with("0x") {
            *s = "0xADDR".to_string();
        }
    };
    match name {
        "read" if args.len() == 3 => args[1] = "BUF".to_string(),
        "write" | "pread64" | "pwrite64" if args.len() >= 3 => args[1] = "BUF".to_string(),
        "mmap" => {
            erase(&mut args[0]);
            erase(&mut result);
        }
        "munmap" | "futex_waitv" => erase(&mut args[0]),
        "futex" => {
            erase(&mut args[0]);
            // The second futex word, where the command has one (strace's
            // do_futex): else the fifth argument is a bitset or absent.
            if args.len() > 4 && (args[1].contains("REQUEUE") || args[1].contains("WAKE_OP")) {
                erase(&mut args[4]);
            }
        }
        _ => {}
    }
    let s = format!("{name}({}) = {result}", args.join(", "));
    // Inode numbers: pipe:[1234], socket:[1234].
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '[' && chars.peek().is_some_and(|c| c.is_ascii_digit()) {
            while chars.peek().is_some_and(|c| c.is_ascii_digit()) {
                chars.next();
            }
            out.push('N');
        }
    }
    out
}

/// `name(arg, arg, ...)  = result` split into its parts. Arguments are split
/// at top-level commas: not inside quoted strings (with their escapes) or
/// structures ({...}, [...], (...)).
fn split_call(line: &str) -> Option<(&str, Vec<String>, String)> {
    let (name, rest) = line.split_once('(')?;
    let mut args = Vec::new();
    let mut arg = String::new();
    let (mut depth, mut quoted, mut escaped) = (0usize, false, false);
    let mut end = None;
    for (i, c) in rest.char_indices() {
        if quoted {
            arg.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                quoted = false;
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            '(' | '{' | '[' => depth += 1,
            ')' if depth == 0 => {
                end = Some(i);
                break;
            }
            ')' | '}' | ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                args.push(arg.trim().to_string());
                arg.clear();
                continue;
            }
            _ => {}
        }
        arg.push(c);
    }
    if !arg.trim().is_empty() {
        args.push(arg.trim().to_string());
    }
    let result = rest[end? + 1..].trim_start().strip_prefix('=')?.trim().to_string();
    Some((name, args, result))
}

#[test]
fn normalize_erases_addresses_only() {
    let n = |l: &str| normalize(l);
    let map = "mmap(0x7f3a1c000000, 4096, PROT_READ, MAP_PRIVATE|MAP_FIXED, 3</lib/libc.so.6>, 0x26000) = 0x7f3a1c000000";
    let other_run = "mmap(0x7f99aa000000, 4096, PROT_READ, MAP_PRIVATE|MAP_FIXED, 3</lib/libc.so.6>, 0x26000)   = 0x7f99aa000000";
    assert_eq!(n(map), n(other_run));
    assert_ne!(n(map), n(&map.replace("0x26000", "0x27000")), "a wrong mmap offset");
    let wait = "futex(0x55e0a8, FUTEX_WAIT_BITSET_PRIVATE, 0, NULL, 0x1) = 0";
    assert_eq!(n(wait), n(&wait.replace("0x55e0a8", "0x7ffd10")));
    assert_ne!(n(wait), n(&wait.replace(", 0x1)", ", 0x2)")), "a wrong bitset");
    let requeue = "futex(0x55e0a8, FUTEX_CMP_REQUEUE_PRIVATE, 1, 2147483647, 0x55e0b0, 0) = 0";
    assert_eq!(n(requeue), n(&requeue.replace("0x55e0b0", "0x7ffd20")));
    assert_eq!(
        n(r#"read(3</etc/x>, "a,\"b\"\n"..., 832) = 832"#),
        n("read(3</etc/x>, 0x7ffc5a1b2c30, 832) = 832")
    );
    assert_ne!(n("read(3, 0x7ffc5a1b2c30, 832) = 832"), n("read(3, 0x7ffc5a1b2c30, 833) = 832"));
    assert_eq!(n("close(3<socket:[1234]>) = 0"), n("close(3<socket:[99]>)    = 0"));
    assert_eq!(
        n("futex(0x1, FUTEX_WAIT_PRIVATE, 0, {tv_sec=0, tv_nsec=1000000}) = -1 ETIMEDOUT (Connection timed out)"),
        "futex(0xADDR, FUTEX_WAIT_PRIVATE, 0, {tv_sec=0, tv_nsec=1000000}) = -1 ETIMEDOUT (Connection timed out)"
    );
}

fn strace(args: &[&str], out: &Path, cmd: &[&str]) -> std::process::ExitStatus {
    Command::new("strace").args(args).arg("-o").arg(out).args(cmd).status().expect("strace")
}

fn trace(args: &[&str], out: &Path, cmd: &[&str]) -> std::process::ExitStatus {
    Command::new(sonic_probe_bin())
        .arg("trace")
        .args(args)
        .arg("-o")
        .arg(out)
        .arg("--")
        .args(cmd)
        .status()
        .unwrap()
}

/// The real Python binary (python3 may be a shell shim that forks).
fn python() -> String {
    let o = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

fn compare(name: &str, cmd: &[&str]) {
    compare_calls(name, SYSCALLS, cmd)
}

/// Like [`compare`], for the system calls in `syscalls` (a -e trace= list).
fn compare_calls(name: &str, syscalls: &str, cmd: &[&str]) {
    let dir = std::env::temp_dir().join(unique_name("trc"));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("strace.txt"), dir.join("sonic.txt"));
    let filter = format!("trace={syscalls}");
    let status = strace(&["-f", "-y", "-e", &filter], &a, cmd);
    assert_eq!(trace(&["-f", "-y", "-e", &filter], &b, cmd).code(), status.code(), "{name}: exit status");
    let (sa, sb) = (std::fs::read_to_string(&a).unwrap(), std::fs::read_to_string(&b).unwrap());
    let (ta, tb) = (calls_per_thread(&sa), calls_per_thread(&sb));
    assert_eq!(ta.len(), tb.len(), "{name}: threads\nstrace:\n{sa}\nsonic-probe:\n{sb}");
    for (i, (x, y)) in ta.iter().zip(&tb).enumerate() {
        for (j, (l, r)) in x.iter().zip(y).enumerate() {
            assert_eq!(l, r, "{name}: thread {i}, call {j}\nstrace:\n{sa}\nsonic-probe:\n{sb}");
        }
        assert_eq!(
            x.len(),
            y.len(),
            "{name}: thread {i}: number of calls\nstrace:\n{sa}\nsonic-probe:\n{sb}"
        );
    }
    assert!(ta.iter().map(Vec::len).sum::<usize>() > 10, "{name}: too few calls to compare:\n{sa}");

    // -c: the same counts and errors.
    let (ca, cb) = (dir.join("strace-c.txt"), dir.join("sonic-c.txt"));
    let status = strace(&["-f", "-c", "-e", &filter], &ca, cmd);
    assert_eq!(trace(&["-f", "-c", "-e", &filter], &cb, cmd).code(), status.code(), "{name}: exit status");
    let (sa, sb) = (std::fs::read_to_string(&ca).unwrap(), std::fs::read_to_string(&cb).unwrap());
    let (pa, pb) = (parse_strace_summary(&sa), parse_strace_summary(&sb));
    assert_eq!(pa, pb, "{name}: -c\nstrace:\n{sa}\nsonic-probe:\n{sb}");
    assert!(sb.starts_with("% time     seconds  usecs/call     calls    errors syscall\n"), "{sb}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dd_like_strace() {
    if !privileged("dd_like_strace") {
        return;
    }
    compare("dd", &["dd", "if=/dev/zero", "of=/dev/null", "bs=1024", "count=200", "status=none"]);
}

#[test]
fn cat_like_strace() {
    if !privileged("cat_like_strace") {
        return;
    }
    compare("cat", &["cat", "/etc/hostname", "/etc/os-release", "/nonexistent/file"]);
}

#[test]
fn python_like_strace() {
    if !privileged("python_like_strace") {
        return;
    }
    let py = python();
    let prog = "import json, mmap\n\
                data = open('/etc/os-release').read()\n\
                m = mmap.mmap(-1, 1 << 20); m.close()\n\
                try:\n    open('/nonexistent/model.pth')\nexcept OSError:\n    pass\n\
                print(json.dumps({'n': len(data)}))";
    std::env::set_var("PYTHONHASHSEED", "0");
    compare("python", &[&py, "-S", "-c", prog]);
}

#[test]
fn pread64_and_write_like_strace() {
    if !privileged("pread64_and_write_like_strace") {
        return;
    }
    // The dynamic loader reads ELF headers with pread64; then preads of a
    // file at offsets, one past its end, one of a bad descriptor; writes
    // and pwrite64s to /dev/null, and each to a closed descriptor; a
    // pwrite64 to a pipe (ESPIPE).
    let py = python();
    let prog = "import os\n\
                fd = os.open('/etc/os-release', os.O_RDONLY)\n\
                os.pread(fd, 100, 10); os.pread(fd, 10, 1 << 20)\n\
                os.close(fd)\n\
                w = os.open('/dev/null', os.O_WRONLY)\n\
                os.write(w, b'hello'); os.write(w, b'x' * 5000)\n\
                os.pwrite(w, b'hello', 7); os.pwrite(w, b'x' * 5000, 1 << 20)\n\
                os.close(w)\n\
                r, p = os.pipe()\n\
                for f, a in ((os.pread, (99, 1, 0)), (os.write, (99, b'y')), (os.pwrite, (99, b'y', 0)),\n\
                             (os.pwrite, (p, b'y', 0))):\n    try:\n        f(*a)\n    except OSError:\n        pass";
    compare_calls("python io", "openat,pread64,write,pwrite64,close", &[&py, "-S", "-c", prog]);
}

#[test]
fn exit_status_passes_through() {
    if !privileged("exit_status_passes_through") {
        return;
    }
    let run = |script: &str| {
        Command::new(sonic_probe_bin())
            .args(["trace", "-c", "--", "sh", "-c", script])
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(run("exit 7"), Some(7));
    assert_eq!(run("exit 0"), Some(0));
    assert_eq!(run("kill -TERM $$"), Some(128 + 15));
    let missing = Command::new(sonic_probe_bin()).args(["trace", "--", "/no/such/program"]).output().unwrap();
    assert_ne!(missing.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot run /no/such/program"));
}

#[test]
fn threads_are_traced_with_f_and_only_the_given_thread_without() {
    if !privileged("threads_are_traced_with_f_and_only_the_given_thread_without") {
        return;
    }
    let dir = std::env::temp_dir().join(unique_name("trt"));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("t.txt");
    // spawn: 2 threads and 1 forked child, 5 reads each, after the go read;
    // the main thread itself maps the two threads' stacks.
    let run = |follow: bool| {
        let w = Workload::start(None, &["spawn", "2", "1", "5"]);
        let pid = w.pid().to_string();
        let mut args = vec!["trace", "-e", "trace=read,mmap", "-o", out.to_str().unwrap(), "-p", &pid];
        if follow {
            args.insert(1, "-f");
        }
        let mut t =
            Command::new(sonic_probe_bin()).args(&args).stderr(std::process::Stdio::piped()).spawn().unwrap();
        // Wait for "attached" before letting it go.
        let mut err = std::io::BufReader::new(t.stderr.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut err, &mut line).unwrap();
        assert!(line.contains("attached"), "{line}");
        assert!(w.go().success());
        assert!(t.wait().unwrap().success());
        std::fs::read_to_string(&out).unwrap()
    };
    let with_f = run(true);
    let reads = with_f.lines().filter(|l| l.contains("read(")).count();
    assert_eq!(reads, 15, "2 threads + 1 child, 5 reads each:\n{with_f}");
    let tids: std::collections::HashSet<&str> =
        with_f.lines().filter(|l| l.contains("read(")).map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(tids.len(), 3, "{with_f}");
    let without = run(false);
    assert_eq!(without.lines().filter(|l| l.contains("read(")).count(), 0, "main thread only:\n{without}");
    // The main thread is traced: its own calls are there. After the go read
    // it maps one stack per thread (glibc's pthread_create; `strace -e
    // trace=mmap` without -f shows the same two lines), and it makes no
    // other mmap or read.
    let stacks: Vec<&str> = without.lines().filter(|l| l.starts_with("mmap(")).collect();
    assert_eq!(stacks.len(), 2, "the main thread's calls:\n{without}");
    assert!(stacks.iter().all(|l| l.contains("MAP_STACK")), "{without}");
    assert!(without.contains("+++ exited with 0 +++"), "{without}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_detaches_and_leaves_the_process_running() {
    if !privileged("ctrl_c_detaches_and_leaves_the_process_running") {
        return;
    }
    let w = Workload::start(None, &["idle"]);
    let mut t = Command::new(sonic_probe_bin())
        .args(["trace", "-p", &w.pid().to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(t.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut err, &mut line).unwrap();
    assert!(line.contains("attached"), "{line}");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(t.id() as i32, libc::SIGINT) };
    let status = t.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(rest.contains("detached"), "{rest}");
    assert!(std::path::Path::new(&format!("/proc/{}", w.pid())).exists(), "the traced process lives on");
    assert!(w.go().success());
}

#[test]
fn a_lost_event_is_never_silent() {
    if !privileged("a_lost_event_is_never_silent") {
        return;
    }
    // A 16 KiB ring buffer cannot hold a burst of 200000 reads: some are
    // lost, and every one is accounted for where it happened.
    let dir = std::env::temp_dir().join(unique_name("trl"));
    std::fs::create_dir_all(&dir).unwrap();
    let (out, counts) = (dir.join("t.txt"), dir.join("c.txt"));
    const BLOCKS: u64 = 200_000;
    let count = format!("count={BLOCKS}");
    let cmd = ["dd", "if=/dev/zero", "of=/dev/null", "bs=1", &count, "status=none"];
    let o = Command::new(sonic_probe_bin())
        .args(["trace", "--ringbuf-size", "16KiB", "-e", "trace=read", "-o"])
        .arg(&out)
        .arg("--")
        .args(cmd)
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = std::fs::read_to_string(&out).unwrap();
    let printed = text.lines().filter(|l| l.starts_with("read(")).count() as u64;
    let lost: u64 = text
        .lines()
        .filter_map(|l| l.strip_prefix("+++ lost ")?.strip_suffix(" events +++")?.parse::<u64>().ok())
        .sum();
    assert!(lost > 0, "expected losses with a 16 KiB buffer");
    assert!(text.contains(&format!("+++ lost {lost} events in total +++")), "{}", &text[text.len() - 200..]);
    assert!(String::from_utf8_lossy(&o.stderr).contains(&format!("lost {lost} events")));
    // What dd did, known without sonic-probe: one read per 1-byte block,
    // plus its start-up's reads (the dynamic loader reading ELF headers),
    // which strace counts on the same command copying nothing. (strace on
    // the whole command would do too, but takes minutes under qemu TCG.)
    let startup = dir.join("startup.txt");
    let mut nothing = cmd;
    nothing[4] = "count=0";
    assert!(strace(&["-f", "-c", "-e", "trace=read"], &startup, &nothing).success());
    let startup_reads =
        parse_strace_summary(&std::fs::read_to_string(&startup).unwrap()).get("read").map_or(0, |r| r.0);
    let reads = BLOCKS + startup_reads;
    assert_eq!(
        printed + lost,
        reads,
        "printed {printed} + lost {lost} = dd's {BLOCKS} + {startup_reads} reads"
    );
    // And -c, from the kernel's counts, says the same.
    assert!(trace(&["-c", "-e", "trace=read"], &counts, &cmd).success());
    let c = parse_strace_summary(&std::fs::read_to_string(&counts).unwrap())["read"].0;
    assert_eq!(c, reads, "-c");
    let _ = std::fs::remove_dir_all(&dir);
}
