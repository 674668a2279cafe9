//! small_reads: a regular file read in small pieces (scenario 3: speech.mp3
//! read 1 KiB at a time while the model waits for it).
//!
//! Rule: reads through a descriptor of a regular file that ask for fewer
//! than `small_read_bytes` (default 4096) are small. The kernel counts them
//! per descriptor (open_files); at close (or, for files still open, when
//! findings are asked for) they are added up per process and path. A file
//! with at least `small_read_min_count` (default 8) small reads is reported,
//! so that a 100-byte config file read once is not. Reads from pipes,
//! sockets, eventfds and ttys are not file reads: the kernel tells them
//! apart by inode type and never counts them here.

use std::{collections::HashMap, sync::Arc};

use sonic_probe_common::file_class_name;

use super::{prune, Detail, Detector, DetectorMetrics, FileTotals, Input, LiveFile, Record, Settings};
use crate::events::Event;

#[derive(Clone)]
struct FileState {
    pid: u32,
    comm: String,
    class: u16,
    totals: FileTotals,
    first_ns: u64,
    last_ns: u64,
}

pub struct SmallReads {
    ignore: Vec<glob::Pattern>,
    min_count: u64,
    window_ns: u64,
    max: usize,
    files: HashMap<(u64, Arc<str>), FileState>,
}

impl SmallReads {
    pub fn new(s: &Settings) -> Self {
        SmallReads {
            ignore: s.ignore_paths.clone(),
            min_count: s.small_read_min_count.max(1),
            window_ns: s.window.as_nanos() as u64,
            max: s.max_findings,
            files: HashMap::new(),
        }
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
    fn observe(&mut self, input: &Input<'_>, _metrics: &mut DetectorMetrics) {
        let (Event::FileClosed(f), Some(file)) = (input.event, input.closed) else { return };
        let totals = FileTotals::from(&f.raw.file);
        if totals.small_reads == 0 || !file.is_regular() || self.ignore.iter().any(|p| p.matches(&file.path))
        {
            return;
        }
        let st = self.files.entry((file.incarnation, file.path.clone())).or_insert_with(|| FileState {
            pid: file.tgid,
            comm: file.comm.clone(),
            class: file.class,
            totals: FileTotals::default(),
            first_ns: file.opened_ns,
            last_ns: f.raw.header.time_ns,
        });
        add(&mut st.totals, &totals);
        st.last_ns = f.raw.header.time_ns;
    }

    fn reconfigure(&mut self, s: &Settings) {
        let fresh = SmallReads::new(s);
        self.ignore = fresh.ignore;
        self.min_count = fresh.min_count;
        self.window_ns = fresh.window_ns;
        self.max = fresh.max;
    }

    fn findings(&mut self, now_ns: u64, live: &[LiveFile<'_>], out: &mut Vec<Record>) {
        prune(&mut self.files, |s| s.last_ns, now_ns.saturating_sub(self.window_ns), self.max);
        // Files still open add what they have read so far.
        let mut merged = self.files.clone();
        let ignored = |path: &str| self.ignore.iter().any(|p| p.matches(path));
        for l in
            live.iter().filter(|l| l.totals.small_reads > 0 && l.file.is_regular() && !ignored(&l.file.path))
        {
            let e = merged.entry((l.file.incarnation, l.file.path.clone())).or_insert_with(|| FileState {
                pid: l.file.tgid,
                comm: l.file.comm.clone(),
                class: l.file.class,
                totals: FileTotals::default(),
                first_ns: l.file.opened_ns,
                last_ns: now_ns,
            });
            add(&mut e.totals, &l.totals);
            e.last_ns = now_ns;
        }
        for ((_, path), m) in merged {
            let t = m.totals;
            if t.small_reads < self.min_count {
                continue;
            }
            out.push(Record {
                detail: Detail::SmallReads {
                    path: path.to_string(),
                    file_class: file_class_name(m.class).to_string(),
                    count: t.small_reads,
                    bytes: t.small_read_bytes,
                    typical_size: t.small_read_requested / t.small_reads,
                },
                pid: m.pid,
                comm: m.comm,
                first_ns: m.first_ns,
                last_ns: m.last_ns,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::{testing::*, Engine};

    const AUDIO: u16 = 3;

    fn found(e: &mut Engine, now: u64, live: &[(u32, u32, u64, FileTotals)]) -> Vec<Detail> {
        e.findings(now, live)
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
            vec![Detail::SmallReads {
                path: "/data/speech.mp3".into(),
                file_class: "audio".into(),
                count: 65,
                bytes: 65 * 1024,
                typical_size: 1024
            }]
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
    fn fd_reuse_after_close_goes_to_the_right_file() {
        let mut e = Engine::new(&Settings::default());
        e.observe(&openat(5, SEC, "/a.wav", 7, AUDIO));
        e.observe(&close(5, 2 * SEC, 7, SEC, 10, 1000, 10, 1000));
        e.observe(&openat(5, 3 * SEC, "/b.wav", 7, AUDIO));
        e.observe(&close(5, 4 * SEC, 7, 3 * SEC, 20, 2000, 20, 2000));
        let mut f = found(&mut e, 5 * SEC, &[]);
        f.sort_by_key(|d| format!("{d:?}"));
        let counts: Vec<(String, u64)> = f
            .into_iter()
            .map(|d| match d {
                Detail::SmallReads { path, count, .. } => (path, count),
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
        assert!(matches!(f[..], [Detail::SmallReads { count: 30, .. }]), "{f:?}");
        // A stale live entry (another open of that fd) is not attributed.
        let stale = [(5, 7, SEC + 1, live[0].3)];
        assert!(found(&mut e, 3 * SEC, &stale).is_empty());
    }
}
