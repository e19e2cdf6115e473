//! `mixprec plan`: which layers of a built-in model can take a narrow recipe, measured layer by
//! layer against FP32, planned under a budget, and checked by re-training.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mixprec::recipe::Recipe;
use mixprec::run::plan::{
    Budget, PLAN, PLAN_RECIPE, SENSITIVITY, Sensitivity, VALIDATION, layers_in_words,
};
use mixprec::train::TrainConfig;
use mixprec::train::plan::{Probe, validate, validation_runs};

use mixprec::flags::whole;

/// Measure what casting each layer that forms matrix products does (alone, against FP32, on the
/// same weights and batches: forward and backward, no update), cast layers in order of least
/// harm until a budget, and write DIR/sensitivity.json, DIR/plan.json and DIR/plan-recipe.json
/// (the plan as a recipe: --recipe with the other layers kept in --high). With --validate, also
/// train fp32, every layer cast (--recipe) and the plan over --seeds seeds into DIR/runs/ and
/// write DIR/validation.json; `mixprec report DIR` shows the page.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("budget").required(true).args(["max_grad_error", "flops_share"])))]
pub struct Args {
    /// The model's config (a `mixprec train` config: mlp, cnn or lstm; its seed sets the weights
    /// and batches measured, its steps the validation's runs).
    #[arg(long, value_name = "FILE.json")]
    config: PathBuf,
    /// The cast recipe: a preset name (nvfp4, mxfp8, ...) or a recipe JSON file.
    #[arg(long, value_name = "NAME|FILE.json")]
    recipe: String,
    /// The recipe the layers the plan keeps run (a preset name or a recipe JSON file).
    #[arg(long, value_name = "NAME|FILE.json", default_value = "fp32")]
    high: String,
    /// Training batches measured (the first ones the config's run draws).
    #[arg(long, value_name = "N", default_value_t = 8, allow_negative_numbers = true, value_parser = whole::<u64>)]
    batches: u64,
    /// Budget: cast layers while the relative error of the weight gradients (all layers cast
    /// together, against FP32) stays at most X.
    #[arg(long, value_name = "X", allow_negative_numbers = true, value_parser = share)]
    max_grad_error: Option<f64>,
    /// Budget: cast layers until this share (0..1) of the product FLOPs is cast.
    #[arg(long, value_name = "S", allow_negative_numbers = true, value_parser = share)]
    flops_share: Option<f64>,
    /// Re-train fp32, every layer cast, and the plan, over --seeds seeds.
    #[arg(long)]
    validate: bool,
    /// Seeds of the validation (the config's seed and the ones after it).
    #[arg(long, value_name = "N", default_value_t = 5, allow_negative_numbers = true, value_parser = whole::<u64>)]
    seeds: u64,
    /// The validation compares each run's mean loss over its last N steps (default: a tenth of
    /// its steps, at least 1).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<u64>)]
    last_steps: Option<u64>,
    /// The plan directory (created; must not hold a plan already).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// A number in 0..=1 (a share or a relative error's budget).
fn share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("'{text}' is not a number from 0 to 1")),
    }
}

/// A preset name, or a recipe JSON file.
fn recipe(text: &str, flag: &str) -> anyhow::Result<Recipe> {
    if Path::new(text).is_file() {
        let value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(text)?)
            .map_err(|e| anyhow::anyhow!("{flag} {text}: {e}"))?;
        let r = Recipe::from_value(value).map_err(|e| anyhow::anyhow!("{flag} {text}: {e}"))?;
        r.validate()?;
        return Ok(r);
    }
    Recipe::preset(text).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

