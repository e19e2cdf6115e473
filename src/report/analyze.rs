//! `analyze --plots`' three charts, as plain data for the chart kit: the histogram of log2 |x|
//! over the format's zones, the loss-scale sweep, and the heatmap of tensors by magnitude; and
//! `analyze --report`'s page of them ([`write_analysis`]).

use std::path::Path;

use maud::{Markup, html};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::charts::{
    self, GREY, Line, Log2Histograms, MagnitudeHeatmap, NORMAL, OVERFLOW, RUN_COLORS, SUBNORMAL,
    ScaleSweep, Stack, Stroke, UNDERFLOW,
};
use super::html::{document, figure_markup, section, write_json, write_page};
use super::section::Section;
use super::{SIZE, check_plots_dir, heatmap_size, remove_stale_plot, write_png, write_svg};
use crate::Result;
use crate::analysis::Analysis;
use crate::format::FloatFormat;
use crate::stats::{Histogram, Recommendation, Sweep, SweepRow};

/// Values as given, and scaled by the recommended loss scale.
const RAW: RGBColor = GREY;
const SCALED: RGBColor = RUN_COLORS[0];

/// What the `analyze` plots show.
pub struct AnalyzePlots<'a> {
    /// The format the values are rounded into.
    pub format: FloatFormat,
    /// The histogram of all tensors together.
    pub total: &'a Histogram,
    /// The sweep of all tensors together.
    pub sweep: &'a Sweep,
    /// The recommended window.
    pub recommendation: Recommendation,
    /// The largest share of values allowed to underflow (the window's low edge).
    pub max_underflow: f64,
    /// Each tensor's label (its name, with its file when there are several) and histogram, in
    /// order.
    pub tensors: Vec<(String, &'a Histogram)>,
}

impl<'a> AnalyzePlots<'a> {
    /// The plot data of an analysis.
    #[must_use]
    pub fn new(a: &'a Analysis) -> Self {
        let several = a.several_files();
        let recommendation = a.recommendation.as_ref().map_or(
            Recommendation {
                log2_scale: None,
                min_log2_scale: None,
                max_log2_scale: None,
            },
            |r| Recommendation {
                log2_scale: r.log2_scale,
                min_log2_scale: r.min_log2_scale,
                max_log2_scale: r.max_log2_scale,
            },
        );
        AnalyzePlots {
            format: a.format,
            total: &a.total.histogram,
            sweep: &a.total.values.sweep,
            recommendation,
            max_underflow: a.options.max_underflow,
            tensors: a
                .tensors
                .iter()
                .map(|t| (t.label(several), &t.histogram))
                .collect(),
        }
    }

    /// The histogram of all tensors' log2 |x| over the format's zones, as given and scaled by
    /// the recommended loss scale.
    #[must_use]
    pub fn histogram(&self) -> Log2Histograms {
        let k = self.recommendation.log2_scale;
        let title = match k {
            Some(k) => format!(
                "log2 |x| of all tensors vs {}, raw and scaled by 2^{k}",
                self.format
            ),
            None => format!(
                "log2 |x| of all tensors vs {} (no single loss scale works)",
                self.format
            ),
        };
        let mut series = vec![("raw |x|".to_string(), RAW, charts::bars(self.total, 0.0))];
        if let Some(k) = k {
            series.push((
                format!("|x| * 2^{k} (recommended loss scale)"),
                SCALED,
                charts::bars(self.total, f64::from(k)),
            ));
        }
        Log2Histograms {
            title,
            x_desc: "log2 |x|  (binary exponent of the magnitude)".into(),
            zones: charts::format_zones(self.format),
            series,
        }
    }

