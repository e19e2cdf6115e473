//! The command-line interface: one file per command, each with a clap `Args` struct and a `run`
//! function that writes to the given output.

mod analyze;
mod explain;
mod formats;
mod quantize;
mod report;
mod round_args;
mod train;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

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
    Explain(explain::Args),
    Quantize(quantize::Args),
    Analyze(analyze::Args),
    Train(train::Args),
    Report(report::Args),
}

/// Parses `args` (with the program name first), runs the command and returns its exit code.
///
/// `--help` and `--version` print and return success; a usage error is an error (exit code 2
/// in the binary), reported in one line.
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
        Err(e) if !e.use_stderr() => {
            // --help and --version
            let _ = e.print();
            return Ok(ExitCode::SUCCESS);
        }
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::MissingSubcommand
                    | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            let names: Vec<String> = Cli::command()
                .get_subcommands()
                .map(|c| c.get_name().to_string())
                .filter(|n| n != "help")
                .collect();
            anyhow::bail!("missing command: one of {} (see --help)", names.join(", "));
        }
        Err(e) => {
            // One line that names the problem; clap's hints and usage follow in its own text.
            let text = e.to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.is_empty() && !l.starts_with("Usage:"))
                .map(str::trim)
                .collect();
            let message = message.join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            anyhow::bail!("{message} (see --help)");
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let code = match cli.command {
        Command::Formats(args) => formats::run(&args, &mut out)?,
        Command::Explain(args) => explain::run(&args, &mut out)?,
        Command::Quantize(args) => quantize::run(&args, &mut out)?,
        Command::Analyze(args) => analyze::run(&args, &mut out)?,
        Command::Train(args) => train::run(&args, &mut out)?,
        Command::Report(args) => report::run(&args, &mut out)?,
    };
    out.flush()?;
    Ok(code)
}
