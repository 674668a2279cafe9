//! Native stacks of threads, read without stopping the process: the
//! registers the kernel saved when a blocked thread entered it (ip, sp, and
//! bp where known) or those of a running thread's sample are the start, the
//! thread's stack is copied with `process_vm_readv` (a sample brings its
//! own copy), and framehop unwinds it with the objects' `.eh_frame` (frame
//! pointers where there is no unwind information). blazesym then names the
//! addresses (demangled, file:line from DWARF where it exists).
//!
//! Objects are read through `/proc/PID/root` (the process may be in a
//! container), or `/proc/PID/map_files` when that path does not lead to
//! them; only objects the stacks pass through are read, once for all the
//! threads of one capture, and no file is kept open after it.

use std::{
    collections::HashSet,
    fs::File,
    ops::Range,
    path::{Path, PathBuf},
};

use blazesym::symbolize::{
    source::{Process, Source},
    Input, Symbolized, Symbolizer,
};
use framehop::{
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
    ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder,
};
use object::{Object, ObjectSection, ObjectSegment};
use proc_maps::MapRange;

use super::{
    frame::{alive, io_error, read_memory, CaptureError, Frame, FrameKind, Regs},
    sample::Sample,
};

/// The most frames returned.
pub const MAX_FRAMES: usize = 128;
/// How much of the stack above sp is copied in one read.
const STACK_COPY: u64 = 512 * 1024;
/// Reads of words outside the copied stack (rare: frames far up the stack).
const MAX_EXTRA_READS: u32 = 64;
/// `.text` larger than this is not read (it only helps in prologues and
/// epilogues: a sampled thread may be in one, a blocked thread is not).
const MAX_TEXT: u64 = 32 << 20;
/// Unwind rounds: each loads the objects the previous one reached.
const MAX_ROUNDS: usize = 8;

/// Where a thread's unwind starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// The registers the kernel saved when the thread entered the kernel
    /// (it is blocked): its stack is read from the process.
    Regs(Regs),
    /// A running thread's registers and stack copy at one instant.
    Sample(Sample),
}

/// The user stack of thread `tid` of `pid` blocked in a system call, unwound
/// from `regs` (the registers saved at syscall entry) and the thread's stack
/// memory (read with process_vm_readv), innermost first, symbolized
/// (demangled; file:line where debug info exists). Frame pointers, and
/// .eh_frame where there are none. Files are read through /proc/PID/root
/// (containers). At most 128 frames. Partial stacks are returned as Ok with
/// what was unwound.
pub fn native_stack(pid: u32, tid: u32, regs: Regs) -> Result<Vec<Frame>, CaptureError> {
    native_stacks(pid, &[(tid, Start::Regs(regs))])?.pop().map_or_else(
        || Err(CaptureError::Other(format!("thread {tid} of process {pid}: nothing unwound"))),
        |(_, r)| r,
    )
}

/// The stacks of several threads of `pid`, as [`native_stack`] reads one:
/// the process's maps and objects are read once, and every address is
/// named in one pass. An error of the process (gone, maps unreadable) is
/// the Err; each thread's own result is in the list, in `threads`' order.
pub fn native_stacks(pid: u32, threads: &[(u32, Start)]) -> Result<ThreadStacks, CaptureError> {
    // The parsers and the unwinder read whatever the target's files and
    // stack hold; a bug they trip on costs this capture, not the daemon.
    std::panic::catch_unwind(|| capture(pid, threads)).unwrap_or_else(|p| {
        Err(CaptureError::Other(format!(
            "process {pid}: the native unwinder panicked: {}",
            super::frame::panic_message(&*p)
        )))
    })
}

/// Each thread's stack, or why it has none.
pub type ThreadStacks = Vec<(u32, Result<Vec<Frame>, CaptureError>)>;

fn capture(pid: u32, threads: &[(u32, Start)]) -> Result<ThreadStacks, CaptureError> {
    if !alive(pid) {
        return Err(CaptureError::Gone(pid));
    }
    let maps = read_maps(pid)?;
    let objects = objects(&maps);
    let mut unwinding = Unwinding::new();
    let mut unwound: Vec<(u32, Result<Vec<FrameAddress>, CaptureError>)> = Vec::new();
    for (tid, start) in threads {
        let (regs, copy) = match start {
            Start::Regs(r) => (*r, None),
            Start::Sample(s) => (s.regs, Some(s.stack.clone())),
        };
        let addrs = if regs.ip == 0 || regs.sp == 0 {
            Err(CaptureError::Other(format!(
                "thread {tid} of process {pid}: no user registers (ip {:#x}, sp {:#x})",
                regs.ip, regs.sp
            )))
        } else {
            let stack = match copy {
                Some(bytes) => Ok(StackMemory { pid, base: regs.sp, bytes, extra_reads: 0 }),
                None => StackMemory::read(pid, regs.sp, &maps),
            };
            stack.map(|mut stack| unwinding.unwind(pid, regs, &objects, &mut stack))
        };
        unwound.push((*tid, addrs));
    }
    if !alive(pid) {
        return Err(CaptureError::Gone(pid));
    }
    let all: Vec<FrameAddress> =
        unwound.iter().filter_map(|(_, a)| a.as_ref().ok()).flatten().copied().collect();
    let mut frames = symbolize(pid, &all, &objects).into_iter();
    Ok(unwound
        .into_iter()
        .map(|(tid, addrs)| (tid, addrs.map(|a| frames.by_ref().take(a.len()).collect())))
        .collect())
}

