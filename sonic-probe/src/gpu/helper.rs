//! The one privileged piece left after attach: a small helper process that
//! opens CUDA library files and creates uprobe perf events for the daemon.
//!
//! Why a process: the kernel's uprobe PMU wants CAP_SYS_ADMIN for every
//! perf event it creates (perf_uprobe_event_init; CAP_PERFMON is not
//! enough), and GPU probes are attached while the daemon runs, whenever a
//! watched process loads a CUDA library. Keeping CAP_SYS_ADMIN in the
//! daemon would undo dropping its capabilities (run::drop_capabilities).
//! So before the daemon starts any thread, it forks this helper, which
//! keeps CAP_SYS_ADMIN, CAP_SYS_PTRACE (a library in another process's
//! root, /proc/PID/root) and CAP_DAC_READ_SEARCH, and does two things on
//! request over a socket pair: open a CUDA library file read-only, and
//! open a uprobe (or uretprobe) perf event at an offset of one. It sends
//! back the file descriptor; the daemon, with no capability, reads the
//! symbols and attaches its BPF program to the perf event
//! (PERF_EVENT_IOC_SET_BPF, which the kernel checks for none). The helper
//! refuses any path that is not a CUDA library's regular file, runs no
//! other code, and dies with the daemon (PR_SET_PDEATHSIG, and the
//! socket's end).

use std::{
    ffi::CString,
    io::{IoSlice, IoSliceMut},
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    os::unix::ffi::OsStrExt,
    path::Path,
    sync::Mutex,
};

use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag,
    SockType,
};
use perf_event_open_sys::bindings as pe;
use sonic_probe_common::gpu_apis::library_of;

/// Why the helper did not give a descriptor.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error("the GPU probe helper is gone ({0})")]
    Gone(String),
    #[error(
        "the GPU probe helper may not open a uprobe: {0} (the kernel's uprobe perf events need \
         CAP_SYS_ADMIN: run sonic-probe with it, or --gpu-waits off)"
    )]
    NotPermitted(std::io::Error),
    #[error("{0}")]
    Refused(std::io::Error),
}

const OP_OPEN_LIBRARY: u8 = 1;
const OP_OPEN_UPROBE: u8 = 2;
/// Request header: op, retprobe, 6 bytes of padding, offset; then the path.
const HEADER: usize = 16;
const MAX_PATH: usize = 4096;

/// The daemon's end of the helper.
pub struct PerfHelper {
    sock: Mutex<OwnedFd>,
    child: libc::pid_t,
}

/// The helper ends when its end of the socket reads end of file: shut it,
/// then reap the helper (no zombie left by a daemon that lives on, as in
/// the tests).
impl Drop for PerfHelper {
    fn drop(&mut self) {
        if let Ok(sock) = self.sock.lock() {
            let _ = nix::sys::socket::shutdown(sock.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        }
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(self.child, std::ptr::null_mut(), 0) };
    }
}