    /// The sweep: shares of underflow, subnormal, normal and overflow at each scale, the
    /// window and the recommended scale, over the underflow and overflow shares and the energy
    /// lost against `--max-underflow`.
    #[must_use]
    pub fn sweep(&self) -> ScaleSweep {
        let (s, r) = (self.sweep, self.recommendation);
        let window = r
            .min_log2_scale
            .zip(r.max_log2_scale)
            .filter(|(a, b)| a <= b);
        let title = match window {
            Some((a, b)) => format!("Loss-scale sweep, {}: window 2^{a}..2^{b}", self.format),
            None => format!("Loss-scale sweep, {}: no single scale works", self.format),
        };
        let n = s.finite_nonzero().max(1) as f64;
        let curve = |name: &str, color, get: &dyn Fn(&SweepRow) -> f64| Line {
            name: name.into(),
            color,
            points: s
                .rows
                .iter()
                .map(|r| (f64::from(r.log2_scale), get(r)))
                .collect(),
            stroke: Stroke::Solid,
        };
        let (lo, hi) = match (s.rows.first(), s.rows.last()) {
            (Some(a), Some(b)) => (f64::from(a.log2_scale), f64::from(b.log2_scale)),
            _ => (0.0, 1.0),
        };
        let tails = vec![
            curve("underflow share", UNDERFLOW, &|r| r.underflow as f64 / n),
            curve("energy lost (share of squared norm)", RAW, &|r| {
                r.energy_lost
            }),
            curve("overflow share", OVERFLOW, &|r| r.overflow as f64 / n),
            Line {
                name: format!("--max-underflow {}", self.max_underflow),
                color: BLACK,
                points: vec![
                    (lo - 0.5, self.max_underflow),
                    (hi + 0.5, self.max_underflow),
                ],
                stroke: Stroke::Dashed,
            },
        ];
        ScaleSweep {
            title,
            y_desc: "share of finite nonzero values (%)".into(),
            stacks: sweep_stacks(s),
            window,
            chosen: r.log2_scale,
            tails,
        }
    }

    /// The heatmap of tensors by magnitude, with the format's edges at the recommended scale.
    #[must_use]
    pub fn heatmap(&self) -> MagnitudeHeatmap {
        let k = self.recommendation.log2_scale.unwrap_or(0);
        MagnitudeHeatmap {
            title: format!(
                "{} tensors by log2 |x| (share of each row per octave); {} edges at 2^{k}",
                self.tensors.len(),
                self.format
            ),
            rows: heatmap_rows(&self.tensors),
            edges: heatmap_edges(self.format, k).to_vec(),
        }
    }
}

