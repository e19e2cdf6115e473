//! Reports: plots (plotters) written as PNG and SVG.
//!
//! Every chart is one function generic over the drawing backend ([`plot`]), so the same code
//! draws into an SVG string (for HTML reports) and into an RGB buffer encoded as PNG. Text uses
//! DejaVu Sans, embedded in the binary (see `src/report/DejaVuSans-LICENSE.txt`): no system font
//! is read at run time. Files are written atomically (rendered in memory, then written through a
//! temporary file renamed over the target).

pub mod charts;
pub mod page;
pub mod plot;
pub mod runs;

pub use page::Report;
pub use runs::{ReportOptions, RunData};

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::format::FloatFormat;
use crate::io::write_atomic;
use crate::stats::{Histogram, Recommendation, Sweep};
use crate::{Error, Result};

/// The embedded font, registered once as plotters' "sans-serif".
static FONT: &[u8] = include_bytes!("report/DejaVuSans.ttf");

/// Registers the embedded font (idempotent).
pub fn register_font() {
    static DONE: OnceLock<bool> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
}

/// What drawing a chart gives: nothing, or the backend's complaint in words.
pub type DrawOutcome = std::result::Result<(), String>;

/// Width and height of every chart, in pixels (SVG user units).
pub const SIZE: (u32, u32) = (1100, 650);

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
    /// Each tensor's name and histogram, in order.
    pub tensors: Vec<(&'a str, &'a Histogram)>,
}

/// Writes the `analyze` plots into `dir` (created if needed): `histogram.{png,svg}`,
/// `sweep.{png,svg}`, and with several tensors `heatmap.{png,svg}`. Returns the paths written.
///
/// # Errors
/// [`Error::Io`] if the directory or a file cannot be written, or a chart cannot be drawn.
pub fn analyze_plots(dir: &Path, p: &AnalyzePlots<'_>) -> Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    let mut charts = vec![Chart::Histogram, Chart::Sweep];
    if p.tensors.len() > 1 {
        charts.push(Chart::Heatmap);
    }
    let mut written = Vec::new();
    for chart in charts {
        let path = dir.join(format!("{}.png", chart.name()));
        write_png(&path, &|area| chart.draw(area, p))?;
        written.push(path);
        let path = dir.join(format!("{}.svg", chart.name()));
        write_svg(&path, &|area| chart.draw(area, p))?;
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
            Chart::Histogram => plot::histogram(area, p),
            Chart::Sweep => plot::sweep(area, p),
            Chart::Heatmap => plot::heatmap(area, p),
        }
        .map_err(|e| e.to_string())
    }
}

pub(crate) fn draw_error(path: &Path, e: String) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(format!("cannot draw the chart: {e}")),
    }
}

/// Renders a chart into memory and writes it as a PNG, atomically.
///
/// # Errors
/// [`Error::Io`] naming `path`.
pub fn write_png(
    path: &Path,
    draw: &dyn Fn(&DrawingArea<BitMapBackend<'_>, Shift>) -> DrawOutcome,
) -> Result<()> {
    write_png_sized(path, SIZE, draw)
}

/// [`write_png`] at `size` pixels.
///
/// # Errors
/// [`Error::Io`] naming `path`.
pub fn write_png_sized(
    path: &Path,
    size: (u32, u32),
    draw: &dyn Fn(&DrawingArea<BitMapBackend<'_>, Shift>) -> DrawOutcome,
) -> Result<()> {
    register_font();
    let (w, h) = size;
    let mut rgb = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| draw_error(path, e.to_string()))?;
        draw(&root).map_err(|e| draw_error(path, e))?;
        root.present()
            .map_err(|e| draw_error(path, e.to_string()))?;
    }
    write_atomic(path, |out| {
        let mut enc = png::Encoder::new(out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        // Charts are flat colours: per-row adaptive filters make them smaller for little time.
        enc.set_compression(png::Compression::Default);
        enc.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
        let mut writer = enc.write_header().map_err(std::io::Error::other)?;
        writer
            .write_image_data(&rgb)
            .map_err(std::io::Error::other)?;
        writer.finish().map_err(std::io::Error::other)
    })
}

/// Renders a chart into an SVG string and writes it, atomically.
///
/// # Errors
/// [`Error::Io`] naming `path`.
pub fn write_svg(
    path: &Path,
    draw: &dyn Fn(&DrawingArea<SVGBackend<'_>, Shift>) -> DrawOutcome,
) -> Result<()> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| draw_error(path, e.to_string()))?;
        draw(&root).map_err(|e| draw_error(path, e))?;
        root.present()
            .map_err(|e| draw_error(path, e.to_string()))?;
    }
    write_atomic(path, |out| out.write_all(svg.as_bytes()))
}
