//! small_reads: a regular file read in small pieces (scenario 3: speech.mp3
//! read 1 KiB at a time while the model waits for it).
//!
//! Rule: reads through a descriptor of a regular file that ask for fewer
//! than `bytes` (--small-read-threshold, default 4096) are small. The kernel counts them
//! per descriptor (open_files); at close (or, for files still open, when
//! findings are asked for) they are added up per process and path. A file
//! with at least `min_count` (--small-read-min-count, default 8) small
//! reads is reported,
//! so that a 100-byte config file read once is not. Reads from pipes,
//! sockets, eventfds and ttys are not file reads: the kernel tells them
//! apart by inode type and never counts them here.
//!
//! Not a finding (unless `--findings-verbose`): the small reads of an open
//! through which less than `bytes` were read in all. Such a file
//! was read whole (a 41-byte .git/HEAD, a config file read with a 256-byte
//! buffer, then the read that finds its end): there were no bigger pieces to
//! read it in. The audio read 1 KiB at a time is read past the threshold in
//! every open.
//!
//! Nor (unless `--findings-verbose`) the small reads of a process that has
//! not been reading files in small pieces for at least
//! [`RECUR_AFTER_NS`]: from the opening of its first such file to the close
//! of another (or the same, or now for a file still open). A tool (ar, a
//! header scanner) reads a dozen files that way within milliseconds and
//! exits; a service does it again with every request, and then all of its
//! small reads count, those of the first request included.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use serde::{Deserialize, Serialize};
use sonic_probe_common::file_class_name;

use super::{
    path_patterns::PathPatterns,
    request_paths,
    state::{tracked, StateMap},
    DetailKind, Detector, Evictions, FileTotals, Input, LiveFile, PathDisplay, Record, Registration,
    RECUR_AFTER_NS,
};
use crate::config::units::human_bytes;

/// It exports no family of its own: the kernel counts small reads
/// (sonic_probe_small_reads_total, sonic_probe_small_preads_total).
pub const DETECTOR: Registration =
    Registration { kind: Detail::KIND, metrics: &[], new: |s, _| Box::new(SmallReads::new(s)) };

/// Its thresholds (part of the findings' [`super::Settings`]).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Reads asking for fewer bytes than this are small.
    pub bytes: u64,
    /// Small reads of one file that make a finding.
    pub min_count: u64,
}

/// Its finding: a regular file read in small pieces, or the files of one
/// process whose paths differ only by a per-request part
/// ([`super::request_paths`]), each read that way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Detail {
    /// The file, or the files' pattern (`data/req-*/speech.mp3`).
    pub path: String,
    pub file_class: String,
    /// Small reads, of all the files.
    pub count: u64,
    /// Bytes they returned.
    pub bytes: u64,
    /// The bytes they asked for, on average.
    pub typical_size: u64,
    /// Of files folded into one pattern, each one's counts, by path; empty
    /// for one file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileReads>,
}

/// One file's small reads, in a finding of several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileReads {
    pub path: String,
    pub count: u64,
    pub bytes: u64,
    pub typical_size: u64,
}

impl FileReads {
    /// The small reads of the file at `path`, as counted in `t`.
    fn of(path: String, t: &FileTotals) -> Self {
        FileReads {
            path,
            count: t.small_reads,
            bytes: t.small_read_bytes,
            typical_size: t.small_read_requested / t.small_reads.max(1),
        }
    }

    /// Adds the reads of the same file in `later`.
    fn add(&mut self, later: &FileReads) {
        let total = self.count + later.count;
        self.typical_size =
            (self.typical_size * self.count + later.typical_size * later.count) / total.max(1);
        self.count = total;
        self.bytes += later.bytes;
    }
}

impl Detail {
    /// Its files, one or more.
    fn each_file(self) -> Vec<FileReads> {
        if self.files.is_empty() {
            let Detail { path, count, bytes, typical_size, .. } = self;
            vec![FileReads { path, count, bytes, typical_size }]
        } else {
            self.files
        }
    }

