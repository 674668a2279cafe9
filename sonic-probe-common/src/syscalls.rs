//! The traced system calls: one table that both sides are generated from.
//!
//! Each row says everything that differs from one call to the next: its
//! number, which argument is a path, a size or a descriptor, what its bytes
//! are, which sub-kind (variant) its statistics are keyed by, how `sonic-probe
//! trace` prints each argument and the result, which metric families it
//! feeds, and whether `run` traces it by default. The BPF programs read the
//! row through functions generated into their header ([`write_c_table`]);
//! the daemon's metrics, events and strace-like lines read it directly.
//! Adding a system call is appending a row (its `index` is new and never
//! reused) and a test; only an argument kind no row had before needs code
//! (a new [`Arg`] and its formatting in the daemon).

use std::fmt::Write;

/// Where a system call's "bytes moved" figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bytes {
    /// Not counted.
    None,
    /// The return value, when non-negative (read, pread64, write).
    Return,
    /// The `size_arg` argument, when the call succeeded (mmap, munmap).
    SizeArg,
}

/// The sub-kind a call's statistics are kept under (`stats_key.variant`),
/// and the label that names it in the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// None: the key's variant is 0.
    None,
    /// The futex command (op & FUTEX_CMD_MASK), label `op`: the wait
    /// commands by name; wakes and the other commands have no label value
    /// (families labelled by variant leave them out).
    FutexCommand,
    /// Always the same label value (futex_waitv: `op="waitv"`).
    Fixed { label: &'static str, value: &'static str },
    /// The FILE_CLASS_* of the descriptor (`fd_arg`) or of the file opened
    /// (openat), label `file_class`.
    FileClass,
    /// The class of the device behind the descriptor, label `device_class`:
    /// `gpu` (FILE_CLASS_GPU) or `other`.
    DeviceClass,
}

impl Variant {
    /// The label this variant is exported under, if any.
    pub fn label(&self) -> Option<&'static str> {
        match self {
            Variant::None => None,
            Variant::FutexCommand => Some("op"),
            Variant::Fixed { label, .. } => Some(label),
            Variant::FileClass => Some("file_class"),
            Variant::DeviceClass => Some("device_class"),
        }
    }
}

/// What the BPF programs do with a call's descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdUse {
    /// No descriptor.
    None,
    /// The descriptor in `fd_arg` is looked up (entered on first sight) in
    /// open_files: the event names its file, the variant is its class.
    Classify,
    /// Like Classify, and the call is a read of it: open_files counts its
    /// reads, bytes and small reads (the small_reads finding, the bytes
    /// read through an open).
    Read,
    /// The call returns a new descriptor, entered with the class of the
    /// path opened (openat).
    Opens,
    /// The call closes `fd_arg`: its entry goes, with a close event for a
    /// file that was read.
    Closes,
    /// The descriptor in `fd_arg` names a file only for the event (mmap of
    /// a file, looked up only when the call is sent and the descriptor is
    /// not negative).
    Names,
}

/// How `sonic-probe trace` prints one argument (strace's way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    /// A descriptor; with -y its path (`3</etc/hostname>`).
    Fd,
    /// A directory descriptor: `AT_FDCWD` for -100.
    DirFd,
    /// A path read at entry, quoted.
    Path,
    /// A user-space buffer or address: `NULL` or hex (contents are not captured).
    Addr,
    /// An unsigned number in decimal (sizes, counts).
    Unsigned,
    /// A signed 64-bit number in decimal (offsets).
    Signed,
    /// The low 32 bits in decimal (an `unsigned int`).
    U32,
    /// Hexadecimal, `0` for zero (an ioctl's argument).
    Hex,
    /// openat's flags: `O_RDONLY|O_CLOEXEC`.
    OpenFlags,
    /// openat's mode, printed only when the previous argument (the flags)
    /// has O_CREAT or O_TMPFILE.
    OpenMode,
    /// mmap's protection.
    MmapProt,
    /// mmap's flags.
    MmapFlags,
    /// An offset printed in hex, `0` for zero (mmap).
    HexOffset,
    /// A clock id (`CLOCK_MONOTONIC`).
    Clock,
    /// An ioctl request: `TCGETS`, `_IOC(_IOC_READ, 0x64, 0, 0x24)`.
    IoctlRequest,
    /// A socket address (the row's `addr_arg`), read at exit for a call
    /// that is sent: `{sa_family=AF_INET, sin_port=htons(9000), ...}`.
    SockAddr,
}

