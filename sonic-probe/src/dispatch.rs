//! The one place where a parsed command line becomes a command's run and
//! its result an exit code. It sits on top of every command (`config/cli.rs` only
//! describes the arguments), so nothing imports it but `main.rs`.

use std::process::ExitCode;

use clap::Parser;

use crate::{
    config::cli::{Cli, Command},
    logging::{init_logging, one_line},
};

/// Parses the command line, runs the command, and returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    if !matches!(cli.command, Command::Run(_)) {
        if let Err(e) = init_logging(cli.log_level.as_deref().unwrap_or("info")) {
            eprintln!("sonic-probe: error: {}", one_line(&e));
            return e.exit_code();
        }
    }
    let result = match cli.command {
        // run reads its log level from the config file too.
        Command::Run(args) => crate::run::run(args, cli.log_level).map(|()| ExitCode::SUCCESS),
        Command::Trace(args) => crate::trace::run(args),
        Command::CheckConfig(args) => crate::run::check_config(&args).map(|()| ExitCode::SUCCESS),
        Command::Findings(args) => {
            let options = args.connection.client_options();
            crate::client::run(&args.connection.url, &options, args.json, args.stacks)
                .map(|()| ExitCode::SUCCESS)
        }
        Command::Top(args) => crate::top::run(&args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sonic-probe: error: {}", one_line(&e));
            e.exit_code()
        }
    }
}

/// Help and version go out whole; a bad argument is one line (clap's first),
/// exit code 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind::*;
    match e.kind() {
        DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
        }
        _ => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("error: bad arguments");
            eprintln!("sonic-probe: {first} (see --help)");
        }
    }
    ExitCode::from(e.exit_code() as u8)
}
