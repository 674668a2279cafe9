//! Numbers shared with the BPF programs: sizes, limits, event kinds, counter
//! indices and flag bits, each written once here and generated into the C
//! header as `#define SP_<NAME>`. A number that was used is never reused for
//! something else, so an old daemon never misreads a new program's events.

use crate::cgen::write_define;

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
    /// regular file (pipe, socket, eventfd, tty, device other than a GPU...).
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
    /// File class: a GPU device, a character device of a driver named in
    /// probe_config.gpu_majors (nvidia*, drm, accel: /dev/nvidia*,
    /// /dev/dri/*, /dev/accel/*); not a regular file either.
    pub const FILE_CLASS_GPU: u16 = 6;
    /// Number of file classes.
    pub const NR_FILE_CLASSES: u16 = 7;
    /// Device majors probe_config.gpu_majors holds at most (0: unused slot).
    pub const MAX_GPU_MAJORS: usize = 8;
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
    /// Ring buffer event: a waiting call of CUDA's (gpu_apis) that lasted
    /// at least slow_call_ns (struct gpu_wait_event).
    pub const EVENT_GPU_WAIT: u32 = 7;

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
    /// Flag: a failure of a call that is not traced (probe_config's
    /// error_only_mask), seen at its exit only: its start time is the
    /// exit's, its duration unknown (0).
    pub const EMIT_UNTIMED: u16 = 128;
    /// Why a call was sent: a write to a regular file that wrote fewer
    /// bytes than it asked, without an error (a disk filling up), of a row
    /// with count_short whose failures are sent (error_event_mask).
    pub const EMIT_SHORT: u16 = 256;

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
    /// counters index: futex waits not entered in futex_waiting, the map
    /// was full (no stack capture for them).
    pub const COUNTER_DROP_INFLIGHT_WAITS: u32 = 9;
    /// Counter: a thread's scheduler clock could not be had (thread_clocks
    /// full, or task storage refused): its time is not accounted.
    pub const COUNTER_DROP_THREAD_CLOCK: u32 = 10;
    /// Counter: a thread's time went to the overflow slot of
    /// thread_time_slots (slot 0: every slot taken, or the index full).
    pub const COUNTER_THREAD_TIME_OVERFLOW: u32 = 11;
    /// Counter: a GPU wait counted in the overflow entry of gpu_waits
    /// (comm and workload empty), the map was full.
    pub const COUNTER_GPU_WAIT_OVERFLOW: u32 = 12;
    /// Counter: a GPU wait not counted: no scheduler clock for its thread,
    /// or gpu_waits full without its overflow entry.
    pub const COUNTER_DROP_GPU_WAITS: u32 = 13;
    /// counters index: GPU waits not entered in gpu_waiting, the map was
    /// full (no stack capture for them).
    pub const COUNTER_DROP_GPU_WAITING: u32 = 14;
    /// Number of COUNTER_* indices.
    pub const NR_COUNTERS: u32 = 15;

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
    /// max_entries of stats_index and of syscall_stats (per-CPU hash,
    /// allocated on use: the keys without a slot in stats_slots).
    pub const MAX_STATS_ENTRIES: u32 = 16384;
    /// The most slots stats_slots (a per-CPU array, allocated whole at
    /// load, one per-CPU allocation per slot) may have; the daemon sizes it
    /// to its memory budget (probe::stats_slots).
    pub const MAX_STATS_SLOTS: u32 = 512;
    /// Entries of a thread's cache of its statistics slots
    /// (thread_state.slot_cache; a power of 2).
    pub const STATS_SLOT_CACHE: u32 = 16;
    /// stats_slot.slot_plus_one of a key without a slot: it counts in
    /// syscall_stats.
    pub const SLOT_IN_HASH: u32 = 0xffff_ffff;
    /// max_entries of syscall_errors (per-CPU, allocated on use).
    pub const MAX_ERROR_ENTRIES: u32 = 8192;
    /// max_entries of open_files (descriptors of watched processes).
    pub const MAX_OPEN_FILES: u32 = 65536;
    /// max_entries of reopens (files opened read-only by watched
    /// processes, allocated on use; the daemon deletes the idle ones).
    /// When it is full, the opens of further files are each sent.
    pub const MAX_REOPENS: u32 = 16384;
    /// Slots of reopen_seen (a power of 2): the files opened lately, one
    /// 64-bit word each, so that only a file opened twice within the
    /// window gets a reopens entry (files.h).
    pub const REOPEN_SEEN_SLOTS: u32 = 8192;
    /// Slots of fd_class_cache (a power of 2): what the descriptors that
    /// are not regular files are (class and inode type), so that a read of
    /// a socket or pipe costs an array index, not an open_files lookup
    /// (files.h).
    pub const FD_CLASS_CACHE_SLOTS: u32 = 16384;
    /// Descriptors fd_class_cache holds: those below this number (the bits
    /// a slot's value keeps for it); higher ones are looked up in open_files.
    pub const FD_CLASS_CACHE_MAX_FD: u32 = 1 << 14;
    /// Recent futex wakes remembered per CPU (a power of two).
    pub const FUTEX_WAKE_SLOTS: u32 = 64;
    /// Most CPUs a long wait's search for its waker looks at.
    pub const MAX_CPUS: u32 = 4096;
    /// max_entries of thread_states where it is a hash keyed by thread id
    /// (kernels without task storage for tracing programs): live threads
    /// in a traced call at once, host-wide.
    pub const MAX_THREAD_STATES: u32 = 65536;
    /// max_entries of futex_wake_words (kernels without per-CPU lookups of
    /// other CPUs' elements): futex words whose last wake is remembered.
    pub const MAX_FUTEX_WAKE_WORDS: u32 = 16384;
    /// max_entries of futex_waiting: futex waits of target threads in
    /// progress at once, host-wide (with --stack-captures on).
    pub const MAX_INFLIGHT_WAITS: u32 = 8192;
    /// probe_config.inflight_waits: only the waits of main threads (tid ==
    /// tgid) are entered: the only request threads without --stall-thread,
    /// so that worker threads' waits pay nothing for the captures.
    pub const INFLIGHT_MAIN_THREADS: u32 = 1;
    /// max_entries of gpu_waiting: GPU waits of target threads in progress
    /// at once, host-wide (with --stack-captures on).
    pub const MAX_GPU_WAITING: u32 = 1024;
    /// probe_config.inflight_waits: the waits of every target thread (with
    /// --stall-thread, whose names user space matches).
    pub const INFLIGHT_ALL_THREADS: u32 = 2;
    /// max_entries of file_classes (extensions with a class).
    pub const MAX_FILE_CLASS_EXTS: u32 = 256;
    /// thread_state.aux_kind: aux holds a struct timespec.
    pub const AUX_TIMESPEC: u16 = 1;
    /// thread_state.aux_kind: an openat's exit put its file's reopens
    /// entry there: aux[0] its opens (this one included), aux[1] its
    /// created_ns.
    pub const AUX_OPEN_TOTAL: u16 = 2;
    /// Mask giving the futex command from its op argument (stats_key.variant).
    pub const FUTEX_CMD_MASK: u64 = 0x7f;
    /// Default ring buffer size in bytes (a power of two, multiple of the page size).
    pub const DEFAULT_RINGBUF_BYTES: u32 = 4 << 20;

    /// Where a watched thread's time goes (index into thread_times.ns; the
    /// `state` label): running on a CPU.
    pub const THREAD_ON_CPU: u32 = 0;
    /// Runnable, not running: preempted, or woken and waiting for a CPU
    /// (cgroup CPU throttling included).
    pub const THREAD_RUNQUEUE: u32 = 1;
    /// Blocked in futex or futex_waitv.
    pub const THREAD_FUTEX: u32 = 2;
    /// Blocked in a call on a regular file or block device (read, write,
    /// pread64, fsync...) or on a path (openat, stat...).
    pub const THREAD_FILE: u32 = 3;
    /// Blocked in a call on a socket (read or recv of one, connect...).
    pub const THREAD_SOCKET: u32 = 4;
    /// Blocked in a call on a pipe or FIFO.
    pub const THREAD_PIPE: u32 = 5;
    /// Blocked in a call on a GPU device (an ioctl of /dev/nvidia*...).
    pub const THREAD_GPU: u32 = 6;
    /// Blocked waiting for work: epoll_wait, poll, select, accept.
    pub const THREAD_POLL: u32 = 7;
    /// Blocked in nanosleep or clock_nanosleep.
    pub const THREAD_SLEEP: u32 = 8;
    /// Blocked in any other call, or outside a call (a page fault, memory
    /// reclaim).
    pub const THREAD_OTHER: u32 = 9;
    /// Number of THREAD_* states.
    pub const NR_THREAD_STATES: u32 = 10;
    /// Slots of thread_time_slots at most (the daemon sizes it by the
    /// number of CPUs); slot 0 is the overflow slot.
    pub const MAX_THREAD_TIME_SLOTS: u32 = 2048;
    /// Entries of thread_clocks, the per-thread scheduler clocks where task
    /// storage is missing (entry_state=thread_map): one per thread that ran
    /// since attach, deleted when it dies.
    pub const MAX_THREAD_CLOCKS: u32 = 65536;
    /// How long a thread's decision "watched or not" holds before its next
    /// switch off a CPU decides again (targets that change in user space:
    /// --pid lists, SIGHUP, cgroup moves). Exec and rename decide at once.
    pub const THREAD_REDECIDE_NS: u64 = 1_000_000_000;
    /// max_entries of gpu_waits (a preallocated hash, 224 bytes a key):
    /// distinct (workload, process name, GPU api) with waits.
    pub const MAX_GPU_WAIT_KEYS: u32 = 1024;
    /// Nesting of waiting GPU calls a thread's clock counts at most (the
    /// runtime's call wraps the driver's: 2); deeper entries are not counted.
    pub const MAX_GPU_DEPTH: u32 = 8;
}

/// Appends every constant as `#define SP_<NAME>`.
pub(crate) fn write_c_constants(out: &mut String) {
    write_consts(out);
    out.push('\n');
}

// fd_class_cache keeps a descriptor's class in 4 bits and finds its slot by
// masking a hash (files.h).
const _: () = assert!(NR_FILE_CLASSES <= 16);
const _: () = assert!(FD_CLASS_CACHE_SLOTS.is_power_of_two());
const _: () = assert!(REOPEN_SEEN_SLOTS.is_power_of_two());
const _: () = assert!(FD_CLASS_CACHE_MAX_FD == 1 << 14);
