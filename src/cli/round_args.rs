//! The rounding flags that `explain` and `quantize` share.

use mixprec::flags::{parse, whole};
use mixprec::format::{FloatFormat, Overflow, RoundOptions, Rounder, Rounding};

/// Format and rounding options, as flags.
#[derive(Debug, clap::Args)]
pub struct RoundArgs {
    /// Target format: fp32, tf32, fp16, bf16, fp8-e4m3 (alias e4m3fn: OCP, no infinities, max
    /// 448), fp8-e5m2 (IEEE-like, max 57344), fp6-e2m3, fp6-e3m2, fp4-e2m1 (OCP MX elements: no
    /// infinities or NaN, saturating; max 7.5, 28, 6), or eXmY (IEEE-like; e4m3 has max 240 and
    /// is not fp8-e4m3, e2m1 has max 3 and is not fp4-e2m1).
    #[arg(long, short = 'f', value_name = "F", default_value = "fp16", value_parser = parse::<FloatFormat>)]
    pub format: FloatFormat,
    #[command(flatten)]
    pub options: OptionArgs,
}

/// The rounding options besides the format, as flags.
#[derive(Debug, clap::Args)]
pub struct OptionArgs {
    // The help lists the modes from their table.
    #[arg(long, short = 'r', value_name = "R", default_value = "nearest-even", value_parser = parse::<Rounding>,
          help = format!("Rounding mode: {}", Rounding::NAMES))]
    pub rounding: Rounding,
    /// Overflow rule: ieee (infinity, NaN for fp8-e4m3, +-max for fp6/fp4; directed roundings
    /// toward zero give the largest finite value) or saturate (always clamp to +-max).
    #[arg(long, value_name = "RULE", default_value = "ieee", value_parser = parse::<Overflow>)]
    pub overflow: Overflow,
    /// Subnormal results: on, or off (flush results below the smallest normal to zero).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub subnormals: bool,
    /// Seed of the stochastic-rounding stream (the n-th value uses position n of the stream).
    #[arg(long, value_name = "N", default_value_t = 0, allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub seed: u64,
}

impl OptionArgs {
    /// The rounding options these flags describe.
    #[must_use]
    pub fn options(&self) -> RoundOptions {
        RoundOptions {
            rounding: self.rounding,
            overflow: self.overflow,
            subnormals: self.subnormals,
            seed: self.seed,
        }
    }
}

impl RoundArgs {
    /// The rounder these flags describe.
    #[must_use]
    pub fn rounder(&self) -> Rounder {
        Rounder::new(self.format, self.options.options())
    }
}

pub use mixprec::format::Target;

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        // clap puts the value and the flag before this.
        _ => Err("expected on or off".to_string()),
    }
}