fn read_maps(pid: u32) -> Result<Vec<MapRange>, CaptureError> {
    let raw = libc::pid_t::try_from(pid).map_err(|_| CaptureError::Gone(pid))?;
    proc_maps::get_process_maps(raw).map_err(|e| io_error(pid, "/proc/PID/maps", &e))
}

/// A file mapped into the process: all its mappings, in address order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MappedObject {
    path: PathBuf,
    /// From the lowest mapping's start to the highest mapping's end.
    range: Range<u64>,
    /// (start, end, file offset) of each mapping.
    mappings: Vec<(u64, u64, u64)>,
}

impl MappedObject {
    fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.to_string_lossy().into_owned())
    }
}

/// Groups file mappings into objects (consecutive mappings of one path).
fn objects(maps: &[MapRange]) -> Vec<MappedObject> {
    let mut out: Vec<MappedObject> = Vec::new();
    for m in maps {
        let Some(path) = m.filename() else { continue };
        if !path.is_absolute() {
            continue; // [stack], [vdso], [heap], anonymous
        }
        let start = m.start() as u64;
        let end = start.saturating_add(m.size() as u64);
        let mapping = (start, end, m.offset as u64);
        match out.last_mut() {
            Some(last) if last.path == path => {
                last.range.end = last.range.end.max(end);
                last.mappings.push(mapping);
            }
            _ => out.push(MappedObject {
                path: path.to_path_buf(),
                range: start..end,
                mappings: vec![mapping],
            }),
        }
    }
    out
}

/// The thread's stack from sp upward, copied once; words outside the copy
/// are read one by one (a few at most).
struct StackMemory {
    pid: u32,
    base: u64,
    bytes: Vec<u8>,
    extra_reads: u32,
}

impl StackMemory {
    fn read(pid: u32, sp: u64, maps: &[MapRange]) -> Result<Self, CaptureError> {
        let end = maps
            .iter()
            .map(|m| (m.start() as u64, m.start() as u64 + m.size() as u64))
            .find(|&(start, end)| (start..end).contains(&sp))
            .map(|(_, end)| end)
            .ok_or_else(|| CaptureError::Unreadable {
                pid,
                cause: format!("stack pointer {sp:#x} is in no mapping"),
            })?;
        let len = end.saturating_sub(sp).min(STACK_COPY);
        let bytes = read_memory(pid, sp, len as usize).map_err(|e| io_error(pid, "stack memory", &e))?;
        Ok(StackMemory { pid, base: sp, bytes, extra_reads: 0 })
    }

    fn word(&mut self, addr: u64) -> Result<u64, ()> {
        if let Some(off) = addr.checked_sub(self.base) {
            let off = usize::try_from(off).map_err(|_| ())?;
            if let Some(bytes) = self.bytes.get(off..off.checked_add(8).ok_or(())?) {
                return Ok(u64::from_ne_bytes(bytes.try_into().map_err(|_| ())?));
            }
        }
        if self.extra_reads >= MAX_EXTRA_READS {
            return Err(());
        }
        self.extra_reads += 1;
        let bytes = read_memory(self.pid, addr, 8).map_err(|_| ())?;
        Ok(u64::from_ne_bytes(bytes.as_slice().try_into().map_err(|_| ())?))
    }
}

/// An unwinder and the objects it has loaded, shared by the threads of one
/// capture.
struct Unwinding {
    unwinder: UnwinderX86_64<Vec<u8>>,
    /// Objects whose unwind information was read (or could not be).
    tried: HashSet<usize>,
}

impl Unwinding {
    fn new() -> Self {
        Unwinding { unwinder: UnwinderX86_64::new(), tried: HashSet::new() }
    }

