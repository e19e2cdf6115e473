//! Rounding a stream of numbers, one a line (what `mixprec quantize` runs on standard input):
//! each line parsed as the nearest binary64 value (or f32, for block formats), rounded exactly,
//! and written as the shortest decimal that parses back to the result, or as its bit pattern.
//! Memory does not grow with the input; lines are rounded in parallel and written in order.

use std::io::{BufRead, BufReader, Read, Write};

use rayon::prelude::*;

use crate::error::Error;
use crate::format::{BlockRounder, Rounder};

/// Bytes of input handled per batch (split across threads, written in order).
pub const BATCH_BYTES: usize = 1 << 20;
/// Lines per parallel task.
const LINES_PER_TASK: usize = 512;
/// The longest line accepted, in bytes: far more than any number needs (the exact decimal of the
/// smallest binary64 subnormal has 767 significant digits), and the bound on the memory a line
/// can take (`quantize </dev/zero` is an error at line 1, not an ever-growing buffer).
pub const MAX_LINE: usize = 1 << 16;

/// The most values a block format's batch (--rows x --cols) may hold: 2^26, 256 MiB of f32.
pub const MAX_BATCH: usize = 1 << 26;

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
        text.extend_from_slice(crate::text::shortest(f64::from(v), &mut buf).as_bytes());
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
            out.extend_from_slice(crate::text::shortest(r, &mut buf).as_bytes());
            out.push(b'\n');
        }
    }
    (out, None)
}

fn parse(text: &[u8]) -> Option<f64> {
    std::str::from_utf8(text).ok()?.trim().parse().ok()
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
