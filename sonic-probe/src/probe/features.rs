//! Which kernel features the BPF programs can use, asked of the kernel
//! itself, and the variant of the programs that fits.
//!
//! Why not the version number: distributions backport BPF (RHEL 9 reports
//! 5.14 with a BPF subsystem rebased on 6.x), and a version says nothing
//! about what a kernel was built with. Each feature has a probe object
//! (sonic-probe-ebpf's `Feature::probe_object`, the smallest program of our
//! own kind that uses it); the kernel loading it, which runs the verifier
//! and attaches nothing, is the answer. A missing feature with a fallback
//! selects the fallback variant of that piece (`bpf/variant.h`); a missing
//! feature without one is one line naming it.
//!
//! `SONIC_PROBE_FALLBACK` forces fallbacks on a kernel that has the
//! features, so that the tests and the benchmark exercise them at full
//! speed on a new kernel: a comma-separated list of pieces
//! (`task_access`, `entry_state`, `futex_waker`) or `all`.

use std::collections::BTreeMap;

use aya::{programs::BtfTracePoint, Btf, EbpfLoader};
use sonic_probe_ebpf::{Feature, Variant, FEATURE_PROBE_PROGRAM};
use tracing::debug;

use super::ProbeError;

/// The environment variable that forces fallback variants.
pub const FALLBACK_ENV: &str = "SONIC_PROBE_FALLBACK";

/// What the running kernel accepted, feature by feature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelFeatures {
    present: BTreeMap<Feature, bool>,
}

impl KernelFeatures {
    /// Loads each feature's probe object against `btf` (nothing attached;
    /// everything freed before returning).
    pub fn probe(btf: &Btf) -> Result<Self, ProbeError> {
        let mut present = BTreeMap::new();
        for feature in Feature::ALL {
            let ok = match load_probe(feature, btf) {
                Ok(()) => true,
                Err(e) if is_permission_error(&e) => return Err(e),
                // Without BTF tracepoints nothing loads: keep the kernel's
                // own words.
                Err(e) if feature == Feature::BtfTracepoint => return Err(e),
                Err(e) => {
                    debug!("kernel feature {} is missing: {:#}", feature.name(), anyhow::Error::from(e));
                    false
                }
            };
            present.insert(feature, ok);
        }
        Ok(KernelFeatures { present })
    }

    /// A set of features, for tests.
    pub fn from_present(features: &[Feature]) -> Self {
        KernelFeatures { present: Feature::ALL.iter().map(|f| (*f, features.contains(f))).collect() }
    }

    pub fn has(&self, feature: Feature) -> bool {
        self.present.get(&feature).copied().unwrap_or(false)
    }

    /// (feature, present) for every feature, in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = (Feature, bool)> + '_ {
        self.present.iter().map(|(f, p)| (*f, *p))
    }

    /// One line: which features are there and which are not.
    pub fn describe(&self) -> String {
        let names = |want: bool| -> String {
            let v: Vec<&str> = self.iter().filter(|(_, p)| *p == want).map(|(f, _)| f.name()).collect();
            if v.is_empty() {
                "none".into()
            } else {
                v.join(" ")
            }
        };
        format!("has {}; lacks {}", names(true), names(false))
    }

    /// The variant of the programs to load: the fast one of each piece
    /// the kernel has the features for, unless forced to fall back.
    pub fn choose(&self, forced: Fallbacks) -> Result<Variant, ProbeError> {
        if let Some(f) = Feature::ALL.into_iter().find(|f| f.required() && !self.has(*f)) {
            return Err(ProbeError::MissingFeature(f.name()));
        }
        let has_all = |needs: &[Feature]| needs.iter().all(|f| self.has(*f));
        let task_btf = has_all(Variant::TASK_BTF_NEEDS) && !forced.task_access;
        Ok(Variant {
            task_btf,
            task_storage: task_btf && has_all(Variant::TASK_STORAGE_NEEDS) && !forced.entry_state,
            waker_percpu: has_all(Variant::WAKER_PERCPU_NEEDS) && !forced.futex_waker,
        })
    }
}

/// Pieces forced to their fallback variant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fallbacks {
    pub task_access: bool,
    pub entry_state: bool,
    pub futex_waker: bool,
}

impl Fallbacks {
    /// Parses the value of [`FALLBACK_ENV`].
    pub fn parse(value: &str) -> Result<Self, ProbeError> {
        let mut f = Fallbacks::default();
        for piece in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match piece {
                "all" => f = Fallbacks { task_access: true, entry_state: true, futex_waker: true },
                "task_access" => f.task_access = true,
                "entry_state" => f.entry_state = true,
                "futex_waker" => f.futex_waker = true,
                other => {
                    return Err(ProbeError::BadFallback(format!(
                        "{FALLBACK_ENV}: unknown piece '{other}' (use task_access, entry_state, \
                         futex_waker or all)"
                    )))
                }
            }
        }
        Ok(f)
    }

    /// From the environment; none if the variable is unset.
    pub fn from_env() -> Result<Self, ProbeError> {
        match std::env::var(FALLBACK_ENV) {
            Ok(v) => Fallbacks::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(Fallbacks::default()),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(ProbeError::BadFallback(format!("{FALLBACK_ENV}: not UTF-8")))
            }
        }
    }
}

