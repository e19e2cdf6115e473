//! `mixprec explain`: how one value is stored in a format, field by field.

use std::io::Write;
use std::process::ExitCode;

use super::round_args::RoundArgs;
use mixprec::format::explain::explain_value;

/// Show how a value is stored in a format: its bits, sign, exponent and mantissa, the two
/// neighbouring representable values, the rounding error (and whether a tie decided it), and
/// whether the result is normal, subnormal, underflowed to zero or overflowed. A bit pattern
/// (0x3c00, 0b0011110000000000) is decoded in the format instead.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The value: a decimal or scientific number, inf, -inf or nan; or a bit pattern of the
    /// format, in hexadecimal (0x3c00) or binary (0b...).
    #[arg(value_name = "VALUE", allow_hyphen_values = true)]
    value: String,
    #[command(flatten)]
    round: RoundArgs,
    /// Print the explanation as one JSON object (the keys of Python's `mixprec.explain`):
    /// numbers as JSON numbers where finite, "inf", "-inf" and "nan" otherwise.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let explanation = explain_value(&args.value, &args.round.rounder())?;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &explanation)?;
        writeln!(out)?;
    } else {
        write!(out, "{explanation}")?;
    }
    Ok(ExitCode::SUCCESS)
}
