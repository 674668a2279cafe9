//! Constants, map layouts and event layouts shared with the BPF programs.
//!
//! Everything here is written once in Rust and generated into C (see
//! `cgen.rs`). Event kinds, counter indices and flag bits are fixed numbers:
//! a number that was used is never reused for something else, so an old
//! daemon never misreads a new program's events.

#[cfg(test)]
use crate::cgen::SharedStruct;
use crate::cgen::{write_define, write_struct};
use crate::shared_struct;

macro_rules! shared_consts {
    ($( $(#[doc = $doc:literal])* pub const $name:ident : $ty:ty = $value:expr; )*) => {
        $( $(#[doc = $doc])* pub const $name: $ty = $value; )*

        /// Writes every constant of this list as `#define SP_<NAME>`.
        fn write_consts(out: &mut String) {
            $( write_define(out, stringify!($name), $name, concat!($($doc, "\n",)*)); )*
        }
    };
}

shared_consts! {
    /// Bytes of a task name, NUL included (TASK_COMM_LEN).
    pub const COMM_LEN: usize = 16;
    /// Bytes of a path captured at openat entry, NUL included. Longer paths
    /// are cut and flagged with EMIT_PATH_TRUNCATED.
    pub const PATH_CAP: usize = 256;
    /// Latency histogram buckets. Bucket 0 holds d <= 2^LATENCY_MIN_SHIFT ns,
    /// bucket i (1 <= i < LATENCY_BUCKETS-1) holds 2^(MIN+i-1) < d <= 2^(MIN+i)
    /// ns, the last bucket everything longer (about 34 s and up).
    pub const LATENCY_BUCKETS: usize = 27;
    /// log2 of the first latency bucket's upper bound in nanoseconds.
    pub const LATENCY_MIN_SHIFT: u32 = 10;
    /// Size histogram buckets, powers of 4: bucket 0 holds s <= 1 byte,
    /// bucket i holds 4^(i-1) < s <= 4^i, the last one everything above 4 GiB.
    pub const SIZE_BUCKETS: usize = 18;

    /// File class (stats_key.variant of read, open_file.class): not a
    /// regular file (pipe, socket, eventfd, tty, device...).
    pub const FILE_CLASS_NOT_FILE: u16 = 0;
    /// File class: a regular file whose extension is in no class, or whose
    /// path is unknown (opened before the probe started).
    pub const FILE_CLASS_OTHER: u16 = 1;
    /// File class: a model (.pth .pt .safetensors .bin .onnx .gguf .ckpt ...).
    pub const FILE_CLASS_MODEL: u16 = 2;
    /// File class: audio (.mp3 .wav .flac .ogg .m4a ...).
    pub const FILE_CLASS_AUDIO: u16 = 3;
    /// File class: an image (.png .jpg .jpeg .webp ...).
    pub const FILE_CLASS_IMAGE: u16 = 4;
    /// File class: a video (.mp4 .mkv .mov .avi .webm ...).
    pub const FILE_CLASS_VIDEO: u16 = 5;
    /// Number of file classes.
    pub const NR_FILE_CLASSES: u16 = 6;
    /// Bytes of a file-name extension key (lower case, NUL padded).
    pub const EXT_LEN: usize = 16;

    /// Ring buffer event: a system call without a path (struct syscall_event).
    pub const EVENT_SYSCALL: u32 = 1;
    /// Ring buffer event: a system call with its path (struct syscall_path_event).
    pub const EVENT_SYSCALL_PATH: u32 = 2;
    /// Ring buffer event: a process called execve (struct process_event).
    pub const EVENT_PROCESS_EXEC: u32 = 3;
    /// Ring buffer event: a new process was forked (struct process_event).
    pub const EVENT_PROCESS_FORK: u32 = 4;
    /// Ring buffer event: the last thread of a process exited (struct process_event).
    pub const EVENT_PROCESS_EXIT: u32 = 5;
    /// Ring buffer event: a regular file opened while watched was closed,
    /// with what was read through it (struct file_close_event).
    pub const EVENT_FILE_CLOSE: u32 = 6;

    /// Why a call was sent: it carries a path read at entry (openat).
    pub const EMIT_PATH: u16 = 1;
    /// Why a call was sent: it took at least slow_call_ns.
    pub const EMIT_SLOW: u16 = 2;
    /// Why a call was sent: it failed and its syscall is in error_event_mask.
    pub const EMIT_ERROR: u16 = 4;
    /// Why a call was sent: its size argument is at least large_size.
    pub const EMIT_LARGE_MAP: u16 = 8;
    /// Why a call was sent: its syscall is in probe_config.trace_mask (strace mode).
    pub const EMIT_TRACE: u16 = 16;
    /// Flag: the path did not fit in PATH_CAP bytes and was cut.
    pub const EMIT_PATH_TRUNCATED: u16 = 32;
    /// Flag: the path could not be read from user memory.
    pub const EMIT_PATH_UNREADABLE: u16 = 64;

    /// probe_config.filter_flags: only target processes are traced (else the whole host).
    pub const FILTER_TARGETS: u32 = 1;
    /// probe_config.filter_flags: processes in target cgroups are traced.
    pub const FILTER_CGROUPS: u32 = 2;

    /// target_processes value: named by --pid (or forked by one, see FOLLOW_FORKS).
    pub const TARGET_PID: u32 = 1;
    /// target_processes value: its name matches a --comm target.
    pub const TARGET_COMM: u32 = 2;
    /// target_processes value: processes it forks become targets too.
    pub const TARGET_FOLLOW_FORKS: u32 = 4;
    /// target_processes value: only its threads listed in target_threads
    /// are traced (strace without -f traces just the thread it was given).
    pub const TARGET_THREADS_ONLY: u32 = 8;

    /// counters index: events the programs tried to send.
    pub const COUNTER_EVENTS_SENT: u32 = 0;
    /// counters index: events lost because the ring buffer was full.
    pub const COUNTER_DROP_RINGBUF: u32 = 1;
    /// counters index: calls not measured, no per-thread state could be had.
    pub const COUNTER_DROP_THREAD_STATE: u32 = 2;
    /// counters index: calls counted in the overflow entry, stats map full.
    pub const COUNTER_STATS_OVERFLOW: u32 = 3;
    /// counters index: calls lost, stats map full and no overflow entry.
    pub const COUNTER_DROP_STATS: u32 = 4;
    /// counters index: errors counted in the overflow entry, errors map full.
    pub const COUNTER_ERRORS_OVERFLOW: u32 = 5;
    /// counters index: errors lost, errors map full and no overflow entry.
    pub const COUNTER_DROP_ERRORS: u32 = 6;
    /// counters index: forked children not followed, target map full.
    pub const COUNTER_DROP_TARGET: u32 = 7;
    /// counters index: files not tracked, open_files map full (their reads
    /// are classed not_file and get no close event).
    pub const COUNTER_DROP_OPEN_FILES: u32 = 8;
    /// Number of counters.
    pub const NR_COUNTERS: u32 = 9;

    /// max_entries of target_processes.
    pub const MAX_TARGET_PROCESSES: u32 = 65536;
    /// max_entries of target_comms.
    pub const MAX_TARGET_COMMS: u32 = 256;
    /// max_entries of target_cgroups.
    pub const MAX_TARGET_CGROUPS: u32 = 256;
    /// max_entries of target_threads.
    pub const MAX_TARGET_THREADS: u32 = 4096;
    /// Deepest cgroup level a --cgroup target may have (bits of cgroup_levels).
    pub const MAX_CGROUP_LEVEL: u32 = 31;
    /// max_entries of syscall_stats (per-CPU, allocated on use).
    pub const MAX_STATS_ENTRIES: u32 = 16384;
    /// max_entries of syscall_errors (per-CPU, allocated on use).
    pub const MAX_ERROR_ENTRIES: u32 = 8192;
    /// max_entries of open_files (descriptors of watched processes).
    pub const MAX_OPEN_FILES: u32 = 65536;
    /// Recent futex wakes remembered per CPU (a power of two).
    pub const FUTEX_WAKE_SLOTS: u32 = 64;
    /// Most CPUs a long wait's search for its waker looks at.
    pub const MAX_CPUS: u32 = 4096;
    /// max_entries of file_classes (extensions with a class).
    pub const MAX_FILE_CLASS_EXTS: u32 = 256;
    /// thread_state.aux_kind: aux holds a struct timespec.
    pub const AUX_TIMESPEC: u16 = 1;
    /// Mask giving the futex command from its op argument (stats_key.variant).
    pub const FUTEX_CMD_MASK: u64 = 0x7f;
    /// Default ring buffer size in bytes (a power of two, multiple of the page size).
    pub const DEFAULT_RINGBUF_BYTES: u32 = 4 << 20;
}

shared_struct! {
    /// Runtime settings of the BPF programs: the single entry of the
    /// `config` array map, written by the daemon, changeable while attached.
    pub struct ProbeConfig as "probe_config" {
        /// FILTER_* bits; 0 traces every process on the host.
        pub filter_flags: u32,
        /// Bit n set: some target cgroup sits at cgroup level n.
        pub cgroup_levels: u32,
        /// The daemon's own process, never traced.
        pub self_tgid: u32,
        /// Bit per syscall index: every call of it is sent (strace mode).
        pub trace_mask: u32,
        /// Bit per syscall index: failed calls of it are sent as events.
        pub error_event_mask: u32,
        /// Non-zero: every call with a path argument is sent with its path
        /// (the findings need every openat).
        pub path_events: u32,
        /// Calls lasting at least this long are sent as events (0: never).
        pub slow_call_ns: u64,
        /// Calls of a syscall with large_events whose size argument is at
        /// least this many bytes are sent as events (0: never).
        pub large_size: u64,
        /// Calls of a syscall with count_small whose size argument is below
        /// this are counted in syscall_stats.small.
        pub small_size: u64,
        /// Events are submitted without waking the daemon (it polls the
        /// ring) until this many bytes wait in the ring: then it is woken.
        pub wakeup_bytes: u64,
        /// Possible CPUs (the per-CPU wake rings a long wait searches).
        pub nr_cpus: u32,
        pub _pad2: u32,
    }
}

shared_struct! {
    /// Per-thread state between system call entry and exit (task storage).
    pub struct ThreadState as "thread_state" {
        /// bpf_ktime_get_ns() at entry.
        pub start_ns: u64,
        /// The six raw argument registers at entry.
        pub args: [u64; 6],
        /// User memory an argument points to, read at entry in strace mode:
        /// a futex wait's timeout (struct timespec).
        pub aux: [u64; 2],
        /// Syscall index of the call in progress.
        pub syscall: u16,
        /// Non-zero between a traced entry and its exit.
        pub active: u16,
        /// EMIT_PATH_* flags of the captured path.
        pub path_flags: u16,
        /// Length of path without its NUL, 0 if none.
        pub path_len: u16,
        /// What aux holds: 0 nothing, AUX_TIMESPEC.
        pub aux_kind: u16,
        pub _pad: [u16; 3],
        /// Path argument read at entry (openat), NUL terminated.
        pub path: [u8; 256],
    }
}

shared_struct! {
    /// Key of syscall_stats: one entry per process name, syscall and
    /// variant. Not per process: thousands of short-lived processes of one
    /// name share their entries, so process churn allocates nothing in the
    /// kernel (per-process entries made allocation fail in bursts of forks).
    pub struct StatsKey as "stats_key" {
        /// Syscall index.
        pub syscall: u16,
        /// Sub-kind of the call: the futex command (op & FUTEX_CMD_MASK), the
        /// FILE_CLASS_* of the descriptor read, else 0.
        pub variant: u16,
        /// Name of the thread-group leader when the call ended; all zero in
        /// the overflow entries.
        pub comm: [u8; 16],
    }
}

shared_struct! {
    /// Value of syscall_stats (per CPU; the daemon sums the CPUs). The
    /// number of calls is the sum of the latency buckets: every call lands
    /// in exactly one, so histogram count and buckets always agree.
    pub struct SyscallStats as "syscall_stats" {
        /// Calls that returned an error (-4095..-1).
        pub errors: u64,
        /// Sum of call durations in nanoseconds.
        pub total_ns: u64,
        /// Bytes moved, see the syscall table.
        pub bytes: u64,
        /// Calls whose size argument was below probe_config.small_size
        /// (syscalls with count_small).
        pub small: u64,
        /// Sum of the size arguments (syscalls with a size_arg).
        pub size_total: u64,
        /// Log2 latency histogram, see LATENCY_BUCKETS.
        pub latency: [u64; 27],
        /// Histogram of the size argument, see SIZE_BUCKETS (syscalls with a
        /// size_arg).
        pub size: [u64; 18],
    }
}

shared_struct! {
    /// Key of syscall_errors (value: a per-CPU u64 count), per process
    /// name like StatsKey.
    pub struct ErrorKey as "error_key" {
        /// Syscall index.
        pub syscall: u16,
        /// Positive errno; 0 in the overflow entry.
        pub errno: u16,
        /// Name of the thread-group leader when the call ended; all zero in
        /// the overflow entries.
        pub comm: [u8; 16],
    }
}

shared_struct! {
    /// Key of open_files: a descriptor of a process.
    pub struct FileKey as "file_key" {
        pub tgid: u32,
        pub fd: u32,
    }
}

shared_struct! {
    /// Value of open_files: a descriptor the programs know the kind of, and
    /// what was read through it. Regular files are entered at openat exit
    /// (with their class from the path's extension); other descriptors at
    /// their first read (class not_file). Removed at close.
    pub struct OpenFile as "open_file" {
        /// Entry time of the openat that opened it (the openat event's
        /// header.time_ns), 0 if it was not opened while watched.
        pub opened_ns: u64,
        /// Successful reads through it.
        pub reads: u64,
        /// Bytes those reads returned.
        pub read_bytes: u64,
        /// Reads that asked for fewer than probe_config.small_size bytes.
        pub small_reads: u64,
        /// Bytes those small reads asked for.
        pub small_read_requested: u64,
        /// Bytes those small reads returned.
        pub small_read_bytes: u64,
        /// FILE_CLASS_*.
        pub class: u16,
        /// The inode's i_mode (file type and permissions).
        pub mode: u16,
        /// Its device (s_dev).
        pub dev: u32,
        /// Its inode number.
        pub ino: u64,
    }
}

shared_struct! {
    /// A watched regular file was closed (EVENT_FILE_CLOSE).
    pub struct FileCloseEvent as "file_close_event" {
        pub header: EventHeader,
        pub fd: u32,
        pub _pad: u32,
        pub file: OpenFile,
    }
}

shared_struct! {
    /// A futex wake, noted at its entry (before it can wake anyone).
    pub struct FutexWake as "futex_wake" {
        pub tgid: u32,
        /// The waking thread.
        pub tid: u32,
        /// The futex word it wakes.
        pub uaddr: u64,
        /// bpf_ktime_get_ns() when the wake was entered.
        pub time_ns: u64,
        /// The waking thread's name.
        pub comm: [u8; 16],
    }
}

shared_struct! {
    /// Value of futex_wakes (per CPU): the last FUTEX_WAKE_SLOTS wakes of
    /// watched processes on this CPU, a ring.
    pub struct FutexWakeRing as "futex_wake_ring" {
        /// Slot the next wake goes to (modulo FUTEX_WAKE_SLOTS).
        pub next: u32,
        pub _pad: u32,
        pub wakes: [FutexWake; 64],
    }
}

shared_struct! {
    /// Key of file_classes: a file-name extension, lower case, no dot.
    pub struct ExtKey as "ext_key" {
        pub ext: [u8; 16],
    }
}

shared_struct! {
    /// Key of target_comms.
    pub struct CommKey as "comm_key" {
        /// Process name, NUL padded.
        pub comm: [u8; 16],
    }
}

shared_struct! {
    /// Start of every ring buffer event.
    pub struct EventHeader as "event_header" {
        /// EVENT_* kind; decides the structure that follows.
        pub kind: u32,
        /// Process id (thread group id).
        pub tgid: u32,
        /// Thread id.
        pub tid: u32,
        /// CPU that produced the event.
        pub cpu: u32,
        /// bpf_ktime_get_ns() (CLOCK_MONOTONIC) of the event; the call's entry for calls.
        pub time_ns: u64,
    }
}

shared_struct! {
    /// A traced call sent to user space (EVENT_SYSCALL).
    pub struct SyscallEvent as "syscall_event" {
        pub header: EventHeader,
        /// Syscall index.
        pub syscall: u16,
        /// EMIT_* bits: why it was sent, and path flags.
        pub reasons: u16,
        /// Length of the path that follows (EVENT_SYSCALL_PATH), without NUL.
        pub path_len: u16,
        /// FILE_CLASS_* of the file involved (openat's result, the descriptor
        /// of read, close or mmap), when known.
        pub file_class: u16,
        /// Futex waits: the thread whose wake ended the wait, 0 if unknown.
        pub waker_tid: u32,
        /// i_mode of the file involved, 0 if unknown (tells files from
        /// pipes, sockets, devices).
        pub file_mode: u16,
        /// What aux holds: 0 nothing, AUX_TIMESPEC.
        pub aux_kind: u16,
        /// Device of the file involved (its superblock's s_dev), 0 if unknown.
        pub file_dev: u32,
        pub _pad: u32,
        /// Inode number of the file involved, 0 if unknown.
        pub file_ino: u64,
        /// Duration from entry to exit in nanoseconds.
        pub duration_ns: u64,
        /// Raw return value (negative errno on failure).
        pub ret: i64,
        /// Raw arguments at entry.
        pub args: [u64; 6],
        /// Name of the calling thread.
        pub thread_comm: [u8; 16],
        /// Name of the thread-group leader.
        pub process_comm: [u8; 16],
        /// Futex waits: the name of waker_tid's thread, when known.
        pub waker_comm: [u8; 16],
        /// thread_state.aux of the call (strace mode).
        pub aux: [u64; 2],
    }
}

shared_struct! {
    /// A traced call with the path read at entry (EVENT_SYSCALL_PATH).
    pub struct SyscallPathEvent as "syscall_path_event" {
        pub call: SyscallEvent,
        /// NUL terminated; call.path_len bytes are meaningful.
        pub path: [u8; 256],
    }
}

shared_struct! {
    /// Process lifecycle (EVENT_PROCESS_EXEC / FORK / EXIT).
    pub struct ProcessEvent as "process_event" {
        pub header: EventHeader,
        /// Parent process id (fork: the forking process).
        pub parent_tgid: u32,
        /// Exit: the exit code as wait(2) reports it; otherwise 0.
        pub exit_code: i32,
        /// Process name after the event.
        pub comm: [u8; 16],
    }
}

pub(crate) fn write_c_constants(out: &mut String) {
    write_consts(out);
    out.push('\n');
}

pub(crate) fn write_c_structs(out: &mut String) {
    write_struct::<ProbeConfig>(out);
    write_struct::<ThreadState>(out);
    write_struct::<StatsKey>(out);
    write_struct::<SyscallStats>(out);
    write_struct::<ErrorKey>(out);
    write_struct::<CommKey>(out);
    write_struct::<FileKey>(out);
    write_struct::<OpenFile>(out);
    write_struct::<FutexWake>(out);
    write_struct::<FutexWakeRing>(out);
    write_struct::<ExtKey>(out);
    write_struct::<EventHeader>(out);
    write_struct::<SyscallEvent>(out);
    write_struct::<SyscallPathEvent>(out);
    write_struct::<ProcessEvent>(out);
    write_struct::<FileCloseEvent>(out);
}

/// Upper bound in nanoseconds of latency bucket `i` (None for the last, +Inf).
pub fn latency_bucket_upper_ns(i: usize) -> Option<u64> {
    (i + 1 < LATENCY_BUCKETS).then(|| 1u64 << (LATENCY_MIN_SHIFT as usize + i))
}

/// The bucket a duration falls in; the same rule as the BPF side.
pub fn latency_bucket(ns: u64) -> usize {
    if ns <= 1 {
        return 0;
    }
    let ceil_log2 = 64 - (ns - 1).leading_zeros();
    (ceil_log2.saturating_sub(LATENCY_MIN_SHIFT) as usize).min(LATENCY_BUCKETS - 1)
}

/// Upper bound in bytes of size bucket `i` (None for the last, +Inf).
pub fn size_bucket_upper(i: usize) -> Option<u64> {
    (i + 1 < SIZE_BUCKETS).then(|| 1u64 << (2 * i))
}

/// The size bucket of `bytes`; the same rule as the BPF side.
pub fn size_bucket(bytes: u64) -> usize {
    if bytes <= 1 {
        return 0;
    }
    let ceil_log2 = 64 - (bytes - 1).leading_zeros() as usize;
    ceil_log2.div_ceil(2).min(SIZE_BUCKETS - 1)
}

/// The name of a FILE_CLASS_* value (the `file_class` label).
pub fn file_class_name(class: u16) -> &'static str {
    match class {
        FILE_CLASS_NOT_FILE => "not_file",
        FILE_CLASS_MODEL => "model",
        FILE_CLASS_AUDIO => "audio",
        FILE_CLASS_IMAGE => "image",
        FILE_CLASS_VIDEO => "video",
        _ => "other",
    }
}

/// Default extension -> class table (lower case, without the dot).
pub const DEFAULT_FILE_CLASSES: &[(&str, u16)] = &[
    ("pth", FILE_CLASS_MODEL),
    ("pt", FILE_CLASS_MODEL),
    ("safetensors", FILE_CLASS_MODEL),
    ("bin", FILE_CLASS_MODEL),
    ("onnx", FILE_CLASS_MODEL),
    ("gguf", FILE_CLASS_MODEL),
    ("ckpt", FILE_CLASS_MODEL),
    ("pkl", FILE_CLASS_MODEL),
    ("engine", FILE_CLASS_MODEL),
    ("mp3", FILE_CLASS_AUDIO),
    ("wav", FILE_CLASS_AUDIO),
    ("flac", FILE_CLASS_AUDIO),
    ("ogg", FILE_CLASS_AUDIO),
    ("m4a", FILE_CLASS_AUDIO),
    ("aac", FILE_CLASS_AUDIO),
    ("opus", FILE_CLASS_AUDIO),
    ("png", FILE_CLASS_IMAGE),
    ("jpg", FILE_CLASS_IMAGE),
    ("jpeg", FILE_CLASS_IMAGE),
    ("webp", FILE_CLASS_IMAGE),
    ("bmp", FILE_CLASS_IMAGE),
    ("gif", FILE_CLASS_IMAGE),
    ("tif", FILE_CLASS_IMAGE),
    ("tiff", FILE_CLASS_IMAGE),
    ("mp4", FILE_CLASS_VIDEO),
    ("mkv", FILE_CLASS_VIDEO),
    ("mov", FILE_CLASS_VIDEO),
    ("avi", FILE_CLASS_VIDEO),
    ("webm", FILE_CLASS_VIDEO),
    ("flv", FILE_CLASS_VIDEO),
];

/// The class of a path by its extension, as the BPF side computes it.
pub fn class_of_path(path: &[u8]) -> u16 {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    let Some(dot) = name.iter().rposition(|&b| b == b'.') else {
        return FILE_CLASS_OTHER;
    };
    let ext = &name[dot + 1..];
    // The BPF side looks for the dot among the last EXT_LEN-1 bytes.
    if ext.is_empty() || ext.len() > EXT_LEN - 2 {
        return FILE_CLASS_OTHER;
    }
    let ext = String::from_utf8_lossy(ext).to_ascii_lowercase();
    DEFAULT_FILE_CLASSES.iter().find(|(e, _)| *e == ext).map_or(FILE_CLASS_OTHER, |&(_, c)| c)
}

/// An extension as a file_classes key.
pub fn ext_key(ext: &str) -> ExtKey {
    let mut k = ExtKey { ext: [0; EXT_LEN] };
    let b = ext.as_bytes();
    let n = b.len().min(EXT_LEN - 1);
    k.ext[..n].copy_from_slice(&b[..n]);
    k
}

/// A NUL-padded name as text (lossy for non-UTF-8 names).
pub fn comm_str(comm: &[u8]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// A name as the kernel stores it: at most COMM_LEN-1 bytes, NUL padded.
pub fn comm_bytes(name: &str) -> [u8; COMM_LEN] {
    let mut out = [0u8; COMM_LEN];
    let b = name.as_bytes();
    let n = b.len().min(COMM_LEN - 1);
    out[..n].copy_from_slice(&b[..n]);
    out
}

// The sizes the ring buffer reader relies on. The programs and the daemon
// are built together from these definitions; kind numbers are never reused.
const _: () = assert!(core::mem::size_of::<EventHeader>() == 24);
const _: () = assert!(core::mem::size_of::<SyscallEvent>() == 184);
const _: () = assert!(core::mem::size_of::<SyscallPathEvent>() == 184 + PATH_CAP);
const _: () = assert!(core::mem::size_of::<ProcessEvent>() == 48);
const _: () = assert!(core::mem::size_of::<FutexWakeRing>() == 8 + 40 * FUTEX_WAKE_SLOTS as usize);
const _: () = assert!(core::mem::size_of::<SyscallStats>() == 8 * (5 + LATENCY_BUCKETS + SIZE_BUCKETS));
const _: () = assert!(core::mem::size_of::<ThreadState>() == 88 + PATH_CAP);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_are_inclusive_upper_bounds() {
        assert_eq!(latency_bucket(0), 0);
        assert_eq!(latency_bucket(1024), 0);
        assert_eq!(latency_bucket(1025), 1);
        assert_eq!(latency_bucket(2048), 1);
        assert_eq!(latency_bucket(2049), 2);
        assert_eq!(latency_bucket(u64::MAX), LATENCY_BUCKETS - 1);
        // 200 ms: 2^27 ns < 2e8 <= 2^28 ns, i.e. le = 0.268 s.
        let b = latency_bucket(200_000_000);
        assert_eq!(latency_bucket_upper_ns(b), Some(1 << 28));
        for i in 0..LATENCY_BUCKETS - 1 {
            let up = latency_bucket_upper_ns(i).unwrap();
            assert_eq!(latency_bucket(up), i);
            assert_eq!(latency_bucket(up + 1), i + 1);
        }
        assert_eq!(latency_bucket_upper_ns(LATENCY_BUCKETS - 1), None);
    }

    #[test]
    fn size_buckets_are_powers_of_four() {
        assert_eq!(size_bucket(0), 0);
        assert_eq!(size_bucket(1), 0);
        assert_eq!(size_bucket(2), 1);
        assert_eq!(size_bucket(4), 1);
        assert_eq!(size_bucket(5), 2);
        assert_eq!(size_bucket(1024), 5);
        assert_eq!(size_bucket(1025), 6);
        assert_eq!(size_bucket(4096), 6);
        assert_eq!(size_bucket(16 << 20), 12);
        assert_eq!(size_bucket(u64::MAX), SIZE_BUCKETS - 1);
        for i in 0..SIZE_BUCKETS - 1 {
            let up = size_bucket_upper(i).unwrap();
            assert_eq!(size_bucket(up), i, "{up}");
            assert_eq!(size_bucket(up + 1), i + 1, "{up}");
        }
    }

    #[test]
    fn file_classes_by_extension() {
        assert_eq!(class_of_path(b"/models/sonic/lip_decoder.pth"), FILE_CLASS_MODEL);
        assert_eq!(class_of_path(b"/data/SPEECH.MP3"), FILE_CLASS_AUDIO);
        assert_eq!(class_of_path(b"face.png"), FILE_CLASS_IMAGE);
        assert_eq!(class_of_path(b"/x/out.mp4"), FILE_CLASS_VIDEO);
        assert_eq!(class_of_path(b"/etc/hostname"), FILE_CLASS_OTHER);
        assert_eq!(class_of_path(b"/a.pth/readme"), FILE_CLASS_OTHER);
        assert_eq!(class_of_path(b"/x/file."), FILE_CLASS_OTHER);
        assert_eq!(class_of_path(b"/x/a.verylongextension"), FILE_CLASS_OTHER);
        assert_eq!(file_class_name(FILE_CLASS_NOT_FILE), "not_file");
        assert_eq!(file_class_name(FILE_CLASS_MODEL), "model");
    }

    #[test]
    fn comm_round_trip_and_truncation() {
        assert_eq!(comm_str(&comm_bytes("python3")), "python3");
        let long = comm_bytes("a-very-long-process-name");
        assert_eq!(comm_str(&long).len(), COMM_LEN - 1);
        assert_eq!(long[COMM_LEN - 1], 0);
    }

    #[test]
    fn array_sizes_match_constants() {
        let s = SyscallStats::zeroed();
        assert_eq!(s.latency.len(), LATENCY_BUCKETS);
        let t = ThreadState::zeroed();
        assert_eq!(t.path.len(), PATH_CAP);
        assert_eq!(SyscallPathEvent::zeroed().path.len(), PATH_CAP);
        assert_eq!(StatsKey::zeroed().comm.len(), COMM_LEN);
    }
}