/// How `sonic-probe trace` prints the arguments of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Args {
    /// One [`Arg`] per argument, in order.
    List(&'static [Arg]),
    /// futex: which arguments there are depends on the command (strace's do_futex).
    Futex,
}

/// How `sonic-probe trace` prints the result of a successful call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ret {
    /// Decimal.
    Int,
    /// A new descriptor; with -y its path.
    Fd,
    /// An address in hex (mmap).
    Addr,
}

/// The metric families a call feeds besides the duration and error
/// families every call has. Each is labelled by `comm`, and by the row's
/// variant label where the doc says so; several rows may feed one family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Families {
    /// Counter of `bytes` (by comm).
    pub bytes: Option<Family>,
    /// Histogram of the size argument (by comm and the variant label).
    pub size: Option<Family>,
    /// Counter of calls whose size argument is below the small-read
    /// threshold (by comm and the variant label).
    pub small: Option<Family>,
    /// Counter of calls to a regular file that moved fewer bytes than
    /// their size argument asked, without an error (by comm and the
    /// variant label): short writes, rows with count_short.
    pub short: Option<Family>,
    /// Counter of successful calls (by comm and the variant label).
    pub succeeded: Option<Family>,
    /// Histogram of durations (by comm and the variant label; calls whose
    /// variant has no label value are left out).
    pub duration: Option<Family>,
}

/// A Prometheus metric family named in the table: its name and help text
/// (the contract in docs/metrics.md documents each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
}

/// One traced system call.
#[derive(Clone, Copy, Debug)]
pub struct Syscall {
    /// Stable index: map keys, event fields and bitmasks use it. Never reused.
    pub index: u16,
    /// Name as strace prints it and as the `syscall` metric label.
    pub name: &'static str,
    /// System call number on x86_64.
    pub nr_x86_64: u32,
    /// Argument holding a user-space path read at entry (openat: 1).
    pub path_arg: Option<u8>,
    /// Argument holding a user-space socket address, its length the next
    /// argument (connect: 1, 2). Read for a call that is sent (failed,
    /// slow, traced): the caller's buffer is unchanged by the call, so the
    /// exit reads what the entry would have.
    pub addr_arg: Option<u8>,
    /// An errno that means the call is under way, not failed (connect's
    /// EINPROGRESS on a non-blocking socket): such a call counts as a
    /// success, and its outcome comes later (by getsockopt SO_ERROR).
    pub in_progress_errno: Option<u16>,
    /// Argument holding a descriptor (read: 0, mmap: 4); `fd_use` says what
    /// is done with it.
    pub fd_arg: Option<u8>,
    pub fd_use: FdUse,
    /// Argument holding a size (read: the count asked for; mmap/munmap: the
    /// length): it goes into the size histogram of syscall_stats.
    pub size_arg: Option<u8>,
    /// Calls whose size argument is below probe_config.small_size are
    /// counted in syscall_stats.small (small reads).
    pub count_small: bool,
    /// Calls to a regular file that returned fewer bytes than the size
    /// argument asked, without an error, are counted in
    /// syscall_stats.short_calls, and sent (EMIT_SHORT) when the row's
    /// failures are: a write's short count is the disk filling up. Only
    /// where the call is traced (its entry saved the size).
    pub count_short: bool,
    /// Calls whose size argument reaches probe_config.large_size are sent as
    /// events (large mappings).
    pub large_events: bool,
    /// What `bytes` counts for this call.
    pub bytes: Bytes,
    /// What its statistics are keyed by besides the process name.
    pub variant: Variant,
    /// Failed calls are sent as events (the syscall_errors finding); futex
    /// failures (EAGAIN, ETIMEDOUT) and ioctl's (ENOTTY: isatty) are control
    /// flow: only counted.
    pub error_events: bool,
    /// Traced by `sonic-probe run` unless --syscalls says otherwise.
    pub default_on: bool,
    /// Its failures are counted and sent even when it is not traced
    /// (probe_config.error_only_mask): a write failing on a full disk is
    /// seen in the default configuration, whose successful writes pay
    /// nothing more.
    pub errors_always: bool,
    /// How trace prints its arguments and result.
    pub args: Args,
    pub ret: Ret,
    /// Metric families beyond duration and errors.
    pub families: Families,
}

