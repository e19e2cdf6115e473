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
}

pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let text = explain_value(&args.value, &args.round.rounder())?;
    out.write_all(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
