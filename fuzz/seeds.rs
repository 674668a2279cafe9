//! Writes the seed corpora the fuzzers start from, deterministically:
//! corpus/event_decode/seed-* are valid records built from the layouts of
//! sonic-probe-common (so they follow layout changes when re-run), and
//! corpus/config_file/seed-* are the shipped deploy/config.toml, a file
//! with every key, and a file followed by a command line.
//!
//!   cargo run --manifest-path fuzz/Cargo.toml --example seeds

use std::path::Path;

use sonic_probe_common::{
    comm_bytes, syscalls, EventHeader, FileCloseEvent, ProcessEvent, SharedStruct, SyscallEvent,
    SyscallPathEvent, EMIT_ERROR, EMIT_PATH, EMIT_SLOW, EVENT_FILE_CLOSE, EVENT_PROCESS_EXIT,
    EVENT_PROCESS_FORK, EVENT_SYSCALL, EVENT_SYSCALL_PATH, FILE_CLASS_AUDIO, FILE_CLASS_MODEL,
};

fn header(kind: u32) -> EventHeader {
    EventHeader { kind, tgid: 4242, tid: 4243, cpu: 1, time_ns: 1_000_000_000, cgroup: 1 }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
}

fn main() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR"));
    let events = fuzz.join("corpus/event_decode");

    // A futex wait that stalled, woken by another thread.
    let mut call = SyscallEvent::zeroed();
    call.header = header(EVENT_SYSCALL);
    call.syscall = syscalls::FUTEX;
    call.reasons = EMIT_SLOW;
    call.duration_ns = 1_500_000_000;
    call.waker_tid = 4250;
    call.thread_comm = comm_bytes("pt_main_thread");
    call.process_comm = comm_bytes("python3");
    call.waker_comm = comm_bytes("pin_memory");
    write(&events, "syscall-futex", call.as_bytes());

    // A failed openat of a model file, with its path.
    let path = b"/models/lip_decoder.pth";
    let mut open = SyscallPathEvent::zeroed();
    open.call.header = header(EVENT_SYSCALL_PATH);
    open.call.syscall = syscalls::OPENAT;
    open.call.reasons = EMIT_PATH | EMIT_ERROR;
    open.call.file_class = FILE_CLASS_MODEL;
    open.call.ret = -2;
    open.call.path_len = path.len() as u16;
    open.call.process_comm = comm_bytes("python3");
    open.path[..path.len()].copy_from_slice(path);
    write(&events, "syscall-path-openat", open.as_bytes());

    let mut fork = ProcessEvent::zeroed();
    fork.header = header(EVENT_PROCESS_FORK);
    fork.parent_tgid = 1;
    fork.comm = comm_bytes("python3");
    write(&events, "process-fork", fork.as_bytes());
    fork.header.kind = EVENT_PROCESS_EXIT;
    fork.exit_code = 256;
    write(&events, "process-exit", fork.as_bytes());

    let mut close = FileCloseEvent::zeroed();
    close.header = header(EVENT_FILE_CLOSE);
    close.fd = 7;
    close.file.reads = 100;
    close.file.small_reads = 96;
    close.file.class = FILE_CLASS_AUDIO;
    write(&events, "file-close", close.as_bytes());

    let configs = fuzz.join("corpus/config_file");
    let deploy = std::fs::read(fuzz.join("../deploy/config.toml")).unwrap();
    write(&configs, "deploy", &deploy);
    write(&configs, "every-key", EVERY_KEY.as_bytes());
    // The file, a NUL, then `run`'s arguments one a line.
    write(&configs, "with-command-line", b"listen = \"0.0.0.0:9580\"\ncomm = [\"python3\"]\0--listen\n127.0.0.1:0\n--slow-threshold\n250ms\n--comm\ndd\n");
}

const EVERY_KEY: &str = r#"pid = [1]
comm = ["python3"]
cgroup = ["/"]
listen = "[::]:9580"
slow_threshold = "250ms"
large_map_threshold = "32MiB"
small_read_threshold = 2048
max_comms = 100
ringbuf_size = "8MiB"
stall_threshold = "2.5s"
stall_thread = ["pt_main*"]
stall_ignore_thread = ["pin_memory"]
stack_captures = "on"
stack_capture_interval = "30s"
repeated_open_count = 4
repeated_open_window = "2m"
small_read_min_count = 16
churn_window = "1m30s"
churn_cycles = 3
ignore_path = ["/tmp/*", "*.[ch]"]
findings_window = "1h"
max_findings = 50
findings_verbose = true
bpf_stats = true
btf = "/sys/kernel/btf/vmlinux"
log_level = "debug"
"#;