pub const FUTEX: u16 = 0;
pub const OPENAT: u16 = 1;
pub const READ: u16 = 2;
pub const MMAP: u16 = 3;
pub const MUNMAP: u16 = 4;
pub const CLOSE: u16 = 5;
pub const FUTEX_WAITV: u16 = 6;
pub const PREAD64: u16 = 7;
pub const WRITE: u16 = 8;
pub const IOCTL: u16 = 9;
pub const PWRITE64: u16 = 10;
pub const CONNECT: u16 = 11;
pub const WRITEV: u16 = 12;

const NONE: Syscall = Syscall {
    index: 0,
    name: "",
    nr_x86_64: 0,
    path_arg: None,
    addr_arg: None,
    in_progress_errno: None,
    fd_arg: None,
    fd_use: FdUse::None,
    size_arg: None,
    count_small: false,
    count_short: false,
    large_events: false,
    bytes: Bytes::None,
    variant: Variant::None,
    error_events: true,
    default_on: true,
    errors_always: false,
    args: Args::List(&[]),
    ret: Ret::Int,
    families: Families { bytes: None, size: None, small: None, short: None, succeeded: None, duration: None },
};

const NO_FAMILIES: Families = NONE.families;

const FUTEX_WAITS: Family = Family {
    name: "sonic_probe_futex_wait_duration_seconds",
    help:
        "Duration of futex waits by operation (wait, wait_bitset, lock_pi, lock_pi2, wait_requeue_pi, waitv).",
};

use Arg::*;

