//! Drains the BPF ring buffer on the tokio runtime.
//!
//! The ring buffer's fd becomes readable when the kernel has data; the
//! reader copies each record out, decodes it and passes it on through a
//! bounded queue, so that slow consumers never stall the drain. A full
//! queue drops the event and counts it (stage "user_queue"); a record that
//! doesn't decode is counted too. Nothing is lost silently.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use aya::maps::{MapData, RingBuf};
use tokio::{io::unix::AsyncFd, sync::mpsc};

use super::{decode, Event, KIND_LABELS};

/// What the reader saw, for metrics.
#[derive(Debug, Default)]
pub struct ReaderStats {
    received: [AtomicU64; 16],
    pub decode_errors: AtomicU64,
    pub queue_drops: AtomicU64,
}

impl ReaderStats {
    fn count_kind(&self, kind: u32) {
        if let Some(c) = self.received.get(kind as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// (kind label, events received) for every known kind.
    pub fn received(&self) -> Vec<(&'static str, u64)> {
        KIND_LABELS
            .iter()
            .map(|&(k, name)| (name, self.received[k as usize].load(Ordering::Relaxed)))
            .collect()
    }

    pub fn received_total(&self) -> u64 {
        self.received.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// How often the ring is drained when the kernel does not wake us: it
/// submits silently until the ring is a quarter full (see events.h).
pub const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(20);

fn drain(ring: &mut RingBuf<MapData>, queue: &mpsc::Sender<Event>, stats: &ReaderStats) {
    while let Some(item) = ring.next() {
        match decode(&item) {
            Ok(ev) => {
                stats.count_kind(ev.kind());
                if queue.try_send(ev).is_err() {
                    stats.queue_drops.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) => {
                stats.decode_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("undecodable event: {e}");
            }
        }
    }
}

/// Reads events until the task is dropped (or the ring fd fails).
pub async fn run(
    ring: RingBuf<MapData>,
    queue: mpsc::Sender<Event>,
    stats: Arc<ReaderStats>,
) -> std::io::Result<()> {
    // SAFETY: the RingBuf owns its map fd and keeps it open, unchanged,
    // for as long as the AsyncFd owns the RingBuf.
    let mut fd = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .map_err(std::io::Error::from)?;
    let mut poll = tokio::time::interval(POLL_INTERVAL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            guard = fd.readable_mut() => {
                let mut guard = guard?;
                drain(guard.get_inner_mut(), &queue, &stats);
                guard.clear_ready();
            }
            _ = poll.tick() => drain(fd.get_mut(), &queue, &stats),
        }
    }
}
