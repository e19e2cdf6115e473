//! The page kit every report page shares: the charts as plain data ([`Chart`]) and the figures
//! made of them, the HTML document and its style, figure blocks, folded tables, percentages and
//! loss scales in words, and the atomic writes of pages, figures and JSON.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use maud::{DOCTYPE, Markup, PreEscaped, html};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;
use serde_json::Value;

use crate::io::write_atomic;
use crate::report::charts::{
    self, DotChart, GroupedBars, Heatmap, LineChart, Log2Histograms, StackedShares,
};
use crate::report::section::Section;
use crate::{Error, Result};

/// A chart of the page, as plain data.
#[derive(Clone, Debug)]
pub enum Chart {
    /// Curves over steps.
    Lines(LineChart),
    /// Log2 histograms over zones.
    Histograms(Log2Histograms),
    /// A grid of shares.
    Heatmap(Heatmap),
    /// Stacked shares over capture steps.
    Stacked(StackedShares),
    /// A distribution per series: a dot per run, the mean and its interval.
    Dots(DotChart),
    /// Bars per category, a series each.
    Bars(GroupedBars),
}

impl Chart {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> super::DrawOutcome {
        match self {
            Chart::Lines(c) => charts::lines(area, c),
            Chart::Histograms(c) => charts::log2_histograms(area, c),
            Chart::Heatmap(c) => charts::heatmap(area, c),
            Chart::Stacked(c) => charts::stacked_shares(area, c),
            Chart::Dots(c) => charts::dots(area, c),
            Chart::Bars(c) => charts::grouped_bars(area, c),
        }
        .map_err(|e| e.to_string())
    }

    fn size(&self) -> (u32, u32) {
        match self {
            // Rows stay readable with many layers: the map grows instead.
            Chart::Heatmap(h) => (super::SIZE.0, (200 + 22 * h.rows.len() as u32).max(420)),
            Chart::Dots(d) => (super::SIZE.0, (260 + 70 * d.rows.len() as u32).max(420)),
            // A long legend (many runs) gets room of its own instead of covering the data.
            Chart::Lines(l) => (super::SIZE.0, l.height_for_legend(super::SIZE.1)),
            _ => super::SIZE,
        }
    }
}

/// A figure: its anchor, section, caption and chart.
#[derive(Clone, Debug)]
pub struct Figure {
    /// The anchor and file name (`figures/{id}.svg`, `.png`).
    pub id: String,
    /// The section of its page it is shown in.
    pub section: Section,
    /// What it shows, in a sentence.
    pub caption: String,
    /// The chart.
    pub chart: Chart,
}

/// Writes each figure as `dir/figures/{id}.svg` and `.png` (the directory created if needed);
/// returns the SVGs by id, to inline in the page.
///
/// # Errors
/// A directory or file that cannot be written, or a chart that cannot be drawn.
pub(crate) fn write_figures(dir: &Path, figures: &[Figure]) -> Result<BTreeMap<String, String>> {
    let figures_dir = dir.join("figures");
    std::fs::create_dir_all(&figures_dir).map_err(Error::io_at(&figures_dir))?;
    let mut svgs = BTreeMap::new();
    for f in figures {
        let size = f.chart.size();
        let svg_path = figures_dir.join(format!("{}.svg", f.id));
        let svg = super::render_svg(&svg_path, size, &|a| f.chart.draw(a))?;
        write_atomic(&svg_path, |w| w.write_all(svg.as_bytes()))?;
        let png_path = figures_dir.join(format!("{}.png", f.id));
        super::write_png(&png_path, size, &|a| f.chart.draw(a))?;
        svgs.insert(f.id.clone(), svg);
    }
    remove_stale_figures(&figures_dir, &svgs).map_err(Error::io_at(&figures_dir))?;
    Ok(svgs)
}

