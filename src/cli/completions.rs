//! `skillbox completions SHELL` and `skillbox man`: a completion script and the man page,
//! generated from the clap definitions at run time, so they can never describe flags the
//! binary does not have.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::Cli;
use super::exit::{Exit, Failure};

/// Arguments of `skillbox completions`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Print the completion script for `args.shell` on stdout.
pub fn completions(args: &CompletionsArgs) -> Result<Exit, Failure> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "skillbox", &mut out);
    print!("{}", String::from_utf8_lossy(&out));
    Ok(Exit::Ok)
}

/// Arguments of `skillbox man`.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// A command: print its own page, skillbox-COMMAND(1), with all its flags [default: the
    /// top-level page skillbox(1), which lists every command].
    pub command: Option<String>,
}

/// Print skillbox(1), or skillbox-COMMAND(1), as roff on stdout.
pub fn man(args: &ManArgs) -> Result<Exit, Failure> {
    let mut cmd = Cli::command();
    cmd.build();
    let page = match &args.command {
        None => cmd,
        Some(name) => {
            let sub = cmd
                .find_subcommand(name)
                .filter(|s| !s.is_hide_set())
                .ok_or_else(|| {
                    Failure::usage(format!("no command {name:?}; `skillbox --help` lists them"))
                })?;
            let full = format!("skillbox-{}", sub.get_name());
            sub.clone()
                .name(full.clone())
                .bin_name(full.replacen('-', " ", 1))
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .map_err(|e| Failure::operational(format!("cannot render the man page: {e}")))?;
    print!("{}", String::from_utf8_lossy(&out));
    Ok(Exit::Ok)
}