/// What the sweep's upper panel draws: underflow, subnormal, normal and overflow shares stacked
/// in that order, from 0 up, at each scale of `s`, in percent of the finite nonzero values.
fn sweep_stacks(s: &Sweep) -> Vec<Stack> {
    type Class = (RGBColor, &'static str, fn(&SweepRow) -> u64);
    let classes: [Class; 4] = [
        (UNDERFLOW, "underflow (becomes 0)", |r| r.underflow),
        (SUBNORMAL, "subnormal", |r| r.subnormal),
        (NORMAL, "normal", |r| r.normal),
        (OVERFLOW, "overflow (inf: step skipped)", |r| r.overflow),
    ];
    let n = s.finite_nonzero().max(1) as f64;
    classes
        .iter()
        .enumerate()
        .map(|(c, &(color, label, get))| {
            let bars = s.rows.iter().map(|row| {
                let below: u64 = classes[..c].iter().map(|(_, _, g)| g(row)).sum();
                let k = f64::from(row.log2_scale);
                let y0 = 100.0 * below as f64 / n;
                let y1 = 100.0 * (below + get(row)) as f64 / n;
                (k, y0, y1)
            });
            (label.to_string(), color, bars.collect())
        })
        .collect()
}

/// The heatmap's edge lines at the scale `2^k`: `(log2 |x|, colour, legend)` for the lost,
/// subnormal and overflow edges of format `f`, each moved down by `k`.
fn heatmap_edges(f: FloatFormat, k: i32) -> [(f64, RGBColor, String); 3] {
    let z = charts::format_zones(f);
    let (lost, min_normal, max) = (z[0].to, z[1].to, z[2].to);
    let kf = f64::from(k);
    [
        (
            lost - kf,
            UNDERFLOW,
            format!("left: lost at 2^{k} (below half the min subnormal / 2^{k})"),
        ),
        (
            min_normal - kf,
            SUBNORMAL,
            format!("left: subnormal at 2^{k} (below the min normal / 2^{k})"),
        ),
        (
            max - kf,
            OVERFLOW,
            format!("right: overflow at 2^{k} (above max / 2^{k})"),
        ),
    ]
}

/// The most rows the heatmap draws: beyond it, tensors are grouped by name prefix
/// ([`heatmap_rows`]).
pub const HEATMAP_MAX_ROWS: usize = 300;

/// One heatmap row: its label and the share of its values per binary exponent.
type HeatRow = (String, Vec<(i32, f64)>);

/// The heatmap's rows: one per tensor, in order, up to [`HEATMAP_MAX_ROWS`]; beyond, tensors
/// that share a name prefix (`layers.3.attn` for `layers.3.attn.q.grad`, shortened one dotted
/// component at a time until the groups fit) are pooled into one row labelled `prefix.* (n)`;
/// if that is still too many, consecutive tensors are pooled.
#[must_use]
pub fn heatmap_rows(tensors: &[(String, &Histogram)]) -> Vec<HeatRow> {
    let shares = |counts: &std::collections::BTreeMap<i32, u64>| -> Vec<(i32, f64)> {
        let n: u64 = counts.values().sum();
        counts
            .iter()
            .map(|(&e, &c)| (e, c as f64 / n.max(1) as f64))
            .collect()
    };
    let pool = |members: &[usize], label: String| -> HeatRow {
        let mut counts = std::collections::BTreeMap::new();
        for &i in members {
            for (e, c) in tensors[i].1.exponent_counts() {
                *counts.entry(e).or_insert(0) += c;
            }
        }
        (label, shares(&counts))
    };
    let n = tensors.len();
    if n <= HEATMAP_MAX_ROWS {
        return (0..n).map(|i| pool(&[i], tensors[i].0.clone())).collect();
    }
    // Group by ever shorter prefixes, keeping first-seen order.
    let names: Vec<&str> = tensors.iter().map(|t| t.0.as_str()).collect();
    let mut depth_cut = 1;
    loop {
        let prefix = |name: &str| -> String {
            let parts: Vec<&str> = name.split('.').collect();
            let keep = parts.len().saturating_sub(depth_cut).max(1);
            parts[..keep].join(".")
        };
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let key = prefix(name);
            match groups.iter_mut().find(|g| g.0 == key) {
                Some(g) => g.1.push(i),
                None => groups.push((key, vec![i])),
            }
        }
        let deepest = names
            .iter()
            .map(|n| n.split('.').count())
            .max()
            .unwrap_or(1);
        if groups.len() <= HEATMAP_MAX_ROWS || depth_cut >= deepest {
            if groups.len() <= HEATMAP_MAX_ROWS {
                return groups
                    .into_iter()
                    .map(|(key, members)| {
                        let label = if members.len() == 1 {
                            names[members[0]].to_string()
                        } else {
                            format!("{key}.* ({})", members.len())
                        };
                        pool(&members, label)
                    })
                    .collect();
            }
            break;
        }
        depth_cut += 1;
    }
    let per = n.div_ceil(HEATMAP_MAX_ROWS);
    (0..n)
        .step_by(per)
        .map(|start| {
            let members: Vec<usize> = (start..(start + per).min(n)).collect();
            let label = format!("{} .. ({})", names[start], members.len());
            pool(&members, label)
        })
        .collect()
}

/// Writes the `analyze` plots into `dir` (created if needed): `histogram.{png,svg}`,
/// `sweep.{png,svg}`, and with several tensors `heatmap.{png,svg}` (with one tensor, a heatmap
/// mixprec wrote there earlier is removed, so that the directory describes this analysis only).
/// Returns the paths written.
///
/// # Errors
/// [`check_plots_dir`]'s; [`crate::Error::Io`] if the directory or a file cannot be written, or a
/// chart cannot be drawn.
pub fn analyze_plots(dir: &Path, p: &AnalyzePlots<'_>) -> Result<Vec<std::path::PathBuf>> {
    check_plots_dir(dir)?;
    // The whole set, or nothing (see `write_dir_atomic`); then the earlier heatmap goes.
    let written = crate::io::write_dir_atomic(dir, |staging| draw_analyze_plots(staging, p))?;
    if p.tensors.len() <= 1 {
        remove_stale_plot(dir, "heatmap")?;
    }
    Ok(super::rebase(&written, dir))
}

