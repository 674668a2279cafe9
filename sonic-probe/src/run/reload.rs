//! SIGHUP: the config file and flags read again and applied to the running
//! daemon, without a restart: what can change in place does, what only a
//! restart can change is kept and named in the log.

use std::sync::{Arc, Mutex};

use tracing::warn;

use super::{findings::FindingsService, probe_config};
use crate::{
    config::{options::RunArgs, RunConfig},
    error::Result,
    probe::{Probe, TargetMaps},
    stacks::capture::CaptureSettings,
    web::HttpState,
};

/// Applies a re-read configuration to the running probe (SIGHUP): targets,
/// thresholds and detector settings change in place; counters, findings and
/// the attached programs stay.
pub(super) struct Reloader {
    pub(super) cli: RunArgs,
    pub(super) cli_log_level: Option<String>,
    pub(super) current: RunConfig,
    pub(super) probe: Arc<Mutex<Probe>>,
    pub(super) targets: Arc<Mutex<TargetMaps>>,
    pub(super) findings: FindingsService,
    pub(super) http: Arc<HttpState>,
    pub(super) capture_settings: Arc<Mutex<CaptureSettings>>,
}

impl Reloader {
    pub(super) fn reload(&mut self) -> Result<()> {
        let new = RunConfig::load(&self.cli, self.cli_log_level.as_deref())?;
        let old = &self.current;
        let (new, changed) = keep_restart_only(old, new);
        for what in changed {
            warn!("SIGHUP: {what} changes only at a restart; keeping the running value");
        }
        self.targets.lock().expect("targets lock").reload(&old.targets, &new.targets)?;
        self.probe.lock().expect("probe lock").set_config(&probe_config(&new))?;
        self.findings.reconfigure(&new.findings);
        *self.capture_settings.lock().expect("capture settings lock") = new.capture_settings();
        self.http.set_web_config(new.web.clone());
        self.http.set_path_display(new.findings_paths);
        self.current = new;
        Ok(())
    }
}

/// `new` with the running value of every option only a restart changes,
/// and the names (as in the log) of those that differed.
fn keep_restart_only(old: &RunConfig, mut new: RunConfig) -> (RunConfig, Vec<&'static str>) {
    let mut changed = Vec::new();
    macro_rules! keep {
        ($($name:literal => $field:ident,)*) => {$(
            if new.$field != old.$field {
                changed.push($name);
                new.$field = old.$field.clone();
            }
        )*};
    }
    keep! {
        "listen" => listen,
        "ringbuf_size" => ringbuf_bytes,
        "max_comms" => max_comms,
        "max_thread_names" => max_thread_names,
        "thread_time" => thread_time,
        "workload_from, containers_log_dir, max_workloads" => workloads,
        "bpf_stats" => bpf_stats,
        "btf" => btf,
        "log_level" => log_level,
        // Capabilities dropped at start can't be had back, and the
        // programs keep entering waits in futex_waiting as they did.
        "stack_captures" => stack_captures,
    }
    (new, changed)
}
