//! `skillbox doctor`: run real confined children to prove confinement works on this host
//! (Landlock, seccomp, the uid switch, the limits, both start paths), and print the report.
//!
//! Exit codes (see [`Exit`]): 0 when confinement works, 1 when it would fail.

use clap::Args;

use skillbox::sandbox::doctor;

use super::exit::Exit;
use super::sandbox::SandboxArgs;

/// `skillbox doctor` options.
#[derive(Args, Debug)]
// The doctor always asks for full enforcement, so `--allow-unconfined` changes nothing here:
// still accepted (scripts pass the same flags to every command), but not offered in the help.
#[command(mut_arg("allow_unconfined", |a| a.hide(true)))]
pub struct DoctorArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// The confinement to check (`--allow-unconfined` is accepted and changes nothing: the
    /// doctor always asks for full enforcement).
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Run the doctor and print its report. Exit status 0 when confinement works, 1 when it would
/// fail.
pub fn run(sandbox: &SandboxArgs, args: &DoctorArgs) -> Exit {
    let report = doctor::run_for_both_paths(sandbox.config());
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("skillbox: {e}");
                return Exit::Operational;
            }
        }
    } else {
        print!("{}", report.render());
    }
    if report.ok {
        Exit::Ok
    } else {
        Exit::Operational
    }
}
