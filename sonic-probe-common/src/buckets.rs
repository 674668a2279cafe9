//! The histogram buckets of the kernel's statistics, as Rust reads them:
//! which bucket a value falls in (the rule the BPF programs apply, in
//! bpf/stats.h) and each bucket's upper bound (the metrics' `le` labels).

use crate::constants::{LATENCY_BUCKETS, LATENCY_MIN_SHIFT, SIZE_BUCKETS};

/// Upper bound in nanoseconds of latency bucket `i` (None for the last, +Inf).
pub fn latency_bucket_upper_ns(i: usize) -> Option<u64> {
    (i + 1 < LATENCY_BUCKETS).then(|| 1u64 << (LATENCY_MIN_SHIFT as usize + i))
}

/// The bucket a duration falls in; the same rule as the BPF side
/// (`latency_bucket` in bpf/stats.h; sonic-probe-ebpf/tests/c_and_rust_agree.rs
/// runs both).
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

/// The size bucket of `bytes`; the same rule as the BPF side (`size_bucket`
/// in bpf/stats.h; checked against it like `latency_bucket`).
pub fn size_bucket(bytes: u64) -> usize {
    if bytes <= 1 {
        return 0;
    }
    let ceil_log2 = 64 - (bytes - 1).leading_zeros() as usize;
    ceil_log2.div_ceil(2).min(SIZE_BUCKETS - 1)
}

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
}
