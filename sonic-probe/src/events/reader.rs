//! Drains the BPF ring buffer on the tokio runtime, for the daemon and for
//! `trace` alike.
//!
//! The ring buffer's fd becomes readable when the kernel wakes us (the
//! programs submit silently until `wakeup_bytes` wait, see events.h), and
//! the ring is drained on a short interval besides. [`RingReader`] copies
//! each record out, decodes it, counts it by kind and hands it to the
//! caller's consumer; a record that doesn't decode is counted
//! ([`ReaderStats::decode_errors`]) and logged at debug level, never passed
//! on and never dropped silently. The daemon's consumer ([`run`]) passes
//! events on through a bounded queue, so that slow consumers never stall
//! the drain: a full queue drops the event and counts it (stage
//! "user_queue"). `trace` prints each event as it comes.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use anyhow::Context;
use aya::maps::{MapData, RingBuf};
use tokio::{
    io::unix::AsyncFd,
    sync::mpsc,
    time::{Interval, MissedTickBehavior},
};

use super::{decode, Event, KIND_LABELS};

/// What the reader saw, for metrics and for `trace`'s closing lines.
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

    /// Records that were not events of ours.
    pub fn undecodable(&self) -> u64 {
        self.decode_errors.load(Ordering::Relaxed)
    }
}

/// How often the daemon drains the ring when the kernel does not wake it:
/// it submits silently until the ring is a quarter full (see events.h).
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// What ended a wait of [`RingReader::wait_and_drain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakeup {
    /// The kernel woke us: `wakeup_bytes` were waiting in the ring.
    Kernel,
    /// The poll interval passed.
    Poll,
}

/// The ring buffer, watched on the runtime and drained into a consumer.
pub struct RingReader {
    ring: AsyncFd<RingBuf<MapData>>,
    poll: Interval,
    stats: Arc<ReaderStats>,
}

impl RingReader {
    /// Watches `ring`, to be drained at least every `poll_interval`; what
    /// it reads is counted in `stats`. Needs the tokio runtime.
    pub fn new(
        ring: RingBuf<MapData>,
        poll_interval: Duration,
        stats: Arc<ReaderStats>,
    ) -> anyhow::Result<Self> {
        // SAFETY: the RingBuf owns its map fd and keeps it open, unchanged,
        // for as long as the AsyncFd owns the RingBuf.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .map_err(std::io::Error::from)
            .context("cannot watch the ring buffer")?;
        let mut poll = tokio::time::interval(poll_interval);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ok(RingReader { ring, poll, stats })
    }

    /// Waits until the kernel wakes us or the poll interval passes, then
    /// hands every event waiting in the ring to `consume`, in order; stops
    /// at the consumer's first error. Cancel-safe: nothing is read before
    /// the wait ends, so it may be one branch of a `select!`.
    pub async fn wait_and_drain<E: From<anyhow::Error>>(
        &mut self,
        mut consume: impl FnMut(Event) -> Result<(), E>,
    ) -> Result<Wakeup, E> {
        tokio::select! {
            guard = self.ring.readable_mut() => {
                let mut guard = guard.context("ring buffer")?;
                let drained = drain(guard.get_inner_mut(), &self.stats, &mut consume);
                guard.clear_ready();
                drained.map(|()| Wakeup::Kernel)
            }
            _ = self.poll.tick() => drain(self.ring.get_mut(), &self.stats, &mut consume).map(|()| Wakeup::Poll),
        }
    }

    /// Hands every event waiting in the ring now to `consume`, without
    /// waiting (the last ones, before the end).
    pub fn drain<E>(&mut self, mut consume: impl FnMut(Event) -> Result<(), E>) -> Result<(), E> {
        drain(self.ring.get_mut(), &self.stats, &mut consume)
    }
}

fn drain<E>(
    ring: &mut RingBuf<MapData>,
    stats: &ReaderStats,
    consume: &mut impl FnMut(Event) -> Result<(), E>,
) -> Result<(), E> {
    while let Some(record) = ring.next() {
        pass_on(&record, stats, consume)?;
    }
    Ok(())
}

/// One ring buffer record: decoded, counted by kind and consumed, or
/// counted as a decode error.
fn pass_on<E>(
    record: &[u8],
    stats: &ReaderStats,
    consume: &mut impl FnMut(Event) -> Result<(), E>,
) -> Result<(), E> {
    match decode(record) {
        Ok(ev) => {
            stats.count_kind(ev.kind());
            consume(ev)
        }
        Err(e) => {
            stats.decode_errors.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("undecodable ring buffer record: {e}");
            Ok(())
        }
    }
}

/// The daemon's reader: passes events on through `queue` until the task is
/// dropped (or the ring fd fails).
pub async fn run(
    ring: RingBuf<MapData>,
    queue: mpsc::Sender<Event>,
    stats: Arc<ReaderStats>,
) -> anyhow::Result<()> {
    let mut reader = RingReader::new(ring, POLL_INTERVAL, stats.clone())?;
    let mut forward = |ev| {
        if queue.try_send(ev).is_err() {
            stats.queue_drops.fetch_add(1, Ordering::Relaxed);
        }
        Ok::<(), anyhow::Error>(())
    };
    loop {
        reader.wait_and_drain(&mut forward).await?;
    }
}

#[cfg(test)]
mod tests {
    use sonic_probe_common::{SharedStruct, SyscallEvent, EVENT_SYSCALL};

    use super::*;

    fn read_call() -> SyscallEvent {
        let mut ev = SyscallEvent::zeroed();
        ev.header.kind = EVENT_SYSCALL;
        ev.header.tgid = 7;
        ev.syscall = sonic_probe_common::syscalls::READ;
        ev
    }

    #[test]
    fn records_that_do_not_decode_are_counted_not_consumed() {
        let stats = ReaderStats::default();
        let mut consumed = Vec::new();
        let mut consume = |ev: Event| {
            consumed.push(ev);
            Ok::<(), anyhow::Error>(())
        };
        let good = read_call();
        let mut unknown_kind = read_call();
        unknown_kind.header.kind = 77;
        pass_on(good.as_bytes(), &stats, &mut consume).unwrap();
        pass_on(&good.as_bytes()[..10], &stats, &mut consume).unwrap();
        pass_on(unknown_kind.as_bytes(), &stats, &mut consume).unwrap();
        pass_on(good.as_bytes(), &stats, &mut consume).unwrap();
        assert_eq!(consumed.len(), 2);
        assert_eq!(stats.undecodable(), 2);
        assert_eq!(stats.received_total(), 2);
        assert!(stats.received().contains(&("syscall", 2)));
    }

    #[test]
    fn a_consumer_error_is_passed_back_to_the_drain() {
        let stats = ReaderStats::default();
        let mut consume = |_: Event| Err::<(), _>(anyhow::anyhow!("cannot write"));
        assert!(pass_on(read_call().as_bytes(), &stats, &mut consume).is_err());
        // Counted as received: it was decoded.
        assert_eq!((stats.received_total(), stats.undecodable()), (1, 0));
    }
}