impl PerfHelper {
    /// Forks the helper. Call while the process has one thread (a fork of
    /// a threaded process may copy a lock another thread holds).
    pub fn start() -> std::io::Result<PerfHelper> {
        let (ours, theirs) =
            socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)?;
        let parent = std::process::id();
        // SAFETY: the process is single-threaded (the caller's promise);
        // the child runs serve() and exits, never returning here.
        match unsafe { libc::fork() } {
            -1 => Err(std::io::Error::last_os_error()),
            0 => {
                drop(ours);
                let code = serve(theirs, parent);
                // SAFETY: leaving the child without running the parent's
                // atexit handlers or destructors.
                unsafe { libc::_exit(code) }
            }
            child => {
                drop(theirs);
                Ok(PerfHelper { sock: Mutex::new(ours), child })
            }
        }
    }

    /// A read-only descriptor of the CUDA library file at `path`.
    pub fn open_library(&self, path: &Path) -> Result<std::fs::File, HelperError> {
        self.ask(OP_OPEN_LIBRARY, false, 0, path).map(std::fs::File::from)
    }

    /// A perf event of a uprobe (uretprobe with `ret`) at file offset
    /// `offset` of the library at `path`, in every process, disabled.
    pub fn open_uprobe(&self, path: &Path, offset: u64, ret: bool) -> Result<OwnedFd, HelperError> {
        self.ask(OP_OPEN_UPROBE, ret, offset, path)
    }

    fn ask(&self, op: u8, ret: bool, offset: u64, path: &Path) -> Result<OwnedFd, HelperError> {
        let path = path.as_os_str().as_bytes();
        if path.len() > MAX_PATH {
            return Err(HelperError::Refused(std::io::Error::from_raw_os_error(libc::ENAMETOOLONG)));
        }
        let mut req = vec![0u8; HEADER];
        req[0] = op;
        req[1] = u8::from(ret);
        req[8..16].copy_from_slice(&offset.to_ne_bytes());
        req.extend_from_slice(path);
        let sock = self.sock.lock().expect("helper lock");
        let fd = sock.as_raw_fd();
        sendmsg::<()>(fd, &[IoSlice::new(&req)], &[], MsgFlags::empty(), None)
            .map_err(|e| HelperError::Gone(e.to_string()))?;
        let (errno, got) = receive(fd).map_err(|e| HelperError::Gone(e.to_string()))?;
        match (errno, got) {
            (0, Some(fd)) => Ok(fd),
            (0, None) => Err(HelperError::Gone("an answer without a descriptor".into())),
            (e, _) if op == OP_OPEN_UPROBE && (e == libc::EACCES || e == libc::EPERM) => {
                Err(HelperError::NotPermitted(std::io::Error::from_raw_os_error(e)))
            }
            (e, _) => Err(HelperError::Refused(std::io::Error::from_raw_os_error(e))),
        }
    }
}

/// One answer: an errno (0: success) and the descriptor that came with it.
fn receive(fd: RawFd) -> nix::Result<(i32, Option<OwnedFd>)> {
    let mut buf = [0u8; 4];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(fd, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    if msg.bytes == 0 {
        return Err(nix::errno::Errno::EPIPE);
    }
    let mut got = None;
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for f in fds {
                // SAFETY: a descriptor the kernel just installed for us.
                let owned = unsafe { OwnedFd::from_raw_fd(f) };
                if got.is_none() {
                    got = Some(owned);
                }
            }
        }
    }
    Ok((i32::from_ne_bytes(buf), got))
}

/// The helper's life: keep only what it needs, then answer until the
/// daemon's end closes.
fn serve(sock: OwnedFd, parent: u32) -> i32 {
    // SAFETY: prctl with constant arguments.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        libc::prctl(libc::PR_SET_NAME, c"sp-gpu-helper".as_ptr(), 0, 0, 0);
    }
    if std::os::unix::process::parent_id() != parent {
        return 0; // the daemon died before PDEATHSIG was set
    }
    keep_only_what_it_needs();
    let uprobe = UprobePmu::read();
    let fd = sock.as_raw_fd();
    let mut buf = vec![0u8; HEADER + MAX_PATH];
    loop {
        let n = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            match recvmsg::<()>(fd, &mut iov, None, MsgFlags::empty()) {
                Ok(m) if m.bytes == 0 => return 0,
                Ok(m) => m.bytes,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return 1,
            }
        };
        let answer = answer(&buf[..n], &uprobe);
        let (errno, fd_out) = match &answer {
            Ok(f) => (0i32, Some(f.as_raw_fd())),
            Err(e) => (*e, None),
        };
        let fds: Vec<RawFd> = fd_out.into_iter().collect();
        let cmsgs: Vec<ControlMessage> =
            if fds.is_empty() { Vec::new() } else { vec![ControlMessage::ScmRights(&fds)] };
        let bytes = errno.to_ne_bytes();
        if sendmsg::<()>(fd, &[IoSlice::new(&bytes)], &cmsgs, MsgFlags::empty(), None).is_err() {
            return 1;
        }
        // Ours closes here: the daemon holds its copy.
        drop(answer);
    }
}

