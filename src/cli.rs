//! The command-line interface: one file per command, each with a clap `Args` struct and a `run`
//! function that writes to the given output.

mod analyze;
mod formats;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Top-level arguments.
#[derive(Debug, Parser)]
#[command(
    name = "mixprec",
    version,
    about = "The numerics of mixed-precision training: number formats, rounding, loss scaling",
    long_about = "mixprec rounds values into low-precision formats exactly as hardware does and \
                  measures what mixed-precision training loses to underflow, overflow and rounding."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Formats(formats::Args),
    Analyze(analyze::Args),
}

/// Parses `args` (with the program name first), runs the command and returns its exit code.
///
/// `--help` and `--version` print and return success; a usage error prints clap's message and
/// returns exit code 2.
///
/// # Errors
/// Whatever the command reports: bad input, unreadable files, failed writes.
pub fn main<I, T>(args: I) -> anyhow::Result<ExitCode>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return Ok(ExitCode::from(code));
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let code = match cli.command {
        Command::Formats(args) => formats::run(&args, &mut out)?,
        Command::Analyze(args) => analyze::run(&args, &mut out)?,
    };
    out.flush()?;
    Ok(code)
}
