//! `sonic-probe check-config`: a config file checked as `run --config FILE`
//! would read it, and with --attach the programs loaded and attached on
//! this kernel, then detached: what an operator runs before a restart.

use sonic_probe_ebpf::ProgramGroup;

use super::probe_config;
use crate::{
    config::{cli::CheckConfigArgs, options::RunArgs, RunConfig},
    error::Result,
    probe::Probe,
};

/// `sonic-probe check-config`: the file checked as `run --config FILE`
/// would read it; with --attach the programs loaded and attached too.
pub fn check_config(args: &CheckConfigArgs) -> Result<()> {
    let cli = RunArgs { config: Some(args.config.clone()), ..RunArgs::default() };
    let config = RunConfig::load(&cli, None)?;
    println!(
        "config {}: OK: watching {}, listening on {} ({})",
        args.config.display(),
        config.targets.describe(),
        config.listen,
        config.web.describe(),
    );
    if args.attach {
        crate::probe::privileges::check()?;
        let mut probe = Probe::load(config.ringbuf_bytes, config.btf.as_deref())?;
        println!("{}", probe.describe_kernel());
        probe.set_config(&probe_config(&config))?;
        probe.take_targets()?.apply(&config.targets)?;
        probe.attach(ProgramGroup::Lifecycle)?;
        probe.attach(ProgramGroup::Syscalls)?;
        if config.thread_time {
            probe.attach(ProgramGroup::Scheduler)?;
        }
        let n = probe.attached().len();
        drop(probe);
        println!("attached {n} BPF programs and detached them: OK");
    }
    Ok(())
}
