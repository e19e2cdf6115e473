//! `mixprec quantize`: rounds a stream of numbers, one a line, from standard input.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::ExitCode;

use rayon::prelude::*;

use super::round_args::{OptionArgs, Target, parse_target};
use crate::error::Error;
use crate::format::{BlockRounder, Rounder};

/// Round numbers read from standard input, one a line, and print one result a line.
///
/// Input: decimal or scientific notation, nan, inf, -inf (any case, surrounding spaces allowed).
/// A decimal is read as the nearest binary64 value (as every float parser does), which is then
/// rounded once, exactly, into the format.
/// Output: the rounded value as the shortest decimal that parses back to exactly that binary64
/// value (NaN, inf, -inf, and -0 for negative zero), or with --output bits the format's bit
/// pattern in hex. Streams: memory use does not grow with the input.
///
/// Block formats (mxfp8-e4m3, nvfp4, fp8-e4m3@1x128, ...) read each value as the nearest f32 and
/// round the stream in batches of --rows rows of --cols values (a row-major matrix; NVFP4's
/// tensor scale is the batch's), printing each batch when it is full and the last, partial one
/// at the end of the input; their results are f32 values.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Target format: an element format, fp32, tf32, fp16, bf16, fp8-e4m3 (alias e4m3fn: OCP,
    /// no infinities, max 448), fp8-e5m2 (IEEE-like, max 57344), fp6-e2m3, fp6-e3m2, fp4-e2m1
    /// (OCP MX elements: no infinities or NaN, saturating; max 7.5, 28, 6), or eXmY (IEEE-like;
    /// e4m3 has max 240 and is not fp8-e4m3, e2m1 has max 3 and is not fp4-e2m1); or a block
    /// format, whose elements always saturate: mxfp8-e4m3, mxfp8-e5m2, mxfp6-e2m3, mxfp6-e3m2,
    /// mxfp4 (OCP MX: 32 values share a power-of-two scale), nvfp4 (16 fp4-e2m1 values share an
    /// e4m3 scale, under an fp32 scale per batch), or ELEMENT@RxC (tiles of R rows by C columns
    /// with an fp32 scale amax/max: fp8-e4m3@1x128, fp8-e4m3@128x128).
    #[arg(long, short = 'f', value_name = "F", default_value = "fp16", value_parser = parse_target)]
    format: Target,
    #[command(flatten)]
    options: OptionArgs,
    /// Block formats: values per row of a batch (default: the block's width, 32 for MX, 16 for
    /// NVFP4, C for a tile).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_BATCH as u64))]
    cols: Option<u64>,
    /// Block formats: rows per batch (default: the block's height, 1, or R for a tile).
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u64).range(1..=MAX_BATCH as u64))]
    rows: Option<u64>,
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

/// The most values a block format's batch (--rows x --cols) may hold: 2^26, 256 MiB of f32.
pub const MAX_BATCH: usize = 1 << 26;

pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let stdin = std::io::stdin();
    let mut input = BufReader::with_capacity(BATCH_BYTES, stdin.lock());
    let options = args.options.options();
    match args.format {
        Target::Element(format) => {
            if args.cols.is_some() || args.rows.is_some() {
                anyhow::bail!(
                    "--cols and --rows are for block formats (mxfp8-e4m3, nvfp4, \
                     fp8-e4m3@1x128, ...): {format} rounds each value on its own"
                );
            }
            let rounder = Rounder::new(format, options);
            quantize(&rounder, args.output == "bits", &mut input, out)?;
        }
        Target::Block(format) => {
            if args.output == "bits" {
                anyhow::bail!(
                    "--output bits is for element formats: the stored form of {format} is \
                     element bits plus scales; print the rounded values (--output value)"
                );
            }
            let (r, c) = format.block_shape();
            let cols = args.cols.map_or(c, |n| n as usize);
            let rows = args.rows.map_or(r, |n| n as usize);
            if rows.saturating_mul(cols) > MAX_BATCH {
                anyhow::bail!(
                    "--rows {rows} x --cols {cols} is more than {MAX_BATCH} values per batch"
                );
            }
            let rounder = BlockRounder::new(format, options);
            quantize_blocks(&rounder, rows, cols, &mut input, out)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Rounds the stream of `input` into a block format in batches of `rows` x `cols` values (a
/// row-major matrix with `cols` columns; the last batch, at the end of the input, may be
/// partial, its last row short), writing one line per value.
///
/// Each value is read as the nearest f32; value `n` (from 0) is position `n` of the
/// stochastic stream. A batch is written when it is full, so a program that writes a line and
/// waits gets its answer only when the batch completes or the input ends.
///
/// # Errors
/// [`Error::NotANumber`] or [`Error::LineTooLong`] for the first line that is not a number
/// (the values before it are rounded as the last batch and written first); [`Error::Io`] if
/// reading or writing fails.
pub fn quantize_blocks<R: Read>(
    rounder: &BlockRounder,
    rows: usize,
    cols: usize,
    input: &mut BufReader<R>,
    out: &mut dyn Write,
) -> crate::Result<()> {
    let io_in = |source| Error::Io {
        path: "standard input".into(),
        source,
    };
    let batch_len = rows * cols;
    let mut values: Vec<f32> = Vec::with_capacity(batch_len.min(1 << 20));
    let mut line = Vec::with_capacity(64);
    let mut line_no = 0u64;
    let mut start = 0u64;
    let mut error = None;
    loop {
        line.clear();
        let n = (&mut *input)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(io_in)?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if n > MAX_LINE && line.last() != Some(&b'\n') {
            error = Some(Error::LineTooLong {
                line: line_no,
                limit: MAX_LINE,
            });
            break;
        }
        let mut text = line.strip_suffix(b"\n").unwrap_or(&line);
        if line_no == 1 {
            text = text.strip_prefix(b"\xef\xbb\xbf").unwrap_or(text);
        }
        let Some(x) = std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.trim().parse::<f32>().ok())
        else {
            error = Some(Error::NotANumber {
                line: line_no,
                text: shorten(text),
            });
            break;
        };
        values.push(x);
        if values.len() == batch_len {
            write_batch(rounder, &mut values, cols, &mut start, out)?;
        }
    }
    write_batch(rounder, &mut values, cols, &mut start, out)?;
    error.map_or(Ok(()), Err)
}

/// Rounds one batch (as positions `start..` of the stream), writes it, and empties it.
fn write_batch(
    rounder: &BlockRounder,
    values: &mut Vec<f32>,
    cols: usize,
    start: &mut u64,
    out: &mut dyn Write,
) -> crate::Result<()> {
    if values.is_empty() {
        return Ok(());
    }
    rounder.par_round_matrix_at(values, cols, *start);
    *start += values.len() as u64;
    let mut text = Vec::with_capacity(values.len() * 16);
    let mut buf = ryu::Buffer::new();
    for &v in values.iter() {
        text.extend_from_slice(format_value(f64::from(v), &mut buf).as_bytes());
        text.push(b'\n');
    }
    values.clear();
    let io = |source| Error::Io {
        path: "standard output".into(),
        source,
    };
    out.write_all(&text).map_err(io)?;
    out.flush().map_err(io)
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
