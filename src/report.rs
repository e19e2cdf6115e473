//! Reports: plots (plotters) written as PNG and SVG.
//!
//! Every chart is one function generic over the drawing backend ([`charts`]), so the same code
//! draws into an SVG string (for HTML reports) and into an RGB buffer encoded as PNG. Text uses
//! DejaVu Sans, embedded in the binary (see `src/report/DejaVuSans-LICENSE.txt`): no system font
//! is read at run time. Files are written atomically (rendered in memory, then written through a
//! temporary file renamed over the target).
//!
//! Every file written here is signed (a PNG `tEXt` chunk `Software: mixprec`, an SVG comment), and
//! [`analyze_plots`] replaces an existing plot file only if it carries that signature: a user's
//! own `histogram.png` in the directory is never overwritten.

pub mod block;
pub mod charts;
pub mod formats;
pub mod grid;
pub mod html;
pub mod page;
pub mod replay;
pub mod runs;

pub use grid::GridReport;
pub use page::Report;
pub use runs::{ReportOptions, RunData};

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::analysis::Analysis;
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

/// Width and height of every chart, in pixels (SVG user units); the heatmap grows taller with
/// the number of tensors ([`heatmap_size`]).
pub const SIZE: (u32, u32) = (1100, 650);

/// The size of the heatmap of `rows` tensors: [`SIZE`] up to 28 rows, then 16 pixels a row
/// (150 tensors: 1100 x 2648).
#[must_use]
pub fn heatmap_size(rows: usize) -> (u32, u32) {
    let rows = u32::try_from(rows)
        .unwrap_or(u32::MAX)
        .min(charts::HEATMAP_MAX_ROWS as u32);
    (SIZE.0, SIZE.1.max(200 + 16 * rows))
}

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
            sweep: &a.total.sweep,
            recommendation,
            max_underflow: a.options.max_underflow,
            tensors: a
                .tensors
                .iter()
                .map(|t| (t.label(several), &t.histogram))
                .collect(),
        }
    }
}

/// The files [`analyze_plots`] may write in its directory.
pub const ANALYZE_PLOT_FILES: [&str; 6] = [
    "histogram.png",
    "histogram.svg",
    "sweep.png",
    "sweep.svg",
    "heatmap.png",
    "heatmap.svg",
];

/// The PNG text chunk, the SVG (and HTML) comment and the JSON key that mark a file as written
/// by mixprec.
const PNG_SIGNATURE: &[u8] = b"tEXtSoftware\0mixprec";
pub(crate) const SVG_SIGNATURE: &str = "<!-- written by mixprec -->";
pub(crate) const JSON_SIGNATURE: &str = "\"written_by\": \"mixprec\"";

/// Whether the file at `path` carries mixprec's signature (in its first 4 KiB).
fn written_by_mixprec(path: &Path) -> bool {
    use std::io::Read;
    let mut head = Vec::with_capacity(4096);
    let read = std::fs::File::open(path).and_then(|f| f.take(4096).read_to_end(&mut head));
    read.is_ok()
        && (head
            .windows(PNG_SIGNATURE.len())
            .any(|w| w == PNG_SIGNATURE)
            || [SVG_SIGNATURE, JSON_SIGNATURE]
                .iter()
                .any(|sig| head.windows(sig.len()).any(|w| w == sig.as_bytes())))
}

/// Checks that [`analyze_plots`] can write into `dir` without replacing anything mixprec did not
/// write: `dir` is missing (it will be created) or a directory, and each of
/// [`ANALYZE_PLOT_FILES`] in it is missing or a plot mixprec wrote.
///
/// # Errors
/// [`Error::BadFile`] naming `dir` when it exists and is not a directory, or naming the file
/// that mixprec would replace but did not write.
pub fn check_plots_dir(dir: &Path) -> Result<()> {
    check_outputs(dir, &ANALYZE_PLOT_FILES, "--plots")
}