    /// Unwinds from `regs`; objects are loaded as the stack reaches them, and
    /// the unwind is repeated until it reaches no new object.
    fn unwind(
        &mut self,
        pid: u32,
        regs: Regs,
        objects: &[MappedObject],
        stack: &mut StackMemory,
    ) -> Vec<FrameAddress> {
        let mut wanted: Vec<usize> = object_at(objects, regs.ip).into_iter().collect();
        let mut addrs = Vec::new();
        for _ in 0..MAX_ROUNDS {
            for idx in wanted.drain(..) {
                if self.tried.insert(idx) {
                    match load_module(pid, &objects[idx]) {
                        Ok(module) => self.unwinder.add_module(module),
                        Err(cause) => {
                            tracing::debug!(pid, object = %objects[idx].path.display(), "no unwind info: {cause}")
                        }
                    }
                }
            }
            let mut cache = CacheX86_64::<_>::new();
            stack.extra_reads = 0;
            let mut read = |addr: u64| stack.word(addr);
            let mut iter = self.unwinder.iter_frames(
                regs.ip,
                UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp),
                &mut cache,
                &mut read,
            );
            addrs.clear();
            while addrs.len() < MAX_FRAMES {
                match iter.next() {
                    Ok(Some(addr)) => addrs.push(addr),
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(pid, frames = addrs.len(), "unwind stopped: {e}");
                        break;
                    }
                }
            }
            wanted = addrs
                .iter()
                .filter_map(|a| object_at(objects, a.address_for_lookup()))
                .filter(|idx| !self.tried.contains(idx))
                .collect();
            // Frames in objects not loaded yet were reached by frame pointers
            // (or not at all); with their .eh_frame the unwind may go further.
            if wanted.is_empty() {
                break;
            }
            wanted.sort_unstable();
            wanted.dedup();
        }
        addrs
    }
}

fn object_at(objects: &[MappedObject], addr: u64) -> Option<usize> {
    objects.iter().position(|o| o.mappings.iter().any(|&(start, end, _)| (start..end).contains(&addr)))
}

/// The object's file: through the process's root (containers), else its
/// map_files link (deleted or replaced files).
fn open_object(pid: u32, object: &MappedObject) -> Result<File, String> {
    let rooted =
        Path::new(&format!("/proc/{pid}/root")).join(object.path.strip_prefix("/").unwrap_or(&object.path));
    match File::open(&rooted) {
        Ok(f) => Ok(f),
        Err(first) => {
            let &(start, end, _) = object.mappings.first().ok_or("no mapping")?;
            File::open(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
                .map_err(|e| format!("{}: {first}; map_files: {e}", rooted.display()))
        }
    }
}

/// Reads the unwind sections of `object` (a read cache: only the sections
/// needed are read, not the whole file) into a framehop module.
fn load_module(pid: u32, object: &MappedObject) -> Result<Module<Vec<u8>>, String> {
    let file = open_object(pid, object)?;
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).map_err(|e| format!("not an object: {e}"))?;
    let segments: Vec<(u64, u64, u64)> = elf
        .segments()
        .map(|s| {
            let (offset, size) = s.file_range();
            (s.address(), offset, size)
        })
        .collect();
    let bias = load_bias(&segments, &object.mappings).ok_or("no mapping matches a loadable segment")?;
    let section = |name: &str, limit: u64| -> (Option<Range<u64>>, Option<Vec<u8>>) {
        match elf.section_by_name(name) {
            Some(s) if s.size() <= limit => {
                let range = s.address()..s.address().saturating_add(s.size());
                (Some(range), s.data().ok().map(<[u8]>::to_vec))
            }
            _ => (None, None),
        }
    };
    let (text_svma, text) = section(".text", MAX_TEXT);
    let (eh_frame_svma, eh_frame) = section(".eh_frame", u64::MAX);
    let (eh_frame_hdr_svma, eh_frame_hdr) = section(".eh_frame_hdr", u64::MAX);
    let got_svma = elf.section_by_name(".got").map(|s| s.address()..s.address().saturating_add(s.size()));
    let info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma,
        text,
        got_svma,
        eh_frame_svma,
        eh_frame,
        eh_frame_hdr_svma,
        eh_frame_hdr,
        ..Default::default()
    };
    Ok(Module::new(object.name(), object.range.clone(), bias, info))
}

/// The load bias (address of virtual address 0) from a mapping of a
/// loadable segment: `segments` are (vaddr, file offset, file size),
/// `mappings` (start, end, file offset).
fn load_bias(segments: &[(u64, u64, u64)], mappings: &[(u64, u64, u64)]) -> Option<u64> {
    const PAGE: u64 = 4096;
    mappings.iter().find_map(|&(start, _, map_off)| {
        segments.iter().find_map(|&(vaddr, seg_off, seg_size)| {
            // A segment is mapped from the page holding its first byte; a
            // mapping may also start inside it (split by mprotect).
            let covers = seg_size > 0
                && seg_off & !(PAGE - 1) <= map_off
                && map_off < seg_off.saturating_add(seg_size);
            // Offset and address differ by the same amount in the whole segment.
            covers.then(|| start.wrapping_sub(vaddr).wrapping_add(seg_off).wrapping_sub(map_off))
        })
    })
}