/// Runs the command.
///
/// # Errors
/// A bad config, recipe or budget, a directory that holds a plan (all before measuring); a
/// failed run or write.
pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let config = TrainConfig::from_file(&args.config)?;
    config.validate()?;
    let cast = recipe(&args.recipe, "--recipe")?;
    if cast.is_fp32() {
        anyhow::bail!(
            "--recipe {}: stores and casts everything in FP32, so no layer has anything to measure against FP32 (a narrow recipe: nvfp4, mxfp8, mxfp4, fp8-hybrid, fp16-master, ...)",
            args.recipe
        );
    }
    let high = recipe(&args.high, "--high")?;
    if args.seeds < 2 && args.validate {
        anyhow::bail!(
            "--seeds {}: at least 2 (the Welch test needs two runs per arm)",
            args.seeds
        );
    }
    if args.out.join(PLAN).exists() || args.out.join(mixprec::run::grid::RUNS).exists() {
        anyhow::bail!(
            "--out {}: holds a plan already; give a new directory",
            args.out.display()
        );
    }
    let budget = match (args.max_grad_error, args.flops_share) {
        (Some(x), _) => Budget::MaxGradError(x),
        (_, Some(s)) => Budget::FlopsShare(s),
        (None, None) => unreachable!("clap requires one budget"),
    };
    let probe = Probe::new(&config, args.batches)?;
    let sensitivity = probe.sensitivity(&cast)?;
    let (plan, plan_recipe) = probe.plan(&sensitivity, &cast, &high, budget)?;
    mixprec::io::write_dir_atomic(&args.out, |dir| {
        mixprec::run::plan::write(&dir.join(SENSITIVITY), &sensitivity)?;
        mixprec::run::plan::write(&dir.join(PLAN), &plan)?;
        mixprec::run::plan::write(&dir.join(PLAN_RECIPE), &plan_recipe)
    })?;
    print_sensitivity(out, &sensitivity)?;
    writeln!(
        out,
        "\nplan ({}): cast {} ({} of the product FLOPs, gradient error {}); keep {} in {}",
        budget.in_words(),
        layers_in_words(&plan.cast),
        mixprec::text::pct(plan.flops_share),
        mixprec::text::four_digits(plan.grad_rel_err),
        layers_in_words(&plan.keep),
        plan.high
    )?;
    writeln!(out, "recipe: {}", args.out.join(PLAN_RECIPE).display())?;
    if args.validate {
        let last = args.last_steps.unwrap_or((config.steps / 10).max(1));
        let runs = validation_runs(&config, &cast, &plan_recipe, args.seeds);
        let steps: u64 = runs.iter().map(|r| r.config.steps).sum();
        let bar = super::progress_bar(steps, "steps");
        let validation = validate(&args.out, &runs, rayon::current_num_threads(), last, &|e| {
            if matches!(e, mixprec::train::grid::Event::Step) {
                bar.inc(1);
            }
        })?;
        bar.finish_and_clear();
        mixprec::run::plan::write(&args.out.join(VALIDATION), &validation)?;
        writeln!(
            out,
            "validation: {} runs -> {} (mixprec report {} shows the page)",
            validation.runs.len(),
            args.out.join(VALIDATION).display(),
            args.out.display()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The sensitivity table, most harmful layer first.
fn print_sensitivity(out: &mut dyn Write, s: &Sensitivity) -> anyhow::Result<()> {
    use mixprec::text::{four_digits, pct};
    writeln!(
        out,
        "{}: each layer cast alone to {} against {} ({} batches, seed {})\n",
        s.model, s.recipe, s.reference, s.batches, s.seed
    )?;
    let total: u64 = s.layers.iter().map(|l| l.flops).sum();
    let mut rows: Vec<Vec<String>> = s
        .layers
        .iter()
        .map(|l| {
            vec![
                l.layer.clone(),
                pct(l.flops as f64 / total.max(1) as f64),
                four_digits(l.harm.grad_rel_err),
                four_digits(l.harm.grad_cosine),
                four_digits(l.harm.loss_change),
                pct(l.harm.underflow),
                pct(l.harm.saturate),
            ]
        })
        .collect();
    let a = &s.all;
    rows.push(vec![
        "(all at once)".into(),
        "100%".into(),
        four_digits(a.grad_rel_err),
        four_digits(a.grad_cosine),
        four_digits(a.loss_change),
        pct(a.underflow),
        pct(a.saturate),
    ]);
    mixprec::text::table(
        out,
        &[
            "layer",
            "product FLOPs",
            "grad error",
            "grad cosine",
            "loss change",
            "underflow",
            "saturated",
        ],
        &rows,
    )?;
    Ok(())
}
