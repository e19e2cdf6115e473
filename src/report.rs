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

pub mod analyze;
pub mod block;
pub mod charts;
pub mod formats;
pub mod grid;
pub mod html;
pub mod page;
pub mod plan;
pub mod replay;
pub mod runs;
pub mod section;

pub use analyze::{AnalyzePlots, analyze_plots, write_analysis};
pub use grid::GridReport;
pub use page::Report;
pub use runs::{ReportOptions, RunData};
pub use section::Section;

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::io::write_atomic;
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
        .min(analyze::HEATMAP_MAX_ROWS as u32);
    (SIZE.0, SIZE.1.max(200 + 16 * rows))
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
    // The guarded open: a FIFO or a device in the way is not mixprec's, and must not hang this.
    let read = crate::io::open_log(path)
        .map_err(std::io::Error::other)
        .and_then(|f| f.take(4096).read_to_end(&mut head));
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

/// Removes the plot `stem.{png,svg}` from `dir` where it is a file: one of a kind this analysis
/// does not draw, left by an earlier one, so that the directory describes this analysis only.
/// The caller has seen ([`check_outputs`]) that any file of that name is mixprec's own.
///
/// # Errors
/// [`Error::Io`] naming a file that cannot be removed.
/// `paths`, written under a staging directory, at their place in `dir` (by file name).
pub(crate) fn rebase(paths: &[std::path::PathBuf], dir: &Path) -> Vec<std::path::PathBuf> {
    paths
        .iter()
        .filter_map(|p| p.file_name())
        .map(|name| dir.join(name))
        .collect()
}

pub(crate) fn remove_stale_plot(dir: &Path, stem: &str) -> Result<()> {
    for ext in ["png", "svg"] {
        let path = dir.join(format!("{stem}.{ext}"));
        if path.is_file() {
            std::fs::remove_file(&path).map_err(Error::io_at(&path))?;
        }
    }
    Ok(())
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
            return Err(Error::io(dir, e));
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

/// Draws a chart onto `root` (white, then `draw`) and flushes it to the backend's buffer; `path`
/// names the chart in errors.
fn render<DB: DrawingBackend>(
    path: &Path,
    root: DrawingArea<DB, Shift>,
    draw: &dyn Fn(&DrawingArea<DB, Shift>) -> DrawOutcome,
) -> Result<()> {
    register_font();
    root.fill(&WHITE)
        .map_err(|e| draw_error(path, e.to_string()))?;
    draw(&root).map_err(|e| draw_error(path, e))?;
    root.present().map_err(|e| draw_error(path, e.to_string()))
}

pub(crate) fn draw_error(path: &Path, e: String) -> Error {
    Error::io(
        path,
        std::io::Error::other(format!("cannot draw the chart: {e}")),
    )
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
    let (w, h) = size;
    let mut rgb = vec![0u8; (w as usize) * (h as usize) * 3];
    render(
        path,
        BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area(),
        draw,
    )?;
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
    let mut svg = String::new();
    render(
        path,
        SVGBackend::with_string(&mut svg, size).into_drawing_area(),
        draw,
    )?;
    if let Some(end) = svg.find('>') {
        svg.insert_str(end + 1, &format!("\n{SVG_SIGNATURE}"));
    }
    Ok(svg)
}