    /// The finding of `files` (of one shape, at least one), by path.
    fn of_files(file_class: String, mut files: Vec<FileReads>) -> Self {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        files.dedup_by(|later, kept| {
            let same = later.path == kept.path;
            if same {
                kept.add(later);
            }
            same
        });
        let count: u64 = files.iter().map(|f| f.count).sum();
        let asked: u64 = files.iter().map(|f| f.typical_size * f.count).sum();
        let mut d = Detail {
            path: request_paths::pattern(files.iter().map(|f| f.path.as_str())),
            file_class,
            count,
            bytes: files.iter().map(|f| f.bytes).sum(),
            typical_size: asked / count.max(1),
            files,
        };
        if d.files.len() == 1 {
            d.files.clear();
        }
        d
    }
}

impl DetailKind for Detail {
    const KIND: &'static str = "small_reads";

    fn problem_key(&self) -> String {
        self.path.clone()
    }

    fn fold(&mut self, later: Self) {
        let mut files = self.clone().each_file();
        files.extend(later.each_file());
        *self = Detail::of_files(self.file_class.clone(), files);
    }

    fn show_paths(&mut self, display: PathDisplay) {
        self.path = display.show(&self.path);
        for f in &mut self.files {
            f.path = display.show(&f.path);
        }
    }

    fn describe(&self) -> String {
        if self.files.is_empty() {
            format!(
                "{} ({}) read in small pieces: {} reads of about {} B, {} in all",
                self.path,
                self.file_class,
                self.count,
                self.typical_size,
                human_bytes(self.bytes)
            )
        } else {
            let n = self.files.len() as u64;
            format!(
                "{} ({}) read in small pieces: {n} files, {} reads of about {} B ({} a file), {} in all",
                self.path,
                self.file_class,
                self.count,
                self.typical_size,
                (self.count + n / 2) / n,
                human_bytes(self.bytes)
            )
        }
    }
}

/// Processes whose small reading is tracked at once (see [`SmallReads`]).
const MAX_PROCESSES: usize = 65536;
use crate::events::Event;

#[derive(Clone)]
struct FileState {
    pid: u32,
    comm: String,
    class: u16,
    totals: FileTotals,
    first_ns: u64,
    last_ns: u64,
    /// Closed opens added up here.
    opens: u64,
    /// Enough small reads for a finding.
    reported: bool,
}

tracked!(FileState, opens);

type Key = (u64, Arc<str>);

/// The files one finding folds: the process incarnation, the paths'
/// shape ([`request_paths::shape`]) and the file class.
type FoldKey = (u64, String, u16);

/// What it is told by the options (findings::Settings).
struct Config {
    ignore: PathPatterns,
    /// The small-read threshold: opens that read less in all read whole.
    small_bytes: u64,
    verbose: bool,
    min_count: u64,
    window_ns: u64,
    max: usize,
}

impl Config {
    fn new(s: &super::Settings) -> Self {
        Config {
            ignore: PathPatterns::new(&s.ignore_paths),
            small_bytes: s.small_reads.bytes,
            verbose: s.verbose,
            min_count: s.small_reads.min_count.max(1),
            window_ns: s.window.as_nanos() as u64,
            max: s.max_findings,
        }
    }
}

pub struct SmallReads {
    /// Its thresholds and windows, replaced whole on SIGHUP.
    cfg: Config,
    files: StateMap<Key, FileState>,
    /// Per process: when its first file read in small pieces was opened.
    since: HashMap<u64, u64>,
    /// Processes that have read files in small pieces for RECUR_AFTER_NS.
    recurring: HashSet<u64>,
}

impl SmallReads {
    pub fn new(s: &super::Settings) -> Self {
        SmallReads {
            cfg: Config::new(s),
            files: StateMap::new(DETECTOR.kind, |k: &Key| k.0, s.max_findings),
            since: HashMap::new(),
            recurring: HashSet::new(),
        }
    }
}

impl SmallReads {
    /// An open that read less than the threshold in all: the file was read
    /// whole, not in small pieces.
    fn read_whole(&self, t: &FileTotals) -> bool {
        !self.cfg.verbose && t.read_bytes < self.cfg.small_bytes
    }