/// Every traced system call, in index order.
#[rustfmt::skip]
pub const SYSCALLS: [Syscall; 13] = [
    Syscall {
        index: FUTEX, name: "futex", nr_x86_64: 202,
        variant: Variant::FutexCommand,
        error_events: false,
        args: Args::Futex,
        families: Families { duration: Some(FUTEX_WAITS), ..NO_FAMILIES },
        ..NONE
    },
    Syscall {
        index: OPENAT, name: "openat", nr_x86_64: 257,
        path_arg: Some(1),
        fd_use: FdUse::Opens,
        variant: Variant::FileClass,
        args: Args::List(&[DirFd, Path, OpenFlags, OpenMode]),
        ret: Ret::Fd,
        families: Families {
            succeeded: Some(Family {
                name: "sonic_probe_file_opens_total",
                help: "Successful openat calls by the class of the file opened.",
            }),
            ..NO_FAMILIES
        },
        ..NONE
    },
    Syscall {
        index: READ, name: "read", nr_x86_64: 0,
        fd_arg: Some(0), fd_use: FdUse::Read,
        size_arg: Some(2), count_small: true,
        bytes: Bytes::Return,
        variant: Variant::FileClass,
        args: Args::List(&[Fd, Addr, Unsigned]),
        families: Families {
            bytes: Some(Family {
                name: "sonic_probe_read_bytes_total",
                help: "Bytes returned by successful read calls.",
            }),
            size: Some(Family {
                name: "sonic_probe_read_size_bytes",
                help: "Bytes asked for by read calls, by the class of what was read.",
            }),
            small: Some(Family {
                name: "sonic_probe_small_reads_total",
                help: "Read calls asking for fewer bytes than --small-read-threshold.",
            }),
            ..NO_FAMILIES
        },
        ..NONE
    },
    Syscall {
        index: MMAP, name: "mmap", nr_x86_64: 9,
        fd_arg: Some(4), fd_use: FdUse::Names,
        size_arg: Some(1), large_events: true,
        bytes: Bytes::SizeArg,
        args: Args::List(&[Addr, Unsigned, MmapProt, MmapFlags, Fd, HexOffset]),
        ret: Ret::Addr,
        families: Families {
            bytes: Some(Family {
                name: "sonic_probe_mmap_bytes_total",
                help: "Bytes mapped by successful mmap calls (the length argument).",
            }),
            size: Some(Family { name: "sonic_probe_mmap_size_bytes", help: "Length of mmap calls." }),
            ..NO_FAMILIES
        },
        ..NONE
    },
    Syscall {
        index: MUNMAP, name: "munmap", nr_x86_64: 11,
        size_arg: Some(1), large_events: true,
        bytes: Bytes::SizeArg,
        args: Args::List(&[Addr, Unsigned]),
        families: Families {
            bytes: Some(Family {
                name: "sonic_probe_munmap_bytes_total",
                help: "Bytes unmapped by successful munmap calls (the length argument).",
            }),
            ..NO_FAMILIES
        },
        ..NONE
    },
    Syscall {
        index: CLOSE, name: "close", nr_x86_64: 3,
        fd_arg: Some(0), fd_use: FdUse::Closes,
        args: Args::List(&[Fd]),
        ..NONE
    },
    Syscall {
        index: FUTEX_WAITV, name: "futex_waitv", nr_x86_64: 449,
        variant: Variant::Fixed { label: "op", value: "waitv" },
        args: Args::List(&[Addr, U32, U32, Addr, Clock]),
        families: Families { duration: Some(FUTEX_WAITS), ..NO_FAMILIES },
        ..NONE
    },
    Syscall {
        index: PREAD64, name: "pread64", nr_x86_64: 17,
        fd_arg: Some(0), fd_use: FdUse::Read,
        size_arg: Some(2), count_small: true,
        bytes: Bytes::Return,
        variant: Variant::FileClass,
        args: Args::List(&[Fd, Addr, Unsigned, Signed]),
        families: Families {
            bytes: Some(Family {
                name: "sonic_probe_pread64_bytes_total",
                help: "Bytes returned by successful pread64 calls.",
            }),
            size: Some(Family {
                name: "sonic_probe_pread64_size_bytes",
                help: "Bytes asked for by pread64 calls, by the class of what was read.",
            }),
            small: Some(Family {
                name: "sonic_probe_small_preads_total",
                help: "pread64 calls asking for fewer bytes than --small-read-threshold.",
            }),
            ..NO_FAMILIES
        },
        ..NONE
    },
    Syscall {
        index: WRITE, name: "write", nr_x86_64: 1,
        fd_arg: Some(0), fd_use: FdUse::Classify,
        size_arg: Some(2), count_short: true,
        bytes: Bytes::Return,
        variant: Variant::FileClass,
        default_on: false,
        errors_always: true,
        args: Args::List(&[Fd, Addr, Unsigned]),
        families: Families {
            bytes: Some(Family {
                name: "sonic_probe_write_bytes_total",
                help: "Bytes written by successful write calls.",
            }),
            size: Some(Family {
                name: "sonic_probe_write_size_bytes",
                help: "Bytes given to write calls, by the class of what was written to.",
            }),
            short: Some(Family {
                name: "sonic_probe_short_writes_total",
                help: "write calls to a regular file that wrote fewer bytes than asked, without an error \
                       (a disk filling up); only where write is traced.",
            }),
            ..NO_FAMILIES
        },
        ..NONE
    },
    Syscall {
        index: IOCTL, name: "ioctl", nr_x86_64: 16,
        fd_arg: Some(0), fd_use: FdUse::Classify,
        variant: Variant::DeviceClass,
        // isatty() is a TCGETS that fails with ENOTTY: counted, not a finding.
        error_events: false,
        default_on: false,
        args: Args::List(&[Fd, IoctlRequest, Hex]),
        families: Families {
            duration: Some(Family {
                name: "sonic_probe_ioctl_duration_seconds",
                help: "Duration of ioctl calls by the class of the device (gpu: the GPU driver's calls, \
                       where a CUDA synchronize waits).",
            }),
            ..NO_FAMILIES
        },
        ..NONE
    },
    // Opt-in like write: the writes of a database or a log at an offset
    // are as hot as write's.
    Syscall {
        index: PWRITE64, name: "pwrite64", nr_x86_64: 18,
        fd_arg: Some(0), fd_use: FdUse::Classify,
        size_arg: Some(2), count_short: true,
        bytes: Bytes::Return,
        variant: Variant::FileClass,
        default_on: false,
        errors_always: true,
        args: Args::List(&[Fd, Addr, Unsigned, Signed]),
        families: Families {
            bytes: Some(Family {
                name: "sonic_probe_pwrite64_bytes_total",
                help: "Bytes written by successful pwrite64 calls.",
            }),
            size: Some(Family {
                name: "sonic_probe_pwrite64_size_bytes",
                help: "Bytes given to pwrite64 calls, by the class of what was written to.",
            }),
            short: Some(Family {
                name: "sonic_probe_short_pwrites_total",
                help: "pwrite64 calls to a regular file that wrote fewer bytes than asked, without an \
                       error (a disk filling up); only where pwrite64 is traced.",
            }),
            ..NO_FAMILIES
        },
        ..NONE
    },
    // Rare (a connection made, not a request served): on by default for
    // its failures, the model store that times out or refuses.
    Syscall {
        index: CONNECT, name: "connect", nr_x86_64: 42,
        fd_arg: Some(0), fd_use: FdUse::Classify,
        addr_arg: Some(1),
        in_progress_errno: Some(115), // EINPROGRESS
        args: Args::List(&[Fd, SockAddr, U32]),
        ..NONE
    },
    // Opt-in like write (its failures always counted, as write's).
    Syscall {
        index: WRITEV, name: "writev", nr_x86_64: 20,
        fd_arg: Some(0), fd_use: FdUse::Classify,
        bytes: Bytes::Return,
        variant: Variant::FileClass,
        default_on: false,
        errors_always: true,
        args: Args::List(&[Fd, Addr, U32]),
        families: Families {
            bytes: Some(Family {
                name: "sonic_probe_writev_bytes_total",
                help: "Bytes written by successful writev calls.",
            }),
            ..NO_FAMILIES
        },
        ..NONE
    },
];