/// Checks that the files `names` (relative to `dir`) can be written without replacing anything
/// mixprec did not write: `dir` is missing or a directory, and each file is missing or carries
/// mixprec's signature. `flag` names the option in messages.
///
/// # Errors
/// As [`check_plots_dir`].
pub fn check_outputs<S: AsRef<str>>(dir: &Path, names: &[S], flag: &str) -> Result<()> {
    let bad = |path: &Path, problem: String| Error::BadFile {
        path: path.to_path_buf(),
        problem,
    };
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => {
            return Err(bad(
                dir,
                format!(
                    "exists and is not a directory; {flag} needs a directory (created if missing)"
                ),
            ));
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(Error::Io {
                path: dir.to_path_buf(),
                source: e,
            });
        }
    }
    for name in names {
        let path = dir.join(name.as_ref());
        match std::fs::symlink_metadata(&path) {
            Err(_) => {}
            Ok(m) if m.is_file() && written_by_mixprec(&path) => {}
            Ok(_) => {
                return Err(bad(
                    &path,
                    format!(
                        "exists and was not written by mixprec; not replacing it (move it, or \
                         choose another {flag} directory)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Writes the `analyze` plots into `dir` (created if needed): `histogram.{png,svg}`,
/// `sweep.{png,svg}`, and with several tensors `heatmap.{png,svg}` (with one tensor, a heatmap
/// mixprec wrote there earlier is removed, so that the directory describes this analysis only).
/// Returns the paths written.
///
/// # Errors
/// [`check_plots_dir`]'s; [`Error::Io`] if the directory or a file cannot be written, or a
/// chart cannot be drawn.
pub fn analyze_plots(dir: &Path, p: &AnalyzePlots<'_>) -> Result<Vec<std::path::PathBuf>> {
    check_plots_dir(dir)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    let mut charts = vec![Chart::Histogram, Chart::Sweep];
    if p.tensors.len() > 1 {
        charts.push(Chart::Heatmap);
    } else {
        for ext in ["png", "svg"] {
            // check_plots_dir saw that any file of this name is mixprec's own.
            let stale = dir.join(format!("heatmap.{ext}"));
            if stale.is_file() {
                std::fs::remove_file(&stale).map_err(|e| Error::Io {
                    path: stale.clone(),
                    source: e,
                })?;
            }
        }
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
            Chart::Histogram => charts::analyze_histogram(area, p),
            Chart::Sweep => charts::analyze_sweep(area, p),
            Chart::Heatmap => charts::analyze_heatmap(area, p),
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

/// Renders a chart of `size` pixels into memory and writes it as a PNG (signed with a `tEXt`
/// chunk `Software: mixprec`), atomically.
///
/// # Errors
/// [`Error::Io`] naming `path`.
pub fn write_png(
    path: &Path,
    size: (u32, u32),
    draw: &dyn Fn(&DrawingArea<BitMapBackend<'_>, Shift>) -> DrawOutcome,
) -> Result<()> {
    register_font();
    let (w, h) = size;
    let mut rgb = vec![0u8; (w as usize) * (h as usize) * 3];
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
        enc.add_text_chunk("Software".to_string(), "mixprec".to_string())
            .map_err(std::io::Error::other)?;
        let mut writer = enc.write_header().map_err(std::io::Error::other)?;
        writer
            .write_image_data(&rgb)
            .map_err(std::io::Error::other)?;
        writer.finish().map_err(std::io::Error::other)
    })
}

/// Renders a chart of `size` pixels into an SVG string and writes it, atomically.
///
/// # Errors
/// [`Error::Io`] naming `path`.
pub fn write_svg(
    path: &Path,
    size: (u32, u32),
    draw: &dyn Fn(&DrawingArea<SVGBackend<'_>, Shift>) -> DrawOutcome,
) -> Result<()> {
    let svg = render_svg(path, size, draw)?;
    write_atomic(path, |out| out.write_all(svg.as_bytes()))
}

/// Renders a chart of `size` pixels into an SVG string (signed with a comment after the opening
/// tag); `path` names the chart in errors.
///
/// # Errors
/// [`Error::Io`] naming `path`.
pub fn render_svg(
    path: &Path,
    size: (u32, u32),
    draw: &dyn Fn(&DrawingArea<SVGBackend<'_>, Shift>) -> DrawOutcome,
) -> Result<String> {
    register_font();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| draw_error(path, e.to_string()))?;
        draw(&root).map_err(|e| draw_error(path, e))?;
        root.present()
            .map_err(|e| draw_error(path, e.to_string()))?;
    }
    if let Some(end) = svg.find('>') {
        svg.insert_str(end + 1, &format!("\n{SVG_SIGNATURE}"));
    }
    Ok(svg)
}