    /// The files open now read in small pieces that can make findings.
    fn small_live<'l, 'a>(&self, live: &'l [LiveFile<'a>]) -> Vec<&'l LiveFile<'a>> {
        live.iter()
            .filter(|l| {
                l.totals.small_reads > 0
                    && l.file.is_regular()
                    && !self.read_whole(&l.totals)
                    && !self.cfg.ignore.matches(&l.file.path)
            })
            .collect()
    }

    /// Whether [`Self::recurs`] would say true, without noting anything.
    fn would_recur(&self, inc: u64, opened_ns: u64, t: u64) -> bool {
        self.recurring.contains(&inc)
            || t.saturating_sub(self.since.get(&inc).map_or(opened_ns, |s| (*s).min(opened_ns)))
                >= RECUR_AFTER_NS
    }

    /// Notes a file of process `inc` read in small pieces, opened at
    /// `opened_ns` and closed (or looked at) at `t`; true once the process
    /// has done so for RECUR_AFTER_NS.
    fn recurs(&mut self, inc: u64, opened_ns: u64, t: u64) -> bool {
        if self.recurring.contains(&inc) {
            return true;
        }
        if self.since.len() >= MAX_PROCESSES && !self.since.contains_key(&inc) {
            self.since.clear();
        }
        let since = self.since.entry(inc).or_insert(opened_ns);
        *since = (*since).min(opened_ns);
        if t.saturating_sub(*since) < RECUR_AFTER_NS {
            return false;
        }
        if self.recurring.len() >= MAX_PROCESSES {
            self.recurring.clear();
        }
        self.recurring.insert(inc);
        // Its files read so far count now.
        let min = self.cfg.min_count;
        for ((i, _), st) in self.files.map.iter_mut() {
            if *i == inc && st.totals.small_reads >= min {
                st.reported = true;
            }
        }
        true
    }
}

fn add(into: &mut FileTotals, t: &FileTotals) {
    into.reads += t.reads;
    into.read_bytes += t.read_bytes;
    into.small_reads += t.small_reads;
    into.small_read_requested += t.small_read_requested;
    into.small_read_bytes += t.small_read_bytes;
}

impl Detector for SmallReads {
    fn observe(&mut self, input: &Input<'_>, evictions: &mut Evictions) {
        let (Event::FileClosed(f), Some(file)) = (input.event, input.closed) else { return };
        let totals = FileTotals::from(&f.raw.file);
        if totals.small_reads == 0
            || !file.is_regular()
            || self.read_whole(&totals)
            || self.cfg.ignore.matches(&file.path)
        {
            return;
        }
        let t = f.raw.header.time_ns;
        let recurs = self.recurs(file.incarnation, file.opened_ns, t) || self.cfg.verbose;
        let key = (file.incarnation, file.path.clone());
        let new = (!self.files.map.contains_key(&key)).then(|| key.clone());
        let st = self.files.map.entry(key).or_insert_with(|| FileState {
            pid: file.tgid,
            comm: file.comm.clone(),
            class: file.class,
            totals: FileTotals::default(),
            first_ns: file.opened_ns,
            last_ns: f.raw.header.time_ns,
            opens: 0,
            reported: false,
        });
        add(&mut st.totals, &totals);
        st.last_ns = f.raw.header.time_ns;
        st.opens += 1;
        st.reported |= recurs && st.totals.small_reads >= self.cfg.min_count;
        if let Some(key) = new {
            self.files.inserted(key, evictions);
        }
    }

    fn exited(&mut self, incarnation: u64) {
        self.files.exited(incarnation);
        self.since.remove(&incarnation);
        self.recurring.remove(&incarnation);
    }

    fn reconfigure(&mut self, s: &super::Settings) {
        self.cfg = Config::new(s);
        self.files.set_max_findings(s.max_findings);
    }

