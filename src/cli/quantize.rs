//! `mixprec quantize`: rounds a stream of numbers, one a line, from standard input.

use std::io::{BufReader, Write};
use std::process::ExitCode;

use super::round_args::{OptionArgs, Target};
use mixprec::flags::{parse, whole};
use mixprec::format::{BlockRounder, Rounder};
use mixprec::quantize::{BATCH_BYTES, MAX_BATCH, quantize, quantize_blocks};

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
    #[arg(long, short = 'f', value_name = "F", default_value = "fp16", value_parser = parse::<Target>)]
    format: Target,
    #[command(flatten)]
    options: OptionArgs,
    /// Block formats: values per row of a batch (default: the block's width, 32 for MX, 16 for
    /// NVFP4, C for a tile).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = batch_side)]
    cols: Option<u64>,
    /// Block formats: rows per batch (default: the block's height, 1, or R for a tile).
    #[arg(long, value_name = "M", allow_negative_numbers = true, value_parser = batch_side)]
    rows: Option<u64>,
    /// What to print for each value: the rounded value, or the format's bit pattern in hex.
    #[arg(long, value_name = "value|bits", default_value = "value", value_parser = ["value", "bits"])]
    output: String,
}

/// `--cols` and `--rows`: a whole number from 1 to [`MAX_BATCH`].
fn batch_side(s: &str) -> Result<u64, String> {
    whole::<u64>(s)
        .ok()
        .filter(|n| (1..=MAX_BATCH as u64).contains(n))
        .ok_or_else(|| format!("expected a whole number from 1 to {MAX_BATCH}"))
}

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
