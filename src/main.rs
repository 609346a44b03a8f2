//! The `skillbox` command line: parse the arguments and dispatch to the command in [`cli`].
//! Exit codes are a contract, defined once in [`cli::exit`].

/// `print!` and `println!` for every command, shadowing std's: writing to a reader that went
/// away (`skillbox replay corpus/ | head`) ends the command quietly, as Unix tools do, where
/// std's macros panic on EPIPE. SIGPIPE itself stays ignored: the CLI writes into its confined
/// children's pipes, and a child that dies early must be an error it reports, not a signal
/// that kills it silently. Defined before `mod cli` so the whole binary side uses them.
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!($($arg)*), false)
    };
}
macro_rules! println {
    () => {
        $crate::stdout::write(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!($($arg)*), true)
    };
}

mod cli;
mod stdout;

use std::ffi::OsStr;
use std::process::ExitCode;

use clap::Parser;

use cli::exit::finish;
use cli::{Cli, Command};

fn main() -> ExitCode {
    // The confined child starts here, before clap: the less code runs ahead of confine(), the
    // better, and a fresh process per request pays for every microsecond of start-up.
    let first = std::env::args_os().nth(1);
    if first.as_deref() == Some(OsStr::new(skillbox::sandbox::CHILD_SUBCOMMAND)) {
        skillbox::sandbox::child::run();
    }
    if first.as_deref() == Some(OsStr::new(skillbox::sandbox::ZYGOTE_SUBCOMMAND)) {
        std::process::exit(skillbox::sandbox::zygote::main());
    }
    // `extract` starts its confined child now, so the child's start overlaps the parsing below.
    let ahead = cli::extract::start_child_ahead();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return cli::exit::usage_error(&e),
    };
    let leading = &cli.leading;
    match cli.command {
        Command::SandboxChild => skillbox::sandbox::child::run(),
        Command::Doctor(args) => cli::doctor::run(&leading.merge(&args.sandbox), &args).into(),
        Command::Extract(args) => {
            let json = args.json;
            let sandbox = leading.merge(&args.sandbox);
            finish(cli::extract::run(args, &sandbox, ahead), json)
        }
        Command::Index(args) => cli::index::run(args).into(),
        Command::Cache(args) => cli::cache::run(args).into(),
        Command::Fetch(args) => {
            let sandbox = leading.merge(&args.sandbox);
            cli::fetch::run(args, &|artifact, staging, req| {
                cli::sandbox::extract(&sandbox, artifact, staging, req, None)
            })
            .into()
        }
        Command::Diff(args) => finish(cli::diff::run(&args), args.json),
        Command::Publish(args) => {
            let sandbox = leading.merge(&args.sandbox);
            cli::publish::run(&args, &sandbox).into()
        }
        Command::Replay(args) => cli::replay::run(args).into(),
        Command::Serve(args) => cli::serve::run(&args, leading).into(),
        Command::Health(args) => cli::serve::health(&args).into(),
        Command::Lifecycle(c) => ExitCode::from(cli::lifecycle::run(c, leading)),
        Command::Completions(args) => finish(cli::completions::completions(&args), false),
        Command::Man(args) => finish(cli::completions::man(&args), false),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        super::Cli::command().debug_assert();
    }

    /// `serve` is configured from the environment in containers: every flag it lists has its
    /// `SKILLBOX_*` variable, as its help and docs/broker.md promise.
    #[test]
    fn every_serve_flag_has_its_variable() {
        use clap::CommandFactory as _;
        let mut cli = super::Cli::command();
        cli.build();
        let serve = cli
            .find_subcommand("serve")
            .unwrap_or_else(|| panic!("no serve"));
        let mut missing = Vec::new();
        for arg in serve.get_arguments() {
            if arg.is_hide_set() || arg.get_long() == Some("help") {
                continue;
            }
            match arg.get_env().and_then(|e| e.to_str()) {
                Some(var) if var.starts_with("SKILLBOX_") => {}
                _ => missing.push(arg.get_id().to_string()),
            }
        }
        assert!(
            missing.is_empty(),
            "serve flags without a variable: {missing:?}"
        );
    }
}