/// Writes [`analyze_plots`]'s files into the new directory `dir`; returns their paths.
fn draw_analyze_plots(dir: &Path, p: &AnalyzePlots<'_>) -> Result<Vec<std::path::PathBuf>> {
    let mut charts = vec![Chart::Histogram, Chart::Sweep];
    if p.tensors.len() > 1 {
        charts.push(Chart::Heatmap);
    }
    let mut written = Vec::new();
    for chart in charts {
        let size = match chart {
            Chart::Heatmap => heatmap_size(p.tensors.len()),
            _ => SIZE,
        };
        let path = dir.join(format!("{}.png", chart.name()));
        write_png(&path, size, &|area| chart.draw(area, p))?;
        written.push(path);
        let path = dir.join(format!("{}.svg", chart.name()));
        write_svg(&path, size, &|area| chart.draw(area, p))?;
        written.push(path);
    }
    Ok(written)
}

/// The charts of `analyze`.
#[derive(Clone, Copy)]
enum Chart {
    Histogram,
    Sweep,
    Heatmap,
}

impl Chart {
    fn name(self) -> &'static str {
        match self {
            Chart::Histogram => "histogram",
            Chart::Sweep => "sweep",
            Chart::Heatmap => "heatmap",
        }
    }

    fn draw<DB: DrawingBackend>(
        self,
        area: &DrawingArea<DB, Shift>,
        p: &AnalyzePlots<'_>,
    ) -> std::result::Result<(), String> {
        match self {
            Chart::Histogram => charts::log2_histograms(area, &p.histogram()),
            Chart::Sweep => charts::scale_sweep(area, &p.sweep()),
            Chart::Heatmap => charts::magnitude_heatmap(area, &p.heatmap()),
        }
        .map_err(|e| e.to_string())
    }
}

/// The `schema` of analyze's `report.json` (its keys: docs/src/report.md): what `analyze --json`
/// prints, under this key.
pub const SCHEMA: &str = "mixprec-report-analyze/1";

/// The page of an `analyze`: the recommendation in words, each tensor's own window (worst
/// first), and the analysis charts (histogram against the format's zones, the sweep, the
/// tensors by magnitude), written into `dir` as `index.html`, `report.json` (what `analyze
/// --json` prints, with [`SCHEMA`]) and `figures/` (the `--plots` files). Returns the page's path.
///
/// # Errors
/// A file in `dir` that mixprec did not write, a failed write, a chart that cannot be drawn.
pub fn write_analysis(dir: &Path, a: &Analysis) -> Result<std::path::PathBuf> {
    super::check_outputs(dir, &["index.html", "report.json"], "--report")?;
    // The whole set, or nothing (see `write_dir_atomic`); then an earlier heatmap goes.
    crate::io::write_dir_atomic(dir, |staging| write_analysis_into(staging, a))?;
    if AnalyzePlots::new(a).tensors.len() <= 1 {
        remove_stale_plot(&dir.join("figures"), "heatmap")?;
    }
    Ok(dir.join("index.html"))
}

/// Writes [`write_analysis`]'s files into the new directory `dir`.
fn write_analysis_into(dir: &Path, a: &Analysis) -> Result<std::path::PathBuf> {
    let figures_dir = dir.join("figures");
    let written = analyze_plots(&figures_dir, &AnalyzePlots::new(a))?;
    write_json(&dir.join("report.json"), Some(SCHEMA), a)?;
    let mut figures = Vec::new();
    for path in written
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
    {
        let svg = crate::io::read_document(path, crate::io::MAX_DOCUMENT)?;
        let svg = String::from_utf8_lossy(&svg).into_owned();
        let id = path
            .file_stem()
            .map_or(String::new(), |s| s.to_string_lossy().into_owned());
        let caption = match id.as_str() {
            "histogram" => format!("log2 |x| of every value of every tensor against {}'s zones, as they are and scaled by the recommended loss scale.", a.format),
            "sweep" => "What each loss scale 2^k does to the values: the share that underflows, becomes subnormal, stays normal or overflows.".to_string(),
            _ => "Each tensor's values by magnitude (share per octave), with the format's edges: which tensors sit where.".to_string(),
        };
        figures.push((id, svg, caption));
    }
    let files: Vec<String> = {
        let mut f: Vec<String> = a
            .tensors
            .iter()
            .map(|t| t.file.display().to_string())
            .collect();
        f.dedup();
        f
    };
    let title = format!("mixprec analyze: {} against {}", files.join(", "), a.format);
    let body = html! {
        (section(Section::Recommendation, html! {
            p { (a.explanation) }
            @if let Some(r) = &a.recommendation {
                @if !r.excluded_tensors.is_empty() {
                    p { "Tensors whose own window excludes the recommended scale: " (r.excluded_tensors.join(", ")) "." }
                }
            }
        }))
        (section(Section::Tensors, windows_table(a)))
        (section(Section::AnalyzeFigures, html! {
            @for (id, svg, caption) in &figures {
                (figure_markup(id, svg, caption))
            }
        }))
        footer { p { "Made by mixprec " (env!("CARGO_PKG_VERSION")) ". The numbers are in report.json (what analyze --json prints)." } }
    };
    write_page(dir, &document(&title, body))
}

