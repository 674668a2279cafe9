//! A caller of CUDA's waiting calls for the GPU tests: loads a library
//! (NVIDIA's real libcudart.so.12, or the suite's stand-in libcuda.so.1)
//! with dlopen, as PyTorch does, and calls its functions a known number of
//! times, with null arguments (without a driver the real library returns
//! an error at once, through its real entry points).
//!
//! `sp-cuda [--name NAME] [--ns-copy DIR] LIB SYMBOL:COUNT...`
//!
//! In that order; `sleep:MS` between them sleeps MS milliseconds (a
//! process that synchronizes now and then).
//!
//! Steps, each after a go byte on stdin: print "ready"; (go) load LIB,
//! print "loaded"; (go) make the calls, print "took SYMBOL NS" for each
//! symbol (the time its calls took, by this process's own clock read
//! around each call) and "done"; (go) exit.
//! --ns-copy DIR: first move to a mount namespace of its own, mount a
//! tmpfs at DIR there and copy LIB into it: the file it loads exists only
//! in its namespace (a container's image).
//!
//! A Rust binary, not Python's ctypes: the qemu guests of vmtest have no
//! Python, and the calls are the same entry points either way.

use std::ffi::CString;

fn die(msg: &str) -> ! {
    eprintln!("sp-cuda: {msg}");
    std::process::exit(2)
}

fn go() {
    let mut b = [0u8; 1];
    // SAFETY: reading one byte into a local buffer.
    if unsafe { libc::read(0, b.as_mut_ptr().cast(), 1) } != 1 {
        std::process::exit(0);
    }
}

fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}").and_then(|_| out.flush());
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut ns_copy = None;
    loop {
        match args.first().map(String::as_str) {
            Some("--name") if args.len() > 1 => {
                let name = CString::new(args[1].clone()).unwrap_or_else(|_| die("bad name"));
                // SAFETY: PR_SET_NAME reads a NUL-terminated string.
                unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
                args.drain(..2);
            }
            Some("--ns-copy") if args.len() > 1 => {
                ns_copy = Some(args[1].clone());
                args.drain(..2);
            }
            _ => break,
        }
    }
    let mut lib = args.first().cloned().unwrap_or_else(|| die("no library"));
    if let Some(dir) = ns_copy {
        lib = copy_into_own_namespace(&lib, &dir);
    }
    // (symbol, count); no symbol: sleep count milliseconds.
    let calls: Vec<(Option<CString>, u64)> = args[1..]
        .iter()
        .map(|a| {
            let (sym, n) = a.split_once(':').unwrap_or_else(|| die("a call is SYMBOL:COUNT"));
            let sym = (sym != "sleep").then(|| CString::new(sym).unwrap_or_else(|_| die("bad symbol")));
            (sym, n.parse().unwrap_or_else(|_| die("bad count")))
        })
        .collect();
    say("ready");
    go();
    let path = CString::new(lib.clone()).unwrap_or_else(|_| die("bad path"));
    // SAFETY: loading a library; its constructors need no driver.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        die(&format!("dlopen {lib} failed"));
    }
    type Call = unsafe extern "C" fn(usize, usize, usize, usize) -> i32;
    let fns: Vec<(Option<Call>, u64)> = calls
        .iter()
        .map(|(sym, n)| {
            let Some(sym) = sym else { return (None, *n) };
            // SAFETY: a symbol lookup in the handle just opened.
            let p = unsafe { libc::dlsym(handle, sym.as_ptr()) };
            if p.is_null() {
                die(&format!("{sym:?} not in {lib}"));
            }
            // SAFETY: CUDA's waiting calls take at most four integer or
            // pointer arguments and return an int status.
            (Some(unsafe { std::mem::transmute::<*mut libc::c_void, Call>(p) }), *n)
        })
        .collect();
    say("loaded");
    go();
    let mut took: Vec<(String, std::time::Duration)> = Vec::new();
    for ((f, n), (sym, _)) in fns.iter().zip(&calls) {
        let (Some(f), Some(sym)) = (f, sym) else {
            std::thread::sleep(std::time::Duration::from_millis(*n));
            continue;
        };
        let sym = sym.to_string_lossy().into_owned();
        let mut total = std::time::Duration::ZERO;
        for _ in 0..*n {
            let start = std::time::Instant::now();
            // SAFETY: null arguments: the calls check them, or (the
            // stand-in) ignore them.
            unsafe { f(0, 0, 0, 0) };
            total += start.elapsed();
        }
        match took.iter_mut().find(|t| t.0 == sym) {
            Some(t) => t.1 += total,
            None => took.push((sym, total)),
        }
    }
    for (sym, t) in &took {
        say(&format!("took {sym} {}", t.as_nanos()));
    }
    say("done");
    go();
}

/// A mount namespace of its own with a tmpfs at `dir` holding a copy of
/// `lib`: the copy's path.
fn copy_into_own_namespace(lib: &str, dir: &str) -> String {
    use nix::mount::{mount, MsFlags};
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .unwrap_or_else(|e| die(&format!("unshare: {e}")));
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .unwrap_or_else(|e| die(&format!("making / private: {e}")));
    mount(Some("sp-cuda"), dir, Some("tmpfs"), MsFlags::empty(), None::<&str>)
        .unwrap_or_else(|e| die(&format!("tmpfs at {dir}: {e}")));
    let name = std::path::Path::new(lib).file_name().unwrap_or_else(|| die("no file name"));
    let to = std::path::Path::new(dir).join(name);
    std::fs::copy(lib, &to).unwrap_or_else(|e| die(&format!("copy to {}: {e}", to.display())));
    to.to_string_lossy().into_owned()
}
