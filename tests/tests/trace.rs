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

fn normalize(line: &str) -> String {
    let mut s = line.to_string();
    // read(fd, <buffer>, n): strace shows the data, we show the address.
    if let Some(rest) = s.strip_prefix("read(") {
        let (fd, after) = rest.split_once(", ").unwrap();
        let tail = if after.starts_with('"') {
            // Skip the quoted string (with escapes) and a "..." suffix.
            let b = after.as_bytes();
            let mut i = 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            let mut rest = &after[i + 1..];
            rest = rest.strip_prefix("...").unwrap_or(rest);
            rest.to_string()
        } else {
            after.split_once(',').map(|x| format!(",{}", x.1)).unwrap_or_default()
        };
        s = format!("read({fd}, BUF{tail}");
    }
    // Addresses and inode numbers.
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '0' && chars.peek() == Some(&'x') {
            chars.next();
            while chars.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                chars.next();
            }
            out.push_str("0xADDR");
        } else if c == '[' && chars.peek().is_some_and(|c| c.is_ascii_digit()) {
            while chars.peek().is_some_and(|c| c.is_ascii_digit()) {
                chars.next();
            }
            out.push_str("[N");
        } else {
            out.push(c);
        }
    }
    // The result column padding.
    let (call, result) = out.rsplit_once(" = ").unwrap_or((&out, ""));
    format!("{} = {}", call.trim_end(), result)
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
    let dir = std::env::temp_dir().join(unique_name("trc"));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("strace.txt"), dir.join("sonic.txt"));
    let filter = format!("trace={SYSCALLS}");
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
    // spawn: 2 threads and 1 forked child, 5 reads each, after the go read.
    let run = |follow: bool| {
        let w = Workload::start(None, &["spawn", "2", "1", "5"]);
        let pid = w.pid().to_string();
        let mut args = vec!["trace", "-e", "trace=read", "-o", out.to_str().unwrap(), "-p", &pid];
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
    let cmd = ["dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=200000", "status=none"];
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
    // The kernel's exact count of the same command.
    assert!(trace(&["-c", "-e", "trace=read"], &counts, &cmd).success());
    let reads = parse_strace_summary(&std::fs::read_to_string(&counts).unwrap())["read"].0;
    assert_eq!(printed + lost, reads, "printed + lost = calls");
    let _ = std::fs::remove_dir_all(&dir);
}
