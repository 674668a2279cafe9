//! One traced call -> one line in strace's format:
//!
//! ```text
//! 1234  12:00:01.123456 openat(AT_FDCWD, "/etc/hostname", O_RDONLY|O_CLOEXEC) = 3 <0.000021>
//! ```
//!
//! with strace's rules for the pid prefix (-f), the time of the call's entry
//! (-t/-tt/-ttt), descriptor paths (-y), the result column (padded to
//! column 40) and durations (-T). How each argument and result is printed
//! comes from the call's row of the syscall table (`Arg`, `Ret`); futex's
//! arguments depend on its command, as in strace. Buffers (read's and
//! write's data, futex_waitv's array, an ioctl's argument) are not
//! captured: their address is printed.

use std::collections::HashSet;

use sonic_probe_common::{
    syscalls::{Arg, Args, Ret},
    AUX_TIMESPEC, EMIT_PATH_TRUNCATED, EMIT_PATH_UNREADABLE,
};

use super::{
    fds::{FdNames, FileId},
    syscall_args,
};
use crate::{
    events::{Call, ProcessChange},
    findings::Clock,
    os::futex,
};

/// strace aligns " = result" at this column.
const RESULT_COLUMN: usize = 40;

#[derive(Debug, Clone, Copy, Default)]
pub struct Style {
    /// -f: prefix lines with the thread id.
    pub follow: bool,
    /// -o FILE: strace's prefix is `PID  ` in a file, `[pid  PID] ` on a terminal.
    pub to_file: bool,
    /// -t (1), -tt (2), -ttt (3).
    pub time: u8,
    /// -T.
    pub durations: bool,
    /// -y.
    pub paths: bool,
}

pub struct Formatter {
    style: Style,
    clock: Clock,
    tids: HashSet<u32>,
}

impl Formatter {
    pub fn new(style: Style) -> Self {
        Formatter { style, clock: Clock::new(), tids: HashSet::new() }
    }

    fn prefix(&mut self, tid: u32, time_ns: u64) -> String {
        let mut p = String::new();
        if self.style.follow {
            if self.tids.len() < 100_000 {
                self.tids.insert(tid);
            }
            if self.style.to_file {
                p.push_str(&format!("{tid:<5} "));
            } else if self.tids.len() > 1 {
                p.push_str(&format!("[pid {tid:>5}] "));
            }
        }
        if self.style.time > 0 {
            p.push_str(&self.timestamp(time_ns));
            p.push(' ');
        }
        p
    }

    fn timestamp(&self, mono_ns: u64) -> String {
        let wall = self.clock.wall(mono_ns).duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let secs = wall.as_secs() as libc::time_t;
        let micros = wall.subsec_micros();
        if self.style.time >= 3 {
            return format!("{secs}.{micros:06}");
        }
        // SAFETY: localtime_r writes into the tm we own.
        let tm = unsafe {
            let mut tm: libc::tm = std::mem::zeroed();
            libc::localtime_r(&secs, &mut tm);
            tm
        };
        let hms = format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
        if self.style.time == 2 {
            format!("{hms}.{micros:06}")
        } else {
            hms
        }
    }

    fn fd(&self, tgid: u32, value: u64, names: &FdNames, id: Option<FileId>) -> String {
        let fd = value as i32;
        match self.style.paths.then(|| names.path(tgid, fd, id)).flatten() {
            Some(p) => format!("{fd}<{p}>"),
            None => fd.to_string(),
        }
    }

    fn dirfd(&self, tgid: u32, value: u64, names: &FdNames) -> String {
        if value as i32 == -100 {
            return match self.style.paths.then(|| names.cwd(tgid)).flatten() {
                Some(cwd) => format!("AT_FDCWD<{cwd}>"),
                None => "AT_FDCWD".into(),
            };
        }
        self.fd(tgid, value, names, None)
    }