/// CAP_SYS_ADMIN (the uprobe PMU), CAP_SYS_PTRACE (/proc/PID/root of
/// another process), CAP_DAC_READ_SEARCH (a library in a directory root
/// may not search); no new privileges.
fn keep_only_what_it_needs() {
    use caps::{CapSet, Capability};
    let permitted = caps::read(None, CapSet::Permitted).unwrap_or_default();
    let keep: caps::CapsHashSet =
        [Capability::CAP_SYS_ADMIN, Capability::CAP_SYS_PTRACE, Capability::CAP_DAC_READ_SEARCH]
            .into_iter()
            .filter(|c| permitted.contains(c))
            .collect();
    let _ = caps::set(None, CapSet::Effective, &keep);
    let _ = caps::set(None, CapSet::Permitted, &keep);
    let _ = caps::clear(None, CapSet::Inheritable);
    // SAFETY: prctl with constant arguments.
    unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    }
}

/// The kernel's uprobe PMU: its perf type and the config bit of retprobes
/// (sysfs; None where the kernel has no uprobe PMU).
struct UprobePmu {
    kind: Option<u32>,
    ret_bit: u32,
}

impl UprobePmu {
    fn read() -> Self {
        let dir = "/sys/bus/event_source/devices/uprobe";
        let kind = std::fs::read_to_string(format!("{dir}/type")).ok().and_then(|s| s.trim().parse().ok());
        // "config:0"
        let ret_bit = std::fs::read_to_string(format!("{dir}/format/retprobe"))
            .ok()
            .and_then(|s| s.trim().strip_prefix("config:")?.parse().ok())
            .unwrap_or(0);
        UprobePmu { kind, ret_bit }
    }
}

/// One request, answered with a descriptor or an errno.
fn answer(req: &[u8], pmu: &UprobePmu) -> Result<OwnedFd, i32> {
    if req.len() <= HEADER {
        return Err(libc::EINVAL);
    }
    let op = req[0];
    let ret = req[1] != 0;
    let offset = u64::from_ne_bytes(req[8..16].try_into().map_err(|_| libc::EINVAL)?);
    let path = &req[HEADER..];
    // Only a CUDA library's file, whatever the daemon asks.
    let shown = std::str::from_utf8(path).map_err(|_| libc::EINVAL)?;
    if library_of(shown).is_none() {
        return Err(libc::EPERM);
    }
    let cpath = CString::new(path).map_err(|_| libc::EINVAL)?;
    let file = {
        // SAFETY: open of a NUL-terminated path.
        let fd = unsafe {
            libc::open(cpath.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK)
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
        }
        // SAFETY: the descriptor just opened.
        unsafe { OwnedFd::from_raw_fd(fd) }
    };
    let meta =
        std::fs::File::from(file.try_clone().map_err(|_| libc::EMFILE)?).metadata().map_err(|_| libc::EIO)?;
    if !meta.is_file() {
        return Err(libc::EINVAL);
    }
    match op {
        OP_OPEN_LIBRARY => Ok(file),
        OP_OPEN_UPROBE => {
            let kind = pmu.kind.ok_or(libc::ENOSYS)?;
            // The file just checked, by its descriptor: the path cannot be
            // swapped for another file between the check and the probe.
            let by_fd =
                CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(|_| libc::EINVAL)?;
            let mut attr = pe::perf_event_attr {
                type_: kind,
                size: std::mem::size_of::<pe::perf_event_attr>() as u32,
                config: if ret { 1 << pmu.ret_bit } else { 0 },
                ..Default::default()
            };
            attr.__bindgen_anon_3.uprobe_path = by_fd.as_ptr() as u64;
            attr.__bindgen_anon_4.probe_offset = offset;
            // SAFETY: perf_event_open with an attr that outlives the call
            // and a NUL-terminated path it points to.
            let fd = unsafe {
                perf_event_open_sys::perf_event_open(&mut attr, -1, 0, -1, pe::PERF_FLAG_FD_CLOEXEC.into())
            };
            if fd < 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
            }
            // SAFETY: the descriptor just opened.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
        _ => Err(libc::EINVAL),
    }
}
