//! The statistics the report's figures are made of: medians with min-max
//! over rounds, the median kernel-side sample of a round, and 95 %
//! bootstrap intervals of ratios and differences over the rounds (with the
//! text for a ratio whose denominator is not positive). Kept apart from
//! the measuring so that it is tested without root and without a kernel.

use crate::calls::KernelSample;

/// Bootstrap resamples per interval.
const RESAMPLES: usize = 2000;

/// The sample of median per-call cost (enter and exit kept together).
pub(crate) fn median_sample(mut v: Vec<KernelSample>) -> Option<KernelSample> {
    v.sort_by(|a, b| a.per_call().total_cmp(&b.per_call()));
    v.get(v.len() / 2).copied()
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// splitmix64: the bootstrap's resampling needs a few thousand uniform
/// indices, the same on every run (a report does not change when run
/// twice on the same samples); not worth a dependency.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A 95 % bootstrap interval of `f` over `rounds` rounds: the rounds are
/// resampled with replacement and `f` (a statistic of the rounds whose
/// indices it is given; None where it is undefined, e.g. a non-positive
/// denominator) evaluated on each resample. None when more than 2.5 % of
/// the resamples leave it undefined: then no interval bounds it.
pub(crate) fn bootstrap(rounds: usize, f: impl Fn(&[usize]) -> Option<f64>) -> Option<(f64, f64)> {
    if rounds == 0 {
        return None;
    }
    let mut rng = SplitMix(0x5eed_5017_c0de_0016);
    let mut values = Vec::with_capacity(RESAMPLES);
    let mut idx = vec![0usize; rounds];
    for _ in 0..RESAMPLES {
        for i in idx.iter_mut() {
            *i = (rng.next() % rounds as u64) as usize;
        }
        if let Some(v) = f(&idx) {
            values.push(v);
        }
    }
    if (values.len() as f64) < RESAMPLES as f64 * 0.975 {
        return None;
    }
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    Some((at(0.025), at(0.975)))
}

/// The median of the samples at `idx`.
pub(crate) fn median_at(v: &[f64], idx: &[usize]) -> f64 {
    let mut s: Vec<f64> = idx.iter().map(|&i| v[i]).collect();
    median(&mut s)
}

/// `num / den` as text: a ratio only when the denominator is positive.
pub(crate) fn ratio_text(num: f64, den: f64) -> String {
    if den > 0.0 {
        format!("{:.2}x", num / den)
    } else {
        format!("n/a (denominator {den:+.0} ns ≤ 0)")
    }
}

/// A bootstrap interval as text.
pub(crate) fn interval_text(iv: Option<(f64, f64)>) -> String {
    match iv {
        Some((lo, hi)) => format!("[{lo:.2}-{hi:.2}]"),
        None => "[unbounded: a denominator ≤ 0 in some resamples]".to_string(),
    }
}

pub(crate) fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    let m = median(&mut v);
    (m, v[0], v[v.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_keeps_the_median_sample_whole() {
        let k = |enter: f64, exit: f64| KernelSample { enter, exit, background: 0.0 };
        // A burst in one sample (the 900) is not the round's figure, and
        // the median's enter and exit stay those of one sample.
        let m = median_sample(vec![k(200.0, 900.0), k(190.0, 210.0), k(180.0, 240.0)]).unwrap();
        assert_eq!((m.enter, m.exit), (180.0, 240.0));
        assert!(median_sample(Vec::new()).is_none());
    }

    #[test]
    fn a_non_positive_denominator_is_not_a_number() {
        assert_eq!(ratio_text(30.0, 10.0), "3.00x");
        assert!(ratio_text(30.0, 0.0).starts_with("n/a"));
        assert!(ratio_text(-11.0, -1.0).starts_with("n/a"));
    }

    #[test]
    fn bootstrap_interval_brackets_the_median_ratio_and_is_reproducible() {
        let num = [200.0, 210.0, 190.0, 205.0, 195.0, 230.0, 185.0];
        let den = [100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 100.0];
        let f = |idx: &[usize]| {
            let d = median_at(&den, idx);
            (d > 0.0).then(|| median_at(&num, idx) / d)
        };
        let (lo, hi) = bootstrap(num.len(), f).unwrap();
        assert!(lo <= 2.0 && 2.0 <= hi && hi - lo < 0.5, "[{lo}, {hi}]");
        assert_eq!(bootstrap(num.len(), f), Some((lo, hi)));
    }

    #[test]
    fn bootstrap_gives_no_interval_when_the_denominator_can_be_non_positive() {
        let num = [10.0, 12.0, 11.0, 9.0, 10.0];
        let den = [5.0, -3.0, -4.0, 6.0, -2.0];
        let f = |idx: &[usize]| {
            let d = median_at(&den, idx);
            (d > 0.0).then(|| median_at(&num, idx) / d)
        };
        assert_eq!(bootstrap(num.len(), f), None);
    }
}