    /// The arguments, inside the parentheses, as the call's row of the
    /// syscall table says each is printed.
    fn args(&self, c: &Call, names: &FdNames) -> String {
        let list = match c.syscall().args {
            Args::Futex => return self.futex_args(c),
            Args::List(list) => list,
        };
        let a = c.raw.args;
        let mut out: Vec<String> = Vec::with_capacity(list.len());
        for (i, kind) in list.iter().enumerate() {
            let v = a[i];
            out.push(match kind {
                Arg::Fd => self.fd(c.tgid(), v, names, FileId::of(c)),
                Arg::DirFd => self.dirfd(c.tgid(), v, names),
                Arg::Path => self.path(c, v),
                Arg::Addr => syscall_args::addr(v),
                Arg::Unsigned => v.to_string(),
                Arg::Signed => (v as i64).to_string(),
                Arg::U32 => (v as u32).to_string(),
                Arg::Hex => syscall_args::hex(v),
                Arg::OpenFlags => syscall_args::open_flags(v),
                Arg::OpenMode if i > 0 && syscall_args::open_has_mode(a[i - 1]) => syscall_args::mode(v),
                Arg::OpenMode => continue,
                Arg::MmapProt => syscall_args::mmap_prot(v),
                Arg::MmapFlags => syscall_args::mmap_flags(v),
                Arg::HexOffset => syscall_args::hex(v),
                Arg::Clock => syscall_args::clock(v),
                Arg::IoctlRequest => syscall_args::ioctl_request(v as u32),
                Arg::SockAddr => c.address().map_or_else(|| syscall_args::addr(v), |a| a.strace()),
            });
        }
        out.join(", ")
    }

    /// A path read at entry, as strace quotes it (`...` when cut; the
    /// address when it could not be read).
    fn path(&self, c: &Call, addr: u64) -> String {
        match (&c.path, c.raw.reasons) {
            (_, r) if r & EMIT_PATH_UNREADABLE != 0 => syscall_args::addr(addr),
            (Some(p), r) if r & EMIT_PATH_TRUNCATED != 0 => format!("{}...", syscall_args::quote(p)),
            (Some(p), _) => syscall_args::quote(p),
            (None, _) => syscall_args::addr(addr),
        }
    }

    /// strace's do_futex (futex.c): the arguments depend on the command.
    fn futex_args(&self, c: &Call) -> String {
        let a = c.raw.args;
        let (val, val2, val3) = (a[2] as u32, a[3] as u32, a[5] as u32);
        let timeout = || {
            if a[3] == 0 {
                "NULL".to_string()
            } else if c.raw.aux_kind == AUX_TIMESPEC {
                syscall_args::timespec(c.raw.aux)
            } else {
                syscall_args::addr(a[3])
            }
        };
        let head = format!("{}, {}", syscall_args::addr(a[0]), futex::op_name(a[1]));
        let rest = match a[1] & futex::CMD_MASK {
            0 => format!("{val}, {}", timeout()),
            6 | 13 => timeout(),
            9 => format!("{val}, {}, {}", timeout(), syscall_args::futex_bitset(val3)),
            10 => format!("{val}, {}", syscall_args::futex_bitset(val3)),
            3 => format!("{val}, {val2}, {}", syscall_args::addr(a[4])),
            4 | 12 => format!("{val}, {val2}, {}, {val3}", syscall_args::addr(a[4])),
            5 => {
                format!("{val}, {val2}, {}, {}", syscall_args::addr(a[4]), syscall_args::futex_wake_op(val3))
            }
            11 => format!("{val}, {}, {}", timeout(), syscall_args::addr(a[4])),
            1 | 2 => val.to_string(),
            7 | 8 => return head,
            _ => format!("{val}, {}, {}, {val3:#x}", syscall_args::addr(a[3]), syscall_args::addr(a[4])),
        };
        format!("{head}, {rest}")
    }

    fn result(&self, c: &Call, names: &FdNames) -> String {
        if let Some(e) = c.errno() {
            return syscall_args::error(e);
        }
        let ret = c.raw.ret;
        match c.syscall().ret {
            Ret::Addr => format!("{:#x}", ret as u64),
            Ret::Fd => self.fd(c.tgid(), ret as u64, names, FileId::of(c)),
            Ret::Int => ret.to_string(),
        }
    }

    /// The line of a call (with its newline).
    pub fn call(&mut self, c: &Call, names: &FdNames) -> String {
        let mut line = self.prefix(c.tid(), c.raw.header.time_ns);
        line.push_str(c.syscall().name);
        line.push('(');
        line.push_str(&self.args(c, names));
        line.push_str(") ");
        let width = line.chars().count();
        if width < RESULT_COLUMN {
            line.extend(std::iter::repeat_n(' ', RESULT_COLUMN - width));
        }
        line.push_str("= ");
        line.push_str(&self.result(c, names));
        if self.style.durations {
            let d = c.raw.duration_ns;
            line.push_str(&format!(" <{}.{:06}>", d / 1_000_000_000, (d % 1_000_000_000) / 1000));
        }
        line.push('\n');
        line
    }

