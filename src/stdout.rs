//! Standard output of the binary side, for the `print!`/`println!` macros `main.rs` defines:
//! a reader that went away ends the command the way it ends a Unix tool (killed by SIGPIPE),
//! never with a panic; any other write error is reported once and exits 1.

use std::io::Write;

/// Write `args` (and a newline) to stdout.
pub fn write(args: std::fmt::Arguments<'_>, newline: bool) {
    let mut out = std::io::stdout().lock();
    let result = out.write_fmt(args).and_then(|()| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    match result {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            // Only now, with nothing left to do, let SIGPIPE take its default course.
            skillbox::sandbox::die_of_sigpipe();
        }
        Err(e) => {
            // Said on stderr if it can be: std's `eprintln!` would panic were it gone too.
            crate::cli::stderr_write(
                format_args!("skillbox: cannot write to standard output: {e}"),
                true,
            );
            std::process::exit(1);
        }
    }
}
