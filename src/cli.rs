//! The command-line interface: one file per command, each with a clap `Args` struct and a `run`
//! function that writes to the given output.

mod analyze;
mod demo;
mod explain;
mod formats;
mod grid;
mod plan;
mod quantize;
mod replay;
mod report;
mod round_args;
mod tensorboard;
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
    Demo(demo::Args),
    Formats(formats::Args),
    Explain(explain::Args),
    Quantize(quantize::Args),
    Analyze(analyze::Args),
    Train(train::Args),
    Grid(grid::Args),
    Plan(plan::Args),
    Report(report::Args),
    Replay(replay::Args),
    ExportTensorboard(tensorboard::Args),
}

/// Parses `args` (with the program name first), runs the command and returns its exit code.
///
/// `--help` and `--version` print and return success; a usage error is an error (exit code 2
/// in the binary), reported in one line. `stdout_closed` says that standard output was closed
/// when the process started (`mixprec ... >&-`): the command is refused, since everything it
/// printed would be lost.
///
/// # Errors
/// Whatever the command reports: bad input, unreadable files, failed writes.
pub fn main<I, T>(args: I, stdout_closed: bool) -> anyhow::Result<ExitCode>
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
    if stdout_closed {
        anyhow::bail!(
            "standard output is closed (>&-): its output would be lost; redirect it to /dev/null to discard it"
        );
    }
    let stdout = std::io::stdout();
    let mut out = Stdout {
        inner: std::io::BufWriter::new(stdout.lock()),
        failed: false,
    };
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args, &mut out),
        Command::Formats(args) => formats::run(&args, &mut out),
        Command::Explain(args) => explain::run(&args, &mut out),
        Command::Quantize(args) => quantize::run(&args, &mut out),
        Command::Analyze(args) => analyze::run(&args, &mut out),
        Command::Train(args) => train::run(&args, &mut out),
        Command::Grid(args) => grid::run(&args, &mut out),
        Command::Plan(args) => plan::run(&args, &mut out),
        Command::Report(args) => report::run(&args, &mut out),
        Command::Replay(args) => replay::run(&args, &mut out),
        Command::ExportTensorboard(args) => tensorboard::run(&args, &mut out),
    }
    .and_then(|code| {
        out.flush()?;
        Ok(code)
    });
    match result {
        // Name standard output when writing it failed (a full disk, a closed pipe), unless the
        // message already does.
        Err(e) if out.failed && !e.to_string().contains("standard output") => {
            Err(e.context("standard output"))
        }
        other => other,
    }
}

/// A progress bar of `len` `unit`s on standard error, drawn only when it is a terminal (hidden
/// when piped or redirected).
fn progress_bar(len: u64, unit: &str) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let template = format!("{{bar:30}} {{pos}}/{{len}} {unit}  {{msg}}  [{{elapsed}} < {{eta}}]");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}

/// Standard output, remembering whether a write to it failed, so that the error can name it.
struct Stdout<W: Write> {
    inner: W,
    failed: bool,
}

impl<W: Write> Write for Stdout<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let r = self.inner.write(buf);
        self.failed |= r.is_err();
        r
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let r = self.inner.flush();
        self.failed |= r.is_err();
        r
    }
}