/// Number of traced system calls (array sizes in both languages).
pub const NR_SYSCALLS: usize = SYSCALLS.len();

// Masks of syscall indices are u32 (probe_config and trace's -e).
const _: () = assert!(NR_SYSCALLS <= 32);

/// The row for `index`, if it is one of ours.
pub fn by_index(index: u16) -> Option<&'static Syscall> {
    SYSCALLS.get(usize::from(index))
}

/// A syscall index checked against the table: what comes from the kernel
/// (a map key, an event) is checked once, where it is read, and is a
/// `SyscallId` from then on, whose row is always there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SyscallId(u16);

impl SyscallId {
    /// The id of `index`, if a row has it.
    pub fn new(index: u16) -> Option<SyscallId> {
        by_index(index).map(|_| SyscallId(index))
    }

    pub fn index(self) -> u16 {
        self.0
    }

    /// Its row.
    pub fn row(self) -> &'static Syscall {
        &SYSCALLS[usize::from(self.0)]
    }
}

/// The row whose name is `name`.
pub fn by_name(name: &str) -> Option<&'static Syscall> {
    SYSCALLS.iter().find(|s| s.name == name)
}

/// Bitmask with one bit per syscall index.
pub fn mask_of(indices: impl IntoIterator<Item = u16>) -> u32 {
    indices.into_iter().fold(0, |m, i| m | (1 << i))
}

/// Every row's bit.
pub fn all_mask() -> u32 {
    mask_of(SYSCALLS.iter().map(|s| s.index))
}

/// The rows `run` traces by default.
pub fn default_mask() -> u32 {
    mask_of(SYSCALLS.iter().filter(|s| s.default_on).map(|s| s.index))
}

/// The rows whose failures are counted even when not traced.
pub fn errors_always_mask() -> u32 {
    mask_of(SYSCALLS.iter().filter(|s| s.errors_always).map(|s| s.index))
}

/// The rows whose short calls are counted (count_short).
pub fn count_short_mask() -> u32 {
    mask_of(SYSCALLS.iter().filter(|s| s.count_short).map(|s| s.index))
}

/// The names of the rows in `mask`, in table order.
pub fn names_of(mask: u32) -> Vec<&'static str> {
    SYSCALLS.iter().filter(|s| mask & (1 << s.index) != 0).map(|s| s.name).collect()
}

/// C constants of the enums the programs switch on.
const C_FD_USES: [(FdUse, &str); 6] = [
    (FdUse::None, "SP_FD_NONE"),
    (FdUse::Classify, "SP_FD_CLASSIFY"),
    (FdUse::Read, "SP_FD_READ"),
    (FdUse::Opens, "SP_FD_OPENS"),
    (FdUse::Closes, "SP_FD_CLOSES"),
    (FdUse::Names, "SP_FD_NAMES"),
];

fn c_fd_use(u: FdUse) -> &'static str {
    C_FD_USES.iter().find(|(x, _)| *x == u).map(|(_, c)| *c).expect("every FdUse has a C name")
}

/// What the kernel puts in stats_key.variant, as a C constant.
fn c_variant(v: Variant) -> &'static str {
    match v {
        Variant::None | Variant::Fixed { .. } => "SP_VARIANT_NONE",
        Variant::FutexCommand => "SP_VARIANT_FUTEX_CMD",
        Variant::FileClass | Variant::DeviceClass => "SP_VARIANT_FILE_CLASS",
    }
}