    fn prune(&mut self, now_ns: u64, live: &[LiveFile<'_>], evictions: &mut Evictions) {
        self.files.prune(now_ns.saturating_sub(self.cfg.window_ns), self.cfg.max, evictions);
        // A process reading a file still open in small pieces for long
        // enough recurs as if it had closed it now.
        for l in self.small_live(live) {
            self.recurs(l.file.incarnation, l.file.opened_ns, now_ns);
        }
    }

    fn findings(&self, now_ns: u64, live: &[LiveFile<'_>], out: &mut Vec<Record>) {
        // Files still open add what they have read so far.
        let live = self.small_live(live);
        // Processes that recur now (as prune will note).
        let recurring: HashSet<u64> = live
            .iter()
            .filter(|l| self.would_recur(l.file.incarnation, l.file.opened_ns, now_ns))
            .map(|l| l.file.incarnation)
            .chain(self.recurring.iter().copied())
            .collect();
        let mut merged: HashMap<Key, FileState> = self
            .files
            .current(now_ns.saturating_sub(self.cfg.window_ns))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for l in live {
            let e = merged.entry((l.file.incarnation, l.file.path.clone())).or_insert_with(|| FileState {
                pid: l.file.tgid,
                comm: l.file.comm.clone(),
                class: l.file.class,
                totals: FileTotals::default(),
                first_ns: l.file.opened_ns,
                last_ns: now_ns,
                opens: 0,
                reported: false,
            });
            add(&mut e.totals, &l.totals);
            e.last_ns = now_ns;
        }
        // The files of one process that differ only by a per-request
        // part of their paths make one finding.
        let mut folds: HashMap<FoldKey, Vec<(Arc<str>, FileState)>> = HashMap::new();
        for ((inc, path), m) in merged {
            let t = m.totals;
            // Reported: the process had been reading that way long enough
            // when the file closed (it may have exited since), or has now.
            if t.small_reads < self.cfg.min_count
                || !(self.cfg.verbose || m.reported || recurring.contains(&inc))
            {
                continue;
            }
            folds.entry((inc, request_paths::shape(&path), m.class)).or_default().push((path, m));
        }
        for ((inc, _, class), files) in folds {
            let (first_ns, last_ns) =
                files.iter().fold((u64::MAX, 0), |(f, l), (_, m)| (f.min(m.first_ns), l.max(m.last_ns)));
            let latest = files.iter().max_by_key(|(_, m)| m.last_ns).map(|(_, m)| m.clone()).expect("a file");
            let detail = Detail::of_files(
                file_class_name(class).to_string(),
                files.into_iter().map(|(path, m)| FileReads::of(path.to_string(), &m.totals)).collect(),
            );
            out.push(FileState { first_ns, last_ns, ..latest }.record(detail.into(), inc));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::{self, testing::*, Engine, Settings};

    const AUDIO: u16 = 3;

    fn found(e: &mut Engine, now: u64, live: &[(u32, u32, u64, FileTotals)]) -> Vec<findings::Detail> {
        e.findings(now, &findings::testing::live(live))
            .into_iter()
            .filter(|f| f.detail.kind() == "small_reads")
            .map(|f| f.detail)
            .collect()
    }

    #[test]
    fn audio_read_one_kib_at_a_time() {
        let mut e = Engine::new(&Settings::default());
        e.observe(&openat(5, SEC, "/data/speech.mp3", 7, AUDIO));
        // 64 reads of 1 KiB plus the read that hit EOF.
        e.observe(&close(5, 2 * SEC, 7, SEC, 65, 65536, 65, 65 * 1024));
        let f = found(&mut e, 3 * SEC, &[]);
        assert_eq!(
            f,
            vec![findings::Detail::SmallReads(Detail {
                path: "/data/speech.mp3".into(),
                file_class: "audio".into(),
                count: 65,
                bytes: 65 * 1024,
                typical_size: 1024,
                files: Vec::new(),
            })]
        );
    }

    #[test]
    fn few_small_reads_or_big_reads_are_fine() {
        let mut e = Engine::new(&Settings::default());
        e.observe(&openat(5, SEC, "/etc/app.conf", 7, 1));
        e.observe(&close(5, 2 * SEC, 7, SEC, 2, 300, 2, 8000));
        e.observe(&openat(5, 3 * SEC, "/data/face.png", 7, 4));
        e.observe(&close(5, 4 * SEC, 7, 3 * SEC, 1, 8192, 0, 0));
        assert!(found(&mut e, 5 * SEC, &[]).is_empty());
    }

    #[test]
    fn a_tool_scanning_files_once_is_not_a_service_reading_per_request() {
        let mut e = Engine::new(&Settings::default());
        // ar: a dozen object files, 8 reads of 528 B each, within 12 ms.
        for i in 0..12 {
            let t = SEC + i * 1_000_000;
            e.observe(&openat(5, t, &format!("/build/{i}.o"), 7, 1));
            e.observe(&close(5, t + 500_000, 7, t, 8, 4200, 8, 8 * 528));
        }
        assert!(found(&mut e, 2 * SEC, &[]).is_empty());
        // A service: one request's audio, then the next's half a second later.
        let request = |e: &mut Engine, i: u64, t: u64| {
            e.observe(&openat(6, t, &format!("/data/req-{i}/speech.mp3"), 7, AUDIO));
            e.observe(&close(6, t + 5_000_000, 7, t, 65, 65536, 65, 65 * 1024));
        };
        request(&mut e, 0, 3 * SEC);
        assert!(found(&mut e, 3 * SEC + SEC / 10, &[]).is_empty(), "once, so far");
        request(&mut e, 1, 3 * SEC + SEC / 2);
        let f = found(&mut e, 4 * SEC, &[]);
        let [findings::Detail::SmallReads(d)] = &f[..] else {
            panic!("one finding of the two requests: {f:?}")
        };
        assert_eq!(d.count, 130, "both requests, the first included: {f:?}");
        assert_eq!(d.files.iter().map(|f| f.count).collect::<Vec<_>>(), [65, 65]);
        e.observe(&exit(5, 5 * SEC));
        e.observe(&exit(6, 5 * SEC));
        assert_eq!(found(&mut e, 6 * SEC, &[]), f, "the service's findings outlive it");
    }

    #[test]
    fn small_files_read_whole_are_not_small_reads() {
        let mut e = Engine::new(&Settings::default());
        // git reading its 41-byte HEAD, 4 times in one run, 3 reads each.
        for i in 0..4 {
            let t = SEC + i * 1000;
            e.observe(&openat(5, t, ".git/HEAD", 7, 1));
            e.observe(&close(5, t + 500, 7, t, 3, 41, 3, 3 * 256));
        }
        assert!(found(&mut e, 3 * SEC, &[]).is_empty());
        let mut v = Engine::new(&Settings { verbose: true, ..Settings::default() });
        for i in 0..4 {
            let t = SEC + i * 1000;
            v.observe(&openat(5, t, ".git/HEAD", 7, 1));
            v.observe(&close(5, t + 500, 7, t, 3, 41, 3, 3 * 256));
        }
        assert_eq!(found(&mut v, 3 * SEC, &[]).len(), 1, "verbose lists it");
    }

    #[test]
    fn fd_reuse_after_close_goes_to_the_right_file() {
        let mut e = Engine::new(&Settings::default());
        e.observe(&openat(5, SEC, "/a.wav", 7, AUDIO));
        e.observe(&close(5, 2 * SEC, 7, SEC, 10, 10_000, 10, 10_000));
        e.observe(&openat(5, 3 * SEC, "/b.wav", 7, AUDIO));
        e.observe(&close(5, 4 * SEC, 7, 3 * SEC, 20, 20_000, 20, 20_000));
        let mut f = found(&mut e, 5 * SEC, &[]);
        f.sort_by_key(|d| format!("{d:?}"));
        let counts: Vec<(String, u64)> = f
            .into_iter()
            .map(|d| match d {
                findings::Detail::SmallReads(Detail { path, count, .. }) => (path, count),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(counts, vec![("/a.wav".into(), 10), ("/b.wav".into(), 20)]);
    }

    #[test]
    fn a_file_still_being_read_shows_up() {
        let mut e = Engine::new(&Settings::default());
        e.observe(&openat(5, SEC, "/data/speech.mp3", 7, AUDIO));
        let live = [(
            5,
            7,
            SEC,
            FileTotals {
                reads: 30,
                read_bytes: 30 * 1024,
                small_reads: 30,
                small_read_requested: 30 * 1024,
                small_read_bytes: 30 * 1024,
            },
        )];
        let f = found(&mut e, 3 * SEC, &live);
        assert!(matches!(f[..], [findings::Detail::SmallReads(Detail { count: 30, .. })]), "{f:?}");
        // A stale live entry (another open of that fd) is not attributed.
        let stale = [(5, 7, SEC + 1, live[0].3)];
        assert!(found(&mut e, 3 * SEC, &stale).is_empty());
    }

    #[test]
    fn per_request_files_of_a_process_fold_into_one_finding_keeping_each_files_counts() {
        let mut e = Engine::new(&Settings::default());
        // Five requests, each its own audio file read 1 KiB at a time
        // (the last one still open), and a file of another name.
        for i in 0..4u64 {
            let t = SEC + i * SEC / 2;
            e.observe(&openat(5, t, &format!("/data/req-{i}/speech.mp3"), 7, AUDIO));
            e.observe(&close(5, t + 5_000_000, 7, t, 65 + i, 65536, 65 + i, (65 + i) * 1024));
        }
        e.observe(&openat(5, 3 * SEC, "/data/req-4/speech.mp3", 8, AUDIO));
        e.observe(&openat(5, 3 * SEC, "/data/voice.wav", 9, AUDIO));
        e.observe(&close(5, 3 * SEC + 1000, 9, 3 * SEC, 20, 20 * 512, 20, 20 * 512));
        let totals = |n: u64| FileTotals {
            reads: n,
            read_bytes: n * 1024,
            small_reads: n,
            small_read_requested: n * 1024,
            small_read_bytes: n * 1024,
        };
        let live = [(5, 8, 3 * SEC, totals(30))];
        let mut f = found(&mut e, 4 * SEC, &live);
        f.sort_by_key(|d| format!("{d:?}"));
        let [findings::Detail::SmallReads(reqs), findings::Detail::SmallReads(voice)] = &f[..] else {
            panic!("{f:#?}")
        };
        assert_eq!(voice.path, "/data/voice.wav");
        assert!(voice.files.is_empty());
        assert_eq!(reqs.path, "/data/req-*/speech.mp3");
        assert_eq!((reqs.count, reqs.bytes, reqs.typical_size), (296, 296 * 1024, 1024));
        let each: Vec<(&str, u64)> = reqs.files.iter().map(|f| (f.path.as_str(), f.count)).collect();
        assert_eq!(
            each,
            [
                ("/data/req-0/speech.mp3", 65),
                ("/data/req-1/speech.mp3", 66),
                ("/data/req-2/speech.mp3", 67),
                ("/data/req-3/speech.mp3", 68),
                ("/data/req-4/speech.mp3", 30)
            ]
        );
        assert_eq!(
            findings::DetailKind::describe(reqs),
            "/data/req-*/speech.mp3 (audio) read in small pieces: 5 files, 296 reads of about 1024 B \
             (59 a file), 296 KiB in all"
        );
        let json = serde_json::to_value(reqs).unwrap();
        assert_eq!(
            json["files"][4],
            serde_json::json!({"path": "/data/req-4/speech.mp3", "count": 30, "bytes": 30720, "typical_size": 1024})
        );
        assert!(serde_json::to_value(voice).unwrap().get("files").is_none(), "one file has no list");
        // Another process, the same problem: its own finding while it runs,
        // folded with the first once both have exited (files by path).
        for i in 3..7u64 {
            let t = 5 * SEC + i * SEC / 2;
            e.observe(&openat(6, t, &format!("/data/req-{i}/speech.mp3"), 7, AUDIO));
            e.observe(&close(6, t + 5_000_000, 7, t, 10, 65536, 10, 10 * 1024));
        }
        e.observe(&close(5, 9 * SEC, 8, 3 * SEC, 30, 30 * 1024, 30, 30 * 1024));
        e.observe(&exit(5, 9 * SEC));
        e.observe(&exit(6, 9 * SEC));
        let f = found(&mut e, 10 * SEC, &[]);
        let folded: Vec<&Detail> = f
            .iter()
            .filter_map(|d| match d {
                findings::Detail::SmallReads(d) if d.path == "/data/req-*/speech.mp3" => Some(d),
                _ => None,
            })
            .collect();
        let [d] = folded[..] else { panic!("{f:#?}") };
        let each: Vec<(&str, u64)> = d.files.iter().map(|f| (f.path.as_str(), f.count)).collect();
        assert_eq!(each.len(), 7, "{each:?}");
        assert_eq!(
            (each[3], each[4], each[6]),
            (("/data/req-3/speech.mp3", 78), ("/data/req-4/speech.mp3", 40), ("/data/req-6/speech.mp3", 10))
        );
        assert_eq!(d.count, 296 + 40);
    }
}