/// Removes the figures an earlier report wrote into `figures_dir` that this one (`current`, by
/// id) did not, so that the directory holds this report's figures only; files mixprec did not
/// write stay.
pub(crate) fn remove_stale_figures(
    figures_dir: &Path,
    current: &BTreeMap<String, String>,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(figures_dir)? {
        let path = entry?.path();
        let figure = path.extension().is_some_and(|e| e == "png" || e == "svg");
        let id = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        if figure
            && id.is_some_and(|id| !current.contains_key(&id))
            && path.is_file()
            && super::written_by_mixprec(&path)
        {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// A page: the skeleton every report shares (title, styles, mixprec's mark), around `body`.
pub(crate) fn document(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        (PreEscaped(super::SVG_SIGNATURE))
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="generator" content="mixprec";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (title) }
                (body)
            }
        }
    }
}

/// A section of a page: its anchor for links, its heading, then `body`.
pub(crate) fn section(s: Section, body: Markup) -> Markup {
    section_headed(s, &s.heading(), body)
}

/// A section of a page under `heading` ([`Section::titled`]: a title worded from the page's
/// content), then `body`.
pub(crate) fn section_headed(s: Section, heading: &str, body: Markup) -> Markup {
    html! {
        section id=(s.id()) {
            h2 { (heading) }
            (body)
        }
    }
}

/// The figures of `figures` shown in section `s`, in order, with their SVGs by id.
pub(crate) fn figures_of(
    s: Section,
    figures: &[Figure],
    svgs: &BTreeMap<String, String>,
) -> Markup {
    html! {
        @for f in figures.iter().filter(|f| f.section == s) {
            (figure_markup(&f.id, svgs.get(&f.id).map_or("", String::as_str), &f.caption))
        }
    }
}

/// A figure: its SVG inline (from a file mixprec rendered: trusted markup whose text plotters
/// escapes), the caption, links to its files.
pub(crate) fn figure_markup(id: &str, svg: &str, caption: &str) -> Markup {
    html! {
        figure id=(id) {
            (PreEscaped(svg))
            figcaption {
                (caption) " "
                a href=(format!("figures/{id}.png")) { "PNG" } " · "
                a href=(format!("figures/{id}.svg")) { "SVG" }
            }
        }
    }
}

/// `value` as pretty JSON with `"written_by": "mixprec"` first (the mark that lets a later report
/// replace it), then `"schema": schema` when given (a page kind's report.json, whose keys
/// docs/src/report.md lists), atomically.
pub(crate) fn write_json(path: &Path, schema: Option<&str>, value: &impl Serialize) -> Result<()> {
    let bad = |e: serde_json::Error| Error::BadFile {
        path: path.to_path_buf(),
        problem: e.to_string(),
    };
    let mut object = serde_json::Map::new();
    object.insert("written_by".into(), Value::from("mixprec"));
    if let Some(schema) = schema {
        object.insert("schema".into(), Value::from(schema));
    }
    match serde_json::to_value(value).map_err(bad)? {
        Value::Object(fields) => object.extend(fields),
        other => {
            object.insert("value".into(), other);
        }
    }
    let json = serde_json::to_vec_pretty(&object).map_err(bad)?;
    write_atomic(path, |w| w.write_all(&json))
}