/// Writes the syscall constants and the lookup functions used by the BPF side.
pub(crate) fn write_c_table(out: &mut String) {
    crate::cgen::write_define(out, "NR_SYSCALLS", NR_SYSCALLS, "Number of traced system calls.");
    for s in &SYSCALLS {
        let upper = s.name.to_ascii_uppercase();
        crate::cgen::write_define(out, &format!("SYSCALL_{upper}"), s.index, "");
    }
    for (i, (_, c)) in C_FD_USES.iter().enumerate() {
        let _ = writeln!(out, "#define {c} {i}");
    }
    let _ = writeln!(
        out,
        "// stats_key.variant of a call: 0, the futex command, or the class of its file.\n\
         #define SP_VARIANT_NONE 0\n#define SP_VARIANT_FUTEX_CMD 1\n#define SP_VARIANT_FILE_CLASS 2"
    );
    crate::cgen::write_define(
        out,
        "COUNT_SHORT_MASK",
        format!("{:#x}", count_short_mask()),
        "Rows whose short calls are counted (count_short), one bit per index.",
    );
    out.push('\n');
    let arms = |f: &dyn Fn(&Syscall) -> Option<String>| {
        let mut s = String::new();
        for sc in &SYSCALLS {
            if let Some(v) = f(sc) {
                let _ = writeln!(s, "\tcase {}: return {v};", sc.index);
            }
        }
        s
    };
    let _ = writeln!(
        out,
        "// x86_64 system call number -> sonic-probe syscall index, -1 if not traced.\n\
         static __always_inline int sp_syscall_index(long nr)\n{{\n\tswitch (nr) {{"
    );
    for s in &SYSCALLS {
        let _ = writeln!(out, "\tcase {}: return {};", s.nr_x86_64, s.index);
    }
    let _ = writeln!(out, "\tdefault: return -1;\n\t}}\n}}\n");
    for (fname, doc, body, default) in [
        (
            "sp_syscall_path_arg",
            "Argument read as a path at entry, -1 if none.",
            arms(&|s| s.path_arg.map(|a| a.to_string())),
            "-1",
        ),
        (
            "sp_syscall_addr_arg",
            "Argument read as a socket address (its length the next one), -1 if none.",
            arms(&|s| s.addr_arg.map(|a| a.to_string())),
            "-1",
        ),
        (
            "sp_syscall_in_progress_errno",
            "An errno that means the call is under way, not failed; 0 if none.",
            arms(&|s| s.in_progress_errno.map(|e| e.to_string())),
            "0",
        ),
        (
            "sp_syscall_size_arg",
            "Argument holding the call's size (size histogram), -1 if none.",
            arms(&|s| s.size_arg.map(|a| a.to_string())),
            "-1",
        ),
        (
            "sp_syscall_fd_arg",
            "Argument holding a descriptor, -1 if none.",
            arms(&|s| s.fd_arg.map(|a| a.to_string())),
            "-1",
        ),
        (
            "sp_syscall_fd_use",
            "What is done with the descriptor: SP_FD_*.",
            arms(&|s| (s.fd_use != FdUse::None).then(|| c_fd_use(s.fd_use).into())),
            "SP_FD_NONE",
        ),
        (
            "sp_syscall_variant",
            "What stats_key.variant holds: SP_VARIANT_*.",
            arms(&|s| (c_variant(s.variant) != "SP_VARIANT_NONE").then(|| c_variant(s.variant).into())),
            "SP_VARIANT_NONE",
        ),
        (
            "sp_syscall_counts_small",
            "1 if calls below probe_config.small_size are counted as small.",
            arms(&|s| s.count_small.then(|| "1".into())),
            "0",
        ),
        (
            "sp_syscall_large_events",
            "1 if calls of probe_config.large_size or more are sent as events.",
            arms(&|s| s.large_events.then(|| "1".into())),
            "0",
        ),
        (
            "sp_syscall_bytes_from_ret",
            "1 if the return value counts as bytes moved.",
            arms(&|s| (s.bytes == Bytes::Return).then(|| "1".into())),
            "0",
        ),
        (
            "sp_syscall_bytes_from_size",
            "1 if the size argument counts as bytes moved on success.",
            arms(&|s| (s.bytes == Bytes::SizeArg).then(|| "1".into())),
            "0",
        ),
    ] {
        let _ = writeln!(
            out,
            "// {doc}\nstatic __always_inline int {fname}(int idx)\n{{\n\tswitch (idx) {{\n{body}\tdefault: return {default};\n\t}}\n}}\n"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_dense_and_ordered() {
        for (i, s) in SYSCALLS.iter().enumerate() {
            assert_eq!(usize::from(s.index), i, "{}", s.name);
        }
    }

    #[test]
    fn names_and_numbers_are_unique() {
        for (i, a) in SYSCALLS.iter().enumerate() {
            for b in &SYSCALLS[i + 1..] {
                assert_ne!(a.name, b.name);
                assert_ne!(a.nr_x86_64, b.nr_x86_64);
            }
        }
    }

    #[test]
    fn columns_agree_with_each_other() {
        for s in &SYSCALLS {
            let n = s.name;
            if s.bytes == Bytes::SizeArg || s.count_small || s.large_events || s.families.size.is_some() {
                assert!(s.size_arg.is_some(), "{n}: uses a size it has no argument for");
            }
            assert_eq!(s.bytes == Bytes::None, s.families.bytes.is_none(), "{n}: bytes and their family");
            assert_eq!(s.count_small, s.families.small.is_some(), "{n}: small calls and their family");
            assert_eq!(s.count_short, s.families.short.is_some(), "{n}: short calls and their family");
            if s.count_short {
                assert!(
                    s.size_arg.is_some() && s.bytes == Bytes::Return && s.error_events,
                    "{n}: a short call returns fewer bytes than its size argument, and is sent as failures are"
                );
                assert!(
                    matches!(s.fd_use, FdUse::Classify),
                    "{n}: short calls are counted of regular files, known by the descriptor"
                );
            }
            if s.errors_always {
                assert!(s.error_events && !s.default_on, "{n}: failures always counted is for opt-in calls");
            }
            let needs_fd = matches!(s.fd_use, FdUse::Classify | FdUse::Read | FdUse::Closes | FdUse::Names);
            assert_eq!(needs_fd, s.fd_arg.is_some(), "{n}: fd_use and fd_arg");
            if s.variant == Variant::FileClass || s.variant == Variant::DeviceClass {
                assert!(
                    s.fd_use != FdUse::None && s.fd_use != FdUse::Names,
                    "{n}: a class needs a descriptor"
                );
            }
            if let Args::List(args) = s.args {
                for (i, a) in args.iter().enumerate() {
                    let i = Some(i as u8);
                    match a {
                        Arg::Path => assert_eq!(s.path_arg, i, "{n}: the path argument"),
                        Arg::SockAddr => assert_eq!(s.addr_arg, i, "{n}: the address argument"),
                        Arg::Fd => assert_eq!(s.fd_arg, i, "{n}: the descriptor argument"),
                        _ => {}
                    }
                }
                assert!(args.len() <= 6, "{n}");
                assert!(
                    s.path_arg.is_none() || s.addr_arg.is_none(),
                    "{n}: a path and an address share the buffer"
                );
                if let Some(a) = s.addr_arg {
                    assert_eq!(
                        args.get(usize::from(a)),
                        Some(&Arg::SockAddr),
                        "{n}: addr_arg is printed as one"
                    );
                    assert!(usize::from(a) + 1 < args.len(), "{n}: the address's length follows it");
                }
            }
            if s.families.succeeded.is_some()
                || s.families.duration.is_some()
                || s.families.small.is_some()
                || s.families.short.is_some()
            {
                assert!(s.variant.label().is_some(), "{n}: families by variant need a variant label");
            }
        }
    }

    #[test]
    fn lookup_by_name_and_mask() {
        assert_eq!(by_name("openat").unwrap().index, OPENAT);
        assert!(by_name("sendmsg").is_none());
        assert_eq!(mask_of([FUTEX, MUNMAP]), 0b10001);
        assert_eq!(names_of(default_mask()).len(), 9, "the seven calls of before plus pread64 and connect");
        assert_eq!(
            default_mask() & mask_of([WRITE, IOCTL, PWRITE64, WRITEV]),
            0,
            "write, ioctl, pwrite64 and writev are opt-in"
        );
        assert_eq!(
            count_short_mask(),
            mask_of([WRITE, PWRITE64]),
            "writev's ask is the sum of its iovec array, in user memory: not known at exit"
        );
        assert_eq!(errors_always_mask(), mask_of([WRITE, PWRITE64, WRITEV]), "their failures are not");
        assert_eq!(names_of(all_mask()).len(), NR_SYSCALLS);
    }
}