fn load_probe(feature: Feature, btf: &Btf) -> Result<(), ProbeError> {
    let mut ebpf = EbpfLoader::new()
        .btf(Some(btf))
        // Task storage has no aya wrapper; only the kernel side uses it.
        .allow_unsupported_maps()
        .load(feature.probe_object())
        .map_err(ProbeError::Load)?;
    let name = FEATURE_PROBE_PROGRAM;
    let err = |source| ProbeError::Program { name, tracepoint: "sys_enter", source };
    let prog: &mut BtfTracePoint =
        ebpf.program_mut(name).ok_or(ProbeError::Missing(name))?.try_into().map_err(err)?;
    prog.load("sys_enter", btf).map_err(err)
}

/// A refusal for lack of privileges says nothing about the feature.
pub(super) fn is_permission_error(e: &ProbeError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if io.raw_os_error() == Some(libc::EPERM) {
                return true;
            }
        }
        source = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[Feature] = &Feature::ALL;

    #[test]
    fn a_new_kernel_gets_every_fast_piece() {
        let f = KernelFeatures::from_present(ALL);
        assert_eq!(f.choose(Fallbacks::default()).unwrap(), Variant::FAST);
        assert_eq!(
            f.describe(),
            "has btf_tracepoint ringbuf task_btf ancestor_cgroup_id task_storage bpf_loop percpu_lookup; lacks none"
        );
    }

    #[test]
    fn linux_5_10_gets_every_fallback() {
        // What 5.10 has: tp_btf (5.5), the ring buffer (5.8).
        let f = KernelFeatures::from_present(&[Feature::BtfTracepoint, Feature::Ringbuf]);
        let v = f.choose(Fallbacks::default()).unwrap();
        assert_eq!(v, Variant { task_btf: false, task_storage: false, waker_percpu: false });
        assert!(v.object().is_some());
    }

    #[test]
    fn linux_5_15_has_task_storage_but_not_the_waker_helpers() {
        // Every feature but bpf_loop (5.17) and per-CPU lookups (5.19).
        let linux_5_15 = &Feature::ALL[..5];
        assert!(!linux_5_15.contains(&Feature::BpfLoop) && !linux_5_15.contains(&Feature::PercpuLookup));
        let f = KernelFeatures::from_present(linux_5_15);
        let v = f.choose(Fallbacks::default()).unwrap();
        assert_eq!(v, Variant { task_btf: true, task_storage: true, waker_percpu: false });
        // bpf_loop alone (5.17, 5.18) is not enough either.
        let f = KernelFeatures::from_present(&[linux_5_15, &[Feature::BpfLoop]].concat());
        assert!(!f.choose(Fallbacks::default()).unwrap().waker_percpu);
    }

    #[test]
    fn a_btf_task_pointer_without_the_cgroup_helper_is_not_used() {
        // A kernel with bpf_get_current_task_btf and task storage whose
        // tracing programs cannot call bpf_get_current_ancestor_cgroup_id.
        let f = KernelFeatures::from_present(&[
            Feature::BtfTracepoint,
            Feature::Ringbuf,
            Feature::TaskBtf,
            Feature::TaskStorage,
        ]);
        let v = f.choose(Fallbacks::default()).unwrap();
        assert!(!v.task_btf && !v.task_storage);
    }

    #[test]
    fn task_storage_without_the_btf_task_pointer_is_not_used() {
        let f =
            KernelFeatures::from_present(&[Feature::BtfTracepoint, Feature::Ringbuf, Feature::TaskStorage]);
        let v = f.choose(Fallbacks::default()).unwrap();
        assert!(!v.task_btf && !v.task_storage);
    }

    #[test]
    fn a_missing_required_feature_is_named() {
        let f = KernelFeatures::from_present(&[Feature::BtfTracepoint, Feature::TaskBtf]);
        let e = f.choose(Fallbacks::default()).unwrap_err().to_string();
        assert!(e.contains("ringbuf"), "{e}");
        assert!(!e.contains("5."), "names a feature, not a version: {e}");
    }

    #[test]
    fn fallbacks_are_forced_piece_by_piece() {
        let f = KernelFeatures::from_present(ALL);
        let only = |s: &str| f.choose(Fallbacks::parse(s).unwrap()).unwrap();
        assert_eq!(only("futex_waker"), Variant { waker_percpu: false, ..Variant::FAST });
        assert_eq!(only("entry_state"), Variant { task_storage: false, ..Variant::FAST });
        // Task storage needs the BTF task pointer: both fall back.
        assert_eq!(only("task_access"), Variant { task_btf: false, task_storage: false, waker_percpu: true });
        assert_eq!(only("all"), Variant { task_btf: false, task_storage: false, waker_percpu: false });
        assert_eq!(
            only(" entry_state , futex_waker "),
            Variant { task_btf: true, task_storage: false, waker_percpu: false }
        );
        assert_eq!(only(""), Variant::FAST);
        let e = Fallbacks::parse("entry_state,bogus").unwrap_err().to_string();
        assert!(e.contains("unknown piece 'bogus'"), "{e}");
    }

    #[test]
    fn every_valid_variant_is_built() {
        for bits in 0..8u8 {
            let v =
                Variant { task_btf: bits & 4 != 0, task_storage: bits & 2 != 0, waker_percpu: bits & 1 != 0 };
            assert_eq!(v.object().is_some(), !v.task_storage || v.task_btf, "{v:?}");
        }
        for f in Feature::ALL {
            assert!(!f.probe_object().is_empty());
        }
    }
}
