//! `mixprec formats`: the properties of number formats, as a table or JSON.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use mixprec::format::{BlockFormat, FloatFormat, split_targets};

/// List number formats and their properties.
///
/// Formats: fp32, tf32, fp16, bf16, fp8-e4m3 (alias e4m3fn: OCP FP8 E4M3, bias 7, no infinities,
/// NaN only at exponent and mantissa all ones, max 448), fp8-e5m2 (IEEE-like, max 57344), the OCP
/// MX elements fp6-e2m3 (max 7.5), fp6-e3m2 (max 28) and fp4-e2m1 (max 6), which have neither
/// infinities nor NaN (out-of-range values saturate; a NaN input stays NaN in the simulation),
/// and any eXmY (X exponent bits 2..=8, Y mantissa bits 1..=23), always IEEE-like: note that
/// e4m3 (IEEE-like, max 240) is not fp8-e4m3 (OCP, max 448), nor e2m1 (max 3) fp4-e2m1 (max 6).
///
/// Block-scaled formats follow in a second table (in --json, after the element formats, with
/// their own keys): mxfp8-e4m3, mxfp8-e5m2, mxfp6-e2m3, mxfp6-e3m2, mxfp4 (OCP MX: 32 values
/// share an e8m0 power-of-two scale), nvfp4 (16 fp4-e2m1 values share an e4m3 scale, under an
/// fp32 scale per tensor) and tiles ELEMENT@RxC with an fp32 scale per tile (fp8-e4m3@1x128,
/// fp8-e4m3@128x128 as DeepSeek-V3 trains).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Formats to show, element or block formats (default: the presets of both).
    #[arg(value_name = "NAME")]
    names: Vec<String>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// Also draw teaching figures into DIR (created if needed): number-line (every value of the
    /// formats of 8 bits or fewer), ranges (the formats side by side on a log2 axis, with where
    /// one run's gradients live) and spacing (the ulp against magnitude), each .png and .svg.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
    /// With --plots: take the gradient band from this run directory's captured gradients
    /// (default: the underflow study's FP32 run, analyses/underflow/fp32.json).
    #[arg(long, value_name = "RUN_DIR", requires = "plots")]
    gradients: Option<PathBuf>,
}

pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let (formats, blocks) = split_targets(&args.names)?;
    let plots = match &args.plots {
        Some(_) if formats.is_empty() => {
            anyhow::bail!(
                "--plots draws element formats: name at least one (the figures of a block \
                 format are its element's)"
            );
        }
        Some(dir) => {
            let band = match &args.gradients {
                Some(run) => mixprec::report::formats::run_gradient_band(run)?,
                None => mixprec::report::formats::default_gradient_band(),
            };
            Some((
                mixprec::report::formats::write_format_plots(dir, &formats, &band)?,
                band,
            ))
        }
        None => None,
    };
    if args.json {
        let rows: Vec<_> = formats
            .iter()
            .map(FloatFormat::properties)
            .chain(blocks.iter().map(BlockFormat::properties))
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if !formats.is_empty() {
        write_element_table(out, &formats)?;
    }
    if !blocks.is_empty() {
        if !formats.is_empty() {
            writeln!(out)?;
        }
        write_block_table(out, &blocks)?;
    }
    if let Some((written, band)) = plots {
        writeln!(
            out,
            "\ngradient band ({:.0}% of values): 2^{}..2^{}, from {}",
            100.0 * band.share,
            band.lo,
            band.hi,
            band.source
        )?;
        for path in written {
            writeln!(out, "wrote {}", path.display())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The block formats' table: block shape, element, scale format, and a note on the schemes.
fn write_block_table(out: &mut dyn Write, blocks: &[BlockFormat]) -> std::io::Result<()> {
    let header = ["block format", "block", "element", "element max", "scale"];
    let rows: Vec<[String; 5]> = blocks
        .iter()
        .map(|b| {
            let (r, c) = b.block_shape();
            [
                b.name(),
                format!("{r} x {c}"),
                b.element().name(),
                mixprec::text::magnitude(b.element().max()),
                b.scale_format().to_string(),
            ]
        })
        .collect();
    mixprec::text::table(out, &header, &rows)?;
    writeln!(
        out,
        "\nblock: rows x columns sharing one scale, along each row (tiles: R rows x C columns, \
         edge tiles smaller); each block's scale is set by its largest magnitude, so what \
         underflows or saturates is decided per block. e8m0: a power of two (OCP MX); e4m3 + \
         fp32 per tensor: NVFP4 (Transformer Engine's scales); fp32: amax / element max \
         (DeepSeek-V3). Elements saturate. Any tile ELEMENT@RxC is accepted."
    )
}

/// The element formats' table and its note.
fn write_element_table(out: &mut dyn Write, formats: &[FloatFormat]) -> std::io::Result<()> {
    let header = [
        "format",
        "bits",
        "exp",
        "man",
        "bias",
        "max",
        "min normal",
        "min subnormal",
        "range (powers of two)",
        "epsilon",
        "inf",
        "nan",
        "decimal digits",
    ];
    let rows: Vec<[String; 13]> = formats
        .iter()
        .map(|f| {
            [
                f.name(),
                f.total_bits().to_string(),
                f.exp_bits().to_string(),
                f.man_bits().to_string(),
                f.bias().to_string(),
                mixprec::text::magnitude(f.max()),
                mixprec::text::magnitude(f.min_normal()),
                mixprec::text::magnitude(f.min_subnormal()),
                format!(
                    "2^{} / 2^{} .. {}",
                    f.min_subnormal().log2(),
                    f.min_normal().log2(),
                    mixprec::report::formats::power(f.max())
                ),
                mixprec::text::magnitude(f.epsilon()),
                if f.has_infinity() { "yes" } else { "no" }.to_string(),
                if f.has_nan() { "yes" } else { "no" }.to_string(),
                format!("{:.1}", (f.man_bits() + 1) as f64 * 2f64.log10()),
            ]
        })
        .collect();
    mixprec::text::table(out, &header, &rows)?;
    // Said of the formats shown, by name: a custom e2m1 has inf and NaN where fp4-e2m1 has none.
    let saturating: Vec<String> = formats
        .iter()
        .filter(|f| !f.has_infinity() && !f.has_nan())
        .map(FloatFormat::name)
        .collect();
    let saturate = match saturating.as_slice() {
        [] => String::new(),
        [one] => format!(" {one} has no inf or NaN: it saturates."),
        [most @ .., last] => format!(
            " {} and {last} have no inf or NaN: they saturate.",
            most.join(", ")
        ),
    };
    writeln!(
        out,
        "\nmax: largest finite value; min normal: 2^emin, below it precision falls (subnormals) \
         until min subnormal, below half of which values become 0; epsilon: gap after 1.0; \
         range: min subnormal / min normal .. max as powers of two.{saturate} The MX block scale \
         e8m0 is not listed: unsigned powers of two 2^-127..2^127, NaN at 0xff, no zero."
    )
}