    /// `+++ exited with 0 +++`, `+++ killed by SIGKILL +++`.
    pub fn exit(&mut self, p: &ProcessChange) -> String {
        let status = p.raw.exit_code;
        let what = if status & 0x7f == 0 {
            format!("exited with {}", (status >> 8) & 0xff)
        } else {
            let sig = status & 0x7f;
            let name = nix::sys::signal::Signal::try_from(sig)
                .map(|s| s.as_str().to_string())
                .unwrap_or(sig.to_string());
            let core = if status & 0x80 != 0 { " (core dumped)" } else { "" };
            format!("killed by {name}{core}")
        };
        format!("{}+++ {what} +++\n", self.prefix(p.tgid(), p.raw.header.time_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::call;
    use sonic_probe_common::{syscalls, EMIT_PATH, EVENT_PROCESS_EXIT, EVENT_SYSCALL_PATH};

    fn openat(path: &str, flags: u64, mode: u64, ret: i64) -> Call {
        let mut c =
            call(syscalls::OPENAT, 1234, 1234, 0, 21_000, ret, [(-100i64) as u64, 0x5000, flags, mode, 0, 0]);
        c.raw.header.kind = EVENT_SYSCALL_PATH;
        c.raw.reasons = EMIT_PATH;
        c.path = Some(path.as_bytes().to_vec());
        c
    }

    fn line(style: Style, c: &Call) -> String {
        Formatter::new(style).call(c, &FdNames::default())
    }

    #[test]
    fn the_issues_example() {
        let s = Style { follow: true, to_file: true, durations: true, ..Style::default() };
        assert_eq!(
            line(s, &openat("/etc/hostname", 0o2000000, 0, 3)),
            "1234  openat(AT_FDCWD, \"/etc/hostname\", O_RDONLY|O_CLOEXEC) = 3 <0.000021>\n"
        );
    }

    #[test]
    fn errors_modes_and_the_result_column() {
        let s = Style::default();
        assert_eq!(
            line(s, &openat("/missing", 0o2000000, 0, -2)),
            "openat(AT_FDCWD, \"/missing\", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)\n"
        );
        assert_eq!(
            line(s, &openat("/tmp/x", 0o1101, 0o644, 3)),
            "openat(AT_FDCWD, \"/tmp/x\", O_WRONLY|O_CREAT|O_TRUNC, 0644) = 3\n"
        );
        let munmap = call(syscalls::MUNMAP, 1, 1, 0, 0, 0, [0x7fe82fc57000, 36719, 0, 0, 0, 0]);
        assert_eq!(line(s, &munmap), format!("{:<40}= 0\n", "munmap(0x7fe82fc57000, 36719) "));
        let close = call(syscalls::CLOSE, 1, 1, 0, 0, -9, [99, 0, 0, 0, 0, 0]);
        assert_eq!(line(s, &close), format!("{:<40}= -1 EBADF (Bad file descriptor)\n", "close(99) "));
        // strace's own line, pid prefix included: 5 spaces before "=".
        let mut f = Formatter::new(Style { follow: true, to_file: true, ..Style::default() });
        let m = call(syscalls::MUNMAP, 29377, 29377, 0, 0, 0, [0x7fe82fc57000, 36719, 0, 0, 0, 0]);
        assert_eq!(f.call(&m, &FdNames::default()), "29377 munmap(0x7fe82fc57000, 36719)     = 0\n");
    }

    #[test]
    fn read_and_mmap() {
        let s = Style::default();
        let read = call(syscalls::READ, 1, 1, 0, 0, 1024, [0, 0x7ffc5a1b2c30, 1024, 0, 0, 0]);
        assert_eq!(line(s, &read), format!("{:<40}= 1024\n", "read(0, 0x7ffc5a1b2c30, 1024) "));
        let mmap = call(syscalls::MMAP, 1, 1, 0, 0, 0x7fe82fc5e000, [0, 8192, 3, 0x22, u64::MAX, 0]);
        assert_eq!(
            line(s, &mmap),
            "mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7fe82fc5e000\n"
        );
        let mmap = call(syscalls::MMAP, 1, 1, 0, 0, 0x10000000, [0x10000000, 4096, 5, 0x8011, 3, 0x1000]);
        assert_eq!(
            line(s, &mmap),
            "mmap(0x10000000, 4096, PROT_READ|PROT_EXEC, MAP_SHARED|MAP_FIXED|MAP_POPULATE, 3, 0x1000) = 0x10000000\n"
        );
    }

    #[test]
    fn pread64_write_and_ioctl() {
        let s = Style::default();
        let pread = call(syscalls::PREAD64, 1, 1, 0, 0, 784, [3, 0x7ffc5a1b2c30, 784, 64, 0, 0]);
        assert_eq!(line(s, &pread), format!("{:<40}= 784\n", "pread64(3, 0x7ffc5a1b2c30, 784, 64) "));
        let write = call(syscalls::WRITE, 1, 1, 0, 0, -32, [1, 0x5000, 6, 0, 0, 0]);
        assert_eq!(line(s, &write), format!("{:<40}= -1 EPIPE (Broken pipe)\n", "write(1, 0x5000, 6) "));
        let ioctl = call(syscalls::IOCTL, 1, 1, 0, 0, 0, [4, 0xc020462a, 0x7ffd0000, 0, 0, 0]);
        assert_eq!(
            line(s, &ioctl),
            "ioctl(4, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20), 0x7ffd0000) = 0\n"
        );
    }

    #[test]
    fn futex_like_strace() {
        let s = Style::default();
        let f = |op: u64, args: [u64; 6], ret: i64| {
            let mut a = args;
            a[1] = op;
            line(s, &call(syscalls::FUTEX, 1, 1, 0, 0, ret, a))
        };
        let mut wait = call(syscalls::FUTEX, 1, 1, 0, 0, -110, [0x7fff4e27aa1c, 128, 0, 0x7fff0000, 0, 0]);
        wait.raw.aux_kind = AUX_TIMESPEC;
        wait.raw.aux = [0, 1_000_000];
        assert_eq!(
            line(s, &wait),
            "futex(0x7fff4e27aa1c, FUTEX_WAIT_PRIVATE, 0, {tv_sec=0, tv_nsec=1000000}) = -1 ETIMEDOUT (Connection timed out)\n"
        );
        assert_eq!(
            f(9 | 128 | 256, [0x7fff4e27aa1c, 0, 1, 0, 0, u64::from(u32::MAX)], -11),
            "futex(0x7fff4e27aa1c, FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME, 1, NULL, FUTEX_BITSET_MATCH_ANY) = -1 EAGAIN (Resource temporarily unavailable)\n"
        );
        assert_eq!(
            f(129, [0x7fff4e27aa1c, 0, 1, 0, 0, 0], 0),
            "futex(0x7fff4e27aa1c, FUTEX_WAKE_PRIVATE, 1) = 0\n"
        );
        assert_eq!(
            f(5 | 128, [0x7fff4e27aa1c, 0, 1, 1, 0x7fff4e27aa1c, 0x0400_0001], 0),
            "futex(0x7fff4e27aa1c, FUTEX_WAKE_OP_PRIVATE, 1, 1, 0x7fff4e27aa1c, FUTEX_OP_SET<<28|0<<12|FUTEX_OP_CMP_GT<<24|0x1) = 0\n"
        );
        assert_eq!(
            f(10, [0x7fff4e27aa1c, 0, 1, 0, 0, 5], 0),
            "futex(0x7fff4e27aa1c, FUTEX_WAKE_BITSET, 1, 0x5) = 0\n"
        );
        assert_eq!(
            f(4 | 128, [0x7fff4e27aa1c, 0, 1, 2, 0x7fff4e27aa1c, 0], 0),
            "futex(0x7fff4e27aa1c, FUTEX_CMP_REQUEUE_PRIVATE, 1, 2, 0x7fff4e27aa1c, 0) = 0\n"
        );
        assert_eq!(
            f(7 | 128, [0x7fff4e27aa1c, 0, 0, 0, 0, 0], -1),
            "futex(0x7fff4e27aa1c, FUTEX_UNLOCK_PI_PRIVATE) = -1 EPERM (Operation not permitted)\n"
        );
    }

    #[test]
    fn prefixes_and_exits() {
        let mut f = Formatter::new(Style { follow: true, ..Style::default() });
        let a = call(syscalls::CLOSE, 10, 10, 0, 0, 0, [3, 0, 0, 0, 0, 0]);
        let b = call(syscalls::CLOSE, 10, 11, 0, 0, 0, [4, 0, 0, 0, 0, 0]);
        let names = FdNames::default();
        assert!(f.call(&a, &names).starts_with("close(3)"), "one thread: no prefix on a terminal");
        assert!(f.call(&b, &names).starts_with("[pid    11] close(4)"));
        let mut raw: sonic_probe_common::ProcessEvent = sonic_probe_common::SharedStruct::zeroed();
        raw.header.kind = EVENT_PROCESS_EXIT;
        raw.header.tgid = 10;
        raw.exit_code = 3 << 8;
        let p = ProcessChange { kind: crate::events::ProcessKind::Exit, raw };
        assert_eq!(f.exit(&p), "[pid    10] +++ exited with 3 +++\n");
        let mut killed = p.clone();
        killed.raw.exit_code = 9;
        assert_eq!(f.exit(&killed), "[pid    10] +++ killed by SIGKILL +++\n");
    }
}
