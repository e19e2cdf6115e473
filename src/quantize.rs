//! Rounding a stream of numbers, one a line (what `mixprec quantize` runs on standard input):
//! each line parsed as the nearest binary64 value (or f32, for block formats), rounded exactly,
//! and written as the shortest decimal that parses back to the result, or as its bit pattern.
//! Memory does not grow with the input; lines are rounded in parallel and written in order.

use std::io::{BufReader, Read, Write};

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
    let batch_len = rows * cols;
    let mut values: Vec<f32> = Vec::with_capacity(batch_len.min(1 << 20));
    let mut line = Vec::with_capacity(64);
    let mut line_no = 0u64;
    let mut start = 0u64;
    let mut error = None;
    loop {
        line.clear();
        let (n, too_long) = read_line(input, &mut line)?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if too_long {
            error = Some(Error::LineTooLong {
                line: line_no,
                limit: MAX_LINE,
            });
            break;
        }
        let mut text = line.strip_suffix(b"\n").unwrap_or(&line);
        if line_no == 1 {
            text = strip_bom(text);
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
    out.write_all(&text).map_err(stdout_error)?;
    out.flush().map_err(stdout_error)
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
    let mut batch = Vec::with_capacity(BATCH_BYTES + MAX_LINE + 1);
    let mut first_line = 1u64;
    let mut too_long = None;
    loop {
        batch.clear();
        let mut lines = 0u64;
        while batch.len() < BATCH_BYTES {
            let start = batch.len();
            let (n, too_long_line) = read_line(input, &mut batch)?;
            if too_long_line {
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
            text = strip_bom(text);
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
            out.write_all(&text).map_err(stdout_error)?;
            if let Some(e) = error {
                return Err(e);
            }
        }
        out.flush().map_err(stdout_error)?;
        first_line += lines.len() as u64;
        if let Some(e) = too_long {
            return Err(e);
        }
    }
}

/// The next line of standard input into `buf`, capped at [`MAX_LINE`] (see
/// [`crate::io::read_line`]).
fn read_line<R: Read>(input: &mut BufReader<R>, buf: &mut Vec<u8>) -> crate::Result<(usize, bool)> {
    crate::io::read_line(input, buf, MAX_LINE).map_err(|source| Error::io("standard input", source))
}

/// The first line without its byte-order mark, which is not part of the first number.
#[must_use]
fn strip_bom(text: &[u8]) -> &[u8] {
    text.strip_prefix(b"\xef\xbb\xbf").unwrap_or(text)
}

/// Writing the results failed.
fn stdout_error(source: std::io::Error) -> Error {
    Error::io("standard output", source)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{FP16, RoundOptions};

    /// Line 1 holds `MAX_LINE` bytes before its newline (accepted); line 2 one byte more.
    fn input() -> Vec<u8> {
        let line = |digit: u8, len: usize| [vec![b'0'; len - 2], vec![digit, b'\n']].concat();
        [line(b'1', MAX_LINE + 1), line(b'2', MAX_LINE + 2)].concat()
    }

    /// Both paths (element and block) on `text`: each one's result and what it wrote.
    fn both(text: &[u8]) -> Vec<(crate::Result<()>, Vec<u8>)> {
        let rounder = Rounder::new(FP16, RoundOptions::default());
        let blocks = BlockRounder::new("mxfp8-e4m3".parse().unwrap(), RoundOptions::default());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let ea = quantize(&rounder, false, &mut BufReader::new(text), &mut a);
        let eb = quantize_blocks(&blocks, 1, 4, &mut BufReader::new(text), &mut b);
        vec![(ea, a), (eb, b)]
    }

    #[test]
    fn a_line_over_the_limit_is_an_error_after_the_lines_before() {
        for (e, out) in both(&input()) {
            let too_long =
                matches!(e, Err(Error::LineTooLong { line: 2, limit }) if limit == MAX_LINE);
            assert!(too_long, "{e:?}");
            assert_eq!(out, b"1\n");
        }
    }

    #[test]
    fn a_byte_order_mark_starts_only_the_first_line() {
        for (e, out) in both(b"\xef\xbb\xbf1\n\xef\xbb\xbf2\n") {
            assert!(matches!(e, Err(Error::NotANumber { line: 2, .. })), "{e:?}");
            assert_eq!(out, b"1\n");
        }
    }
}
