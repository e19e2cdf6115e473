//! `mixprec quantize`: rounds a stream of numbers, one a line, from standard input.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::ExitCode;

use rayon::prelude::*;

use super::round_args::RoundArgs;
use crate::error::Error;
use crate::format::Rounder;

/// Round numbers read from standard input, one a line, and print one result a line.
///
/// Input: decimal or scientific notation, nan, inf, -inf (any case, surrounding spaces allowed).
/// A decimal is read as the nearest binary64 value (as every float parser does), which is then
/// rounded once, exactly, into the format.
/// Output: the rounded value as the shortest decimal that parses back to exactly that binary64
/// value (NaN, inf, -inf, and -0 for negative zero), or with --output bits the format's bit
/// pattern in hex. Streams: memory use does not grow with the input.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    round: RoundArgs,
    /// What to print for each value: the rounded value, or the format's bit pattern in hex.
    #[arg(long, value_name = "value|bits", default_value = "value", value_parser = ["value", "bits"])]
    output: String,
}

/// Bytes of input handled per batch (split across threads, written in order).
const BATCH_BYTES: usize = 1 << 20;
/// Lines per parallel task.
const LINES_PER_TASK: usize = 512;
/// The longest line accepted, in bytes: far more than any number needs (the exact decimal of the
/// smallest binary64 subnormal has 767 significant digits), and the bound on the memory a line
/// can take (`quantize </dev/zero` is an error at line 1, not an ever-growing buffer).
pub const MAX_LINE: usize = 1 << 16;

pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let stdin = std::io::stdin();
    let mut input = BufReader::with_capacity(BATCH_BYTES, stdin.lock());
    quantize(
        &args.round.rounder(),
        args.output == "bits",
        &mut input,
        out,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Rounds every line of `input` and writes one line per value to `out`.
///
/// Lines are handled in batches of up to 1 MiB; a batch ends early when no more input is waiting,
/// and `out` is flushed after each one, so a program that writes a line and waits gets its answer.
///
/// # Errors
/// [`Error::NotANumber`] for the first line that does not parse, [`Error::LineTooLong`] for the
/// first line longer than [`MAX_LINE`] bytes (the lines before either have been written);
/// [`Error::Io`] if reading or writing fails.
pub fn quantize<R: Read>(
    rounder: &Rounder,
    bits: bool,
    input: &mut BufReader<R>,
    out: &mut dyn Write,
) -> crate::Result<()> {
    let io_in = |source| Error::Io {
        path: "standard input".into(),
        source,
    };
    let io = |source| Error::Io {
        path: "standard output".into(),
        source,
    };
    let mut batch = Vec::with_capacity(BATCH_BYTES + MAX_LINE + 1);
    let mut first_line = 1u64;
    let mut too_long = None;
    loop {
        batch.clear();
        let mut lines = 0u64;
        while batch.len() < BATCH_BYTES {
            let start = batch.len();
            let n = (&mut *input)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut batch)
                .map_err(io_in)?;
            if n > MAX_LINE && batch.last() != Some(&b'\n') {
                batch.truncate(start);
                too_long = Some(Error::LineTooLong {
                    line: first_line + lines,
                    limit: MAX_LINE,
                });
                break;
            }
            lines += 1;
            if n == 0 || input.buffer().is_empty() {
                break;
            }
        }
        if batch.is_empty() {
            return too_long.map_or(Ok(()), Err);
        }
        let mut text = batch.strip_suffix(b"\n").unwrap_or(&batch);
        if first_line == 1 {
            // A byte-order mark is not part of the first number.
            text = text.strip_prefix(b"\xef\xbb\xbf").unwrap_or(text);
        }
        let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
        let rendered: Vec<(Vec<u8>, Option<Error>)> = lines
            .par_chunks(LINES_PER_TASK)
            .enumerate()
            .map(|(task, chunk)| {
                let line0 = first_line + (task * LINES_PER_TASK) as u64;
                render(rounder, bits, chunk, line0)
            })
            .collect();
        for (text, error) in rendered {
            out.write_all(&text).map_err(io)?;
            if let Some(e) = error {
                return Err(e);
            }
        }
        out.flush().map_err(io)?;
        first_line += lines.len() as u64;
        if let Some(e) = too_long {
            return Err(e);
        }
    }
}

/// Parses, rounds and formats consecutive lines, the first of which is line `line0`, up to the
/// first line that is not a number.
fn render(rounder: &Rounder, bits: bool, lines: &[&[u8]], line0: u64) -> (Vec<u8>, Option<Error>) {
    let mut out = Vec::with_capacity(lines.len() * 24);
    let mut buf = ryu::Buffer::new();
    let width = rounder.format().total_bits().div_ceil(4) as usize;
    for (line, text) in (line0..).zip(lines) {
        let Some(x) = parse(text) else {
            let error = Error::NotANumber {
                line,
                text: shorten(text),
            };
            return (out, Some(error));
        };
        // The stream position of line n is n - 1.
        let (r, _) = rounder.round_at(x, line - 1);
        if bits {
            // Every rounded value has a pattern, except NaN in formats without NaN.
            let Some(pattern) = rounder.format().encode(r) else {
                let format = rounder.format().name();
                return (out, Some(Error::NoNanPattern { line, format }));
            };
            let _ = writeln!(out, "0x{pattern:0width$x}");
        } else {
            out.extend_from_slice(format_value(r, &mut buf).as_bytes());
            out.push(b'\n');
        }
    }
    (out, None)
}

fn parse(text: &[u8]) -> Option<f64> {
    std::str::from_utf8(text).ok()?.trim().parse().ok()
}

/// The shortest decimal that parses back to exactly `x`; `NaN`, `inf`, `-inf`, `0`, `-0`, and
/// integers without a trailing `.0`.
pub(crate) fn format_value(x: f64, buf: &mut ryu::Buffer) -> &str {
    if x.is_nan() {
        "NaN"
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }
    } else if x == 0.0 {
        if x.is_sign_negative() { "-0" } else { "0" }
    } else {
        let s = buf.format_finite(x);
        s.strip_suffix(".0").unwrap_or(s)
    }
}

/// The offending text for an error message: trimmed, invisible characters escaped, at most 40
/// characters.
fn shorten(text: &[u8]) -> String {
    let s = String::from_utf8_lossy(text);
    let s: String = s.trim().escape_debug().collect();
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}