/// Each tensor's own window, worst first: analyze's second section.
fn windows_table(a: &Analysis) -> Markup {
    html! {
        table {
            thead { tr {
                th { "tensor" } th { "file" } th { "window (log2 scale)" }
                th { "at 2^k" } th { "underflow there (%)" } th { "excludes the recommendation" }
            } }
            tbody {
                @for w in &a.windows {
                    tr {
                        td { (w.name) } td { (w.file) }
                        td { (match (w.window.min_log2_scale, w.window.max_log2_scale) {
                            (Some(lo), Some(hi)) if lo <= hi => format!("{lo}..{hi}"),
                            _ => "none".to_string(),
                        }) }
                        td { (w.at_log2_scale) }
                        td { (crate::text::percent(w.underflow_share)) }
                        td { (match (w.noise, w.excludes_recommended) {
                            (true, _) => "noise (left out)",
                            (false, true) => "yes",
                            (false, false) => "no",
                        }) }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::FP16;
    use crate::stats::SweepAccumulator;

    /// The heatmap's edge lines sit at the zone edges moved down by the scale, each in its
    /// zone's colour.
    #[test]
    fn heatmap_edges_are_the_zone_edges_over_the_scale() {
        let e = heatmap_edges(FP16, 8);
        assert_eq!((e[0].0, e[0].1), (-33.0, UNDERFLOW));
        assert_eq!((e[1].0, e[1].1), (-22.0, SUBNORMAL));
        assert_eq!((e[2].0, e[2].1), (65504f64.log2() - 8.0, OVERFLOW));
        assert!(e[0].2.starts_with("left: lost at 2^8"), "{}", e[0].2);
        assert!(e[2].2.starts_with("right: overflow"), "{}", e[2].2);
    }

    /// The sweep's stacked bars on values whose fate is known: in fp16 at scale 1, 2^-26
    /// underflows (below 2^-25), 2^-20 is subnormal, 1 is normal, 2^17 overflows (above
    /// 65504); 1, 2, 3 and 4 of each. At 2^10 the underflow becomes subnormal and the
    /// subnormals normal.
    #[test]
    fn sweep_stacks_draw_each_class_in_its_colour() {
        let mut acc = SweepAccumulator::new(FP16);
        let mut xs = vec![2f32.powi(-26)];
        xs.extend([2f32.powi(-20); 2]);
        xs.extend([1.0; 3]);
        xs.extend([2f32.powi(17); 4]);
        xs.extend([0.0; 5]);
        acc.add_f32(&xs);
        let sweep = acc.sweep(0..=10);
        let stacks = sweep_stacks(&sweep);
        let colours: Vec<RGBColor> = stacks.iter().map(|s| s.1).collect();
        assert_eq!(colours, [UNDERFLOW, SUBNORMAL, NORMAL, OVERFLOW]);
        assert!(stacks[0].0.starts_with("underflow"));
        assert!(stacks[3].0.starts_with("overflow"));
        let at = |k: usize| -> Vec<(f64, f64)> {
            stacks
                .iter()
                .map(|s| {
                    assert_eq!(s.2[k].0, k as f64);
                    (s.2[k].1, s.2[k].2)
                })
                .collect()
        };
        // Shares of the 10 finite nonzero values, stacked from 0 to 100.
        assert_eq!(
            at(0),
            [(0.0, 10.0), (10.0, 30.0), (30.0, 60.0), (60.0, 100.0)]
        );
        assert_eq!(
            at(10),
            [(0.0, 0.0), (0.0, 10.0), (10.0, 60.0), (60.0, 100.0)]
        );
    }
}