/// Writes a page into `dir` (created if needed): its figures as `figures/{id}.{svg,png}`, its
/// data as `json_name` ([`write_json`], with `schema` when given) and `index.html`, made by
/// `page` from the figures' SVGs (by id), once [`super::check_outputs`] has seen that none of
/// them is a file mixprec did not write: all of them into a staging directory first, then moved
/// into place together ([`crate::io::write_dir_atomic`]). Returns the page's path.
///
/// # Errors
/// A file there that mixprec did not write, a failed write, a chart that cannot be drawn.
pub(crate) fn write_report(
    dir: &Path,
    figures: &[Figure],
    json_name: &str,
    schema: Option<&str>,
    data: &impl Serialize,
    page: impl FnOnce(&BTreeMap<String, String>) -> Markup,
) -> Result<PathBuf> {
    let mut names = vec!["index.html".to_string(), json_name.to_string()];
    for f in figures {
        names.push(format!("figures/{}.svg", f.id));
        names.push(format!("figures/{}.png", f.id));
    }
    super::check_outputs(dir, &names, "--out")?;
    // The whole set, or nothing: a full disk must not leave figures without their page.
    let svgs = crate::io::write_dir_atomic(dir, |staging| {
        let svgs = write_figures(staging, figures)?;
        write_json(&staging.join(json_name), schema, data)?;
        write_page(staging, &page(&svgs))?;
        Ok(svgs)
    })?;
    let figures_dir = dir.join("figures");
    remove_stale_figures(&figures_dir, &svgs).map_err(Error::io_at(&figures_dir))?;
    Ok(dir.join("index.html"))
}

/// `text` with a line-break opportunity after each `,` `:` and `(`, so that a long name without
/// spaces (a policy spelled with its parameters) wraps in a table cell instead of widening the
/// table past the page.
pub(crate) fn breakable(text: &str) -> Markup {
    html! {
        @for (i, part) in text.split_inclusive([',', ':', '(']).enumerate() {
            @if i > 0 { wbr; }
            (part)
        }
    }
}

/// Writes `page` as `dir/index.html`, atomically; returns its path.
pub(crate) fn write_page(dir: &Path, page: &Markup) -> Result<PathBuf> {
    let index = dir.join("index.html");
    write_atomic(&index, |w| w.write_all(page.0.as_bytes()))?;
    Ok(index)
}

pub(crate) const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:1180px;margin:2em auto;padding:0 1em;color:#222}\
h1{font-size:1.5em}h2{margin-top:2em;border-bottom:1px solid #ccc}\
table{display:block;max-width:100%;overflow-x:auto;border-collapse:collapse;font-size:0.9em;margin:1em 0}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}\
th{background:#f3f3f3}figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}\
figcaption{font-size:0.9em;color:#444}.swatch{display:inline-block;width:0.9em;height:0.9em;margin-right:0.4em;vertical-align:middle}\
li{margin:0.4em 0}";

pub(crate) fn css(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// A share as a percent with its digits (no unit: the column says it), small values kept.
/// The most rows a table shows unfolded: a longer one is folded (HTML `<details>`) so that it
/// does not push the page's figures and findings out of sight.
pub(crate) const UNFOLDED_ROWS: usize = 15;

/// `table` of `rows` rows, folded under a summary line when it has more than [`UNFOLDED_ROWS`].
pub(crate) fn fold(rows: usize, table: Markup) -> Markup {
    if rows <= UNFOLDED_ROWS {
        return table;
    }
    html! { details { summary { "The table (" (rows) " rows)" } (table) } }
}

#[cfg(test)]
mod tests {
    use maud::html;

    use super::*;

    /// A long spelling gets a break opportunity after each separator, its text escaped.
    #[test]
    fn breakable_names_wrap_at_separators() {
        assert_eq!(
            breakable("run (gradscaler:init_scale=2^40,growth_interval=100)").into_string(),
            "run (<wbr>gradscaler:<wbr>init_scale=2^40,<wbr>growth_interval=100)"
        );
        assert_eq!(breakable("a<b").into_string(), "a&lt;b");
    }

    /// Tables of more than 15 rows are folded, shorter ones shown.
    #[test]
    fn long_tables_are_folded() {
        let table = html! { table { tr { td { "x" } } } };
        assert!(
            !fold(UNFOLDED_ROWS, table.clone())
                .into_string()
                .contains("<details>")
        );
        let folded = fold(UNFOLDED_ROWS + 1, table).into_string();
        assert!(
            folded.starts_with("<details><summary>The table (16 rows)</summary><table>"),
            "{folded}"
        );
    }
}