/// Names the addresses; an address blazesym cannot name is `??` (with its
/// object, if any).
fn symbolize(pid: u32, addrs: &[FrameAddress], objects: &[MappedObject]) -> Vec<Frame> {
    let lookups: Vec<u64> = addrs.iter().map(|a| a.address_for_lookup()).collect();
    let symbolizer = Symbolizer::builder().enable_inlined_fns(false).enable_code_info(true).build();
    let mut syms = None;
    for map_files in [true, false] {
        let mut process = Process::new(pid.into());
        process.map_files = map_files;
        process.perf_map = false;
        match symbolizer.symbolize(&Source::Process(process), Input::AbsAddr(&lookups)) {
            Ok(s) if s.len() == lookups.len() => {
                syms = Some(s);
                break;
            }
            Ok(_) => tracing::debug!(pid, "blazesym returned a result per address not"),
            Err(e) => tracing::debug!(pid, map_files, "symbolization failed: {e}"),
        }
    }
    lookups
        .iter()
        .enumerate()
        .map(|(i, &addr)| {
            let module = object_at(objects, addr).map(|idx| objects[idx].name());
            match syms.as_ref().and_then(|s| s.get(i)) {
                Some(Symbolized::Sym(sym)) => {
                    let (file, line) = match sym.code_info.as_deref() {
                        Some(ci) => {
                            let path = match &ci.dir {
                                Some(dir) => dir.join(&*ci.file),
                                None => PathBuf::from(&*ci.file),
                            };
                            (Some(path.to_string_lossy().into_owned()), ci.line)
                        }
                        None => (None, None),
                    };
                    let module = sym
                        .module
                        .as_deref()
                        .and_then(|m| Path::new(m).file_name())
                        .map(|n| n.to_string_lossy().into_owned())
                        .or(module);
                    Frame { function: sym.name.to_string(), file, line, module, kind: FrameKind::Native }
                }
                _ => Frame { function: "??".into(), file: None, line: None, module, kind: FrameKind::Native },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_of_a_pie() {
        // readelf -l: LOAD 0x0 vaddr 0x0 filesz 0x628; LOAD 0x1000 vaddr 0x1000 filesz 0x1f5
        let segments = [(0x0, 0x0, 0x628), (0x1000, 0x1000, 0x1f5), (0x3db8, 0x2db8, 0x258)];
        let mappings =
            [(0x5555_5555_4000, 0x5555_5555_5000, 0), (0x5555_5555_5000, 0x5555_5555_6000, 0x1000)];
        assert_eq!(load_bias(&segments, &mappings), Some(0x5555_5555_4000));
        // Only the text mapping present (the others unmapped or merged away).
        assert_eq!(load_bias(&segments, &mappings[1..]), Some(0x5555_5555_4000));
    }

    #[test]
    fn bias_of_a_non_pie() {
        let segments = [(0x400000, 0x0, 0x1000), (0x401000, 0x1000, 0x2000)];
        let mappings = [(0x400000, 0x401000, 0), (0x401000, 0x403000, 0x1000)];
        assert_eq!(load_bias(&segments, &mappings), Some(0));
    }

    #[test]
    fn bias_without_match() {
        assert_eq!(load_bias(&[], &[(0x1000, 0x2000, 0)]), None);
    }

    #[test]
    fn own_stack_memory() {
        let maps = read_maps(std::process::id()).unwrap();
        let word: u64 = 0x1234_5678_9abc_def0;
        let sp = &word as *const u64 as u64;
        let mut stack = StackMemory::read(std::process::id(), sp, &maps).unwrap();
        assert_eq!(stack.word(sp), Ok(word));
        assert_eq!(stack.word(0), Err(()));
    }

    #[test]
    fn objects_group_mappings() {
        let maps = read_maps(std::process::id()).unwrap();
        let objects = objects(&maps);
        let exe = std::env::current_exe().unwrap();
        assert!(objects.iter().any(|o| o.path == exe), "{objects:?}");
        let mut paths: Vec<_> = objects.iter().map(|o| &o.path).collect();
        let n = paths.len();
        paths.dedup();
        assert_eq!(paths.len(), n, "consecutive mappings of one file are one object");
    }

    #[test]
    fn gone_pid() {
        assert!(matches!(
            native_stack(u32::MAX, u32::MAX, Regs { ip: 1, sp: 1, bp: 0 }),
            Err(CaptureError::Gone(_))
        ));
    }

    #[test]
    fn no_registers() {
        let me = std::process::id();
        assert!(matches!(native_stack(me, me, Regs::default()), Err(CaptureError::Other(_))));
    }
}
