//! `trace -- COMMAND`: start the command so that none of its system calls
//! is missed.
//!
//! The command is forked before anything else happens (while sonic-probe is
//! still single-threaded) and waits, blocked on a pipe, before it execs.
//! sonic-probe loads and attaches the probes, makes the child a target, and
//! only then lets it exec. A second pipe (close-on-exec) tells whether the
//! exec worked. If sonic-probe fails first, the child reads end-of-file and
//! exits without running anything.

use std::{
    ffi::{CString, OsStr},
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

use anyhow::{anyhow, Context};
use nix::{
    errno::Errno,
    sys::wait::{waitpid, WaitStatus},
    unistd::{fork, ForkResult, Pid},
};

use crate::error::{Error, Result};

/// A forked command waiting for its go.
pub struct WaitingChild {
    pid: u32,
    go: Option<std::os::fd::OwnedFd>,
    exec_error: Option<std::os::fd::OwnedFd>,
    name: String,
    /// Its exit code once reaped: a second waitpid would fail with ECHILD.
    reaped: std::cell::Cell<Option<u8>>,
}

/// The program `name` names: itself if it has a slash, else the first
/// executable of that name in PATH (like execvp).
fn resolve(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return is_executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn cstring(s: &OsStr) -> Result<CString> {
    CString::new(s.as_bytes())
        .map_err(|_| Error::usage(format!("{}: contains a NUL byte", s.to_string_lossy())))
}

impl WaitingChild {
    /// Forks `argv`, stopped before exec. Call before starting any thread.
    pub fn spawn(argv: &[String]) -> Result<Self> {
        let name = &argv[0];
        let program =
            resolve(name).ok_or_else(|| Error::usage(format!("cannot run {name}: not found in PATH")))?;
        let path = cstring(program.as_os_str())?;
        let args: Vec<CString> = argv.iter().map(|a| cstring(OsStr::new(a))).collect::<Result<_>>()?;
        let env: Vec<CString> = std::env::vars_os()
            .map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                CString::new(kv).map_err(|_| Error::usage("the environment contains a NUL byte"))
            })
            .collect::<Result<_>>()?;
        // Built before the fork: the child must not allocate.
        let argv: Vec<*const libc::c_char> =
            args.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        let envp: Vec<*const libc::c_char> =
            env.iter().map(|e| e.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        let (go_r, go_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("pipe")?;
        let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("pipe")?;
        // SAFETY: we are single-threaded here (the caller's contract), and
        // the child only calls async-signal-safe functions before exec.
        match unsafe { fork() }.context("fork")? {
            ForkResult::Child => {
                use std::os::fd::AsRawFd;
                let mut b = [0u8; 1];
                // SAFETY: raw calls on fds we own; argv/env outlive execve.
                unsafe {
                    // Our copies of the parent's ends: with them open, the
                    // go pipe would never report the parent's end closed.
                    libc::close(go_w.as_raw_fd());
                    libc::close(err_r.as_raw_fd());
                    loop {
                        let n = libc::read(go_r.as_raw_fd(), b.as_mut_ptr().cast(), 1);
                        if n == 1 {
                            break;
                        }
                        if n < 0 && Errno::last() == Errno::EINTR {
                            continue;
                        }
                        libc::_exit(127);
                    }
                    libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
                    let e = Errno::last_raw().to_ne_bytes();
                    libc::write(err_w.as_raw_fd(), e.as_ptr().cast(), e.len());
                    libc::_exit(127);
                }
            }
            ForkResult::Parent { child } => Ok(WaitingChild {
                pid: child.as_raw() as u32,
                go: Some(go_w),
                exec_error: Some(err_r),
                name: name.clone(),
                reaped: std::cell::Cell::new(None),
            }),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Lets the child exec; fails if the exec did.
    pub fn release(&mut self) -> Result<()> {
        use std::io::{Read, Write};
        let mut go = std::fs::File::from(self.go.take().expect("released once"));
        go.write_all(b"g").context("cannot start the command")?;
        drop(go);
        let mut err = std::fs::File::from(self.exec_error.take().expect("released once"));
        let mut buf = [0u8; 4];
        match err.read(&mut buf) {
            Ok(4) => {
                let e = Errno::from_raw(i32::from_ne_bytes(buf));
                let _ = waitpid(Pid::from_raw(self.pid as i32), None);
                Err(anyhow!("cannot run {}: {}", self.name, e.desc()).into())
            }
            _ => Ok(()),
        }
    }

    /// Waits for the command and returns its exit code as a shell would:
    /// its status, or 128 + the signal that killed it.
    pub fn wait(&self) -> u8 {
        loop {
            if let Some(code) = self.reap(None) {
                return code;
            }
        }
    }

    /// The command's exit code if it has exited.
    pub fn try_wait(&self) -> Option<u8> {
        self.reap(Some(nix::sys::wait::WaitPidFlag::WNOHANG))
    }

    /// One waitpid; the code is kept, so that whichever of wait and
    /// try_wait reaps the command, both report its status afterwards.
    fn reap(&self, flags: Option<nix::sys::wait::WaitPidFlag>) -> Option<u8> {
        if let Some(code) = self.reaped.get() {
            return Some(code);
        }
        let code = match waitpid(Pid::from_raw(self.pid as i32), flags) {
            Ok(WaitStatus::Exited(_, code)) => code as u8,
            Ok(WaitStatus::Signaled(_, sig, _)) => 128u8.wrapping_add(sig as u8),
            Ok(_) | Err(Errno::EINTR) => return None,
            // Not our child any more: nothing can tell its status now.
            Err(_) => 1,
        };
        self.reaped.set(Some(code));
        Some(code)
    }
}

impl Drop for WaitingChild {
    fn drop(&mut self) {
        if self.go.is_some() {
            // Never released: closing the pipe makes it exit without running.
            self.go = None;
            let _ = waitpid(Pid::from_raw(self.pid as i32), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(argv: &[&str]) -> WaitingChild {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let mut c = WaitingChild::spawn(&argv).unwrap();
        c.release().unwrap();
        c
    }

    /// Wait until the command is a zombie, without reaping it.
    fn until_exited(c: &WaitingChild) {
        let stat = format!("/proc/{}/stat", c.pid());
        for _ in 0..1000 {
            let s = std::fs::read_to_string(&stat).unwrap_or_default();
            if s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("{} did not exit", c.pid());
    }

    #[test]
    fn exit_status_survives_being_reaped_by_try_wait() {
        // The trace loop's check may reap the command before the final wait.
        let c = run(&["sh", "-c", "exit 3"]);
        until_exited(&c);
        assert_eq!(c.try_wait(), Some(3));
        assert_eq!(c.wait(), 3);
        assert_eq!(c.try_wait(), Some(3));
    }

    #[test]
    fn killed_by_a_signal_is_128_plus_it() {
        let c = run(&["sh", "-c", "kill -TERM $$"]);
        assert_eq!(c.wait(), 128 + libc::SIGTERM as u8);
        assert_eq!(c.try_wait(), Some(128 + libc::SIGTERM as u8));
    }

    #[test]
    fn a_command_not_found_is_a_usage_error() {
        let argv = vec!["/nonexistent/command".to_string()];
        assert!(WaitingChild::spawn(&argv).is_err());
    }
}
