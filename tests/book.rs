//! The book (`docs/src/*.md`) and the README quote the binary: every ```text block that starts
//! with `$ COMMAND` holds what the command prints now. Each page's commands run in order in `sh`,
//! in a scratch directory of the page's own (so a page's later commands read its earlier runs),
//! with the binary under test first on the `PATH` and the repository's `analyses/` and `tests/`
//! linked in. A block with a line `...` is an excerpt, whose quoted lines must appear in order. A
//! training run's time (`1.8 s`) and trailing spaces are not compared. Also: the reports index
//! lists every folder of reports/.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

#[path = "../examples/gradients.rs"]
#[allow(dead_code)] // its `main` is the example's
mod gradients;

/// The quoted commands not run here, by their start, with why. Each quote's lines must instead
/// appear in the committed page named (HTML-escaped as pages are), when one is named.
const NOT_RUN: [(&str, &str, Option<&str>); 3] = [
    (
        "mixprec grid --config analyses/underflow/grid.json",
        "160 runs of 800 steps: minutes on 2 cores (analyses/underflow/grids.sh regenerates them)",
        None,
    ),
    (
        "mixprec report runs/ls-grid",
        "the report of the grid above, committed as reports/underflow-grid",
        Some("reports/underflow-grid/index.html"),
    ),
    (
        "mixprec report plan --out page",
        "the plan directory the chapter's Python writes; GPT-2's, committed as reports/plan/gpt2",
        Some("reports/plan/gpt2/index.html"),
    ),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap()
}

/// The README, then the book's chapters, by name.
fn pages() -> Vec<String> {
    let mut chapters: Vec<String> = std::fs::read_dir(root().join("docs/src"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/src/{name}"))
        .collect();
    chapters.sort();
    [vec!["README.md".to_string()], chapters].concat()
}

/// One quoted command and the lines quoted after it (up to the next command or the block's end).
struct Quote {
    command: String,
    lines: Vec<String>,
}

/// The quotes of a page, in order: the ```text blocks whose first line is `$ COMMAND`.
fn quotes(page: &str) -> Vec<Quote> {
    let mut quotes: Vec<Quote> = Vec::new();
    // Outside a block: None; inside: whether it quotes commands, and whether it is at its first line.
    let mut block: Option<(bool, bool)> = None;
    for line in page.lines() {
        if line.starts_with("```") {
            block = match block {
                Some(_) => None,
                None => Some((line == "```text", true)),
            };
            continue;
        }
        let Some((true, first)) = block else { continue };
        if let Some(command) = line.strip_prefix("$ ") {
            quotes.push(Quote {
                command: command.to_string(),
                lines: Vec::new(),
            });
        } else if first {
            block = Some((false, false)); // a text block that quotes no command
            continue;
        } else if let Some(quote) = quotes.last_mut() {
            quote.lines.push(line.to_string());
        }
        block = Some((true, false));
    }
    quotes
}

/// `line` without a training run's time (`..., 1.8 s -> runs/x` becomes `..., _ s -> runs/x`)
/// and without trailing spaces.
fn comparable(line: &str) -> String {
    let line = line.trim_end();
    if let Some(arrow) = line.find(" s -> ")
        && let Some(comma) = line[..arrow].rfind(", ")
        && line[comma + 2..arrow]
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.')
    {
        return format!("{}_{}", &line[..comma + 2], &line[arrow..]);
    }
    line.to_string()
}

/// What is wrong with `printed` as the output `quoted` quotes, if anything.
fn mismatch(quoted: &[String], printed: &str) -> Option<String> {
    let printed: Vec<String> = printed.lines().map(comparable).collect();
    let quoted: Vec<String> = quoted.iter().map(|l| comparable(l)).collect();
    if quoted.iter().any(|l| l == "...") {
        let mut rest = printed.iter();
        let missing = quoted
            .iter()
            .filter(|l| *l != "...")
            .find(|l| !rest.any(|p| p == *l))?;
        return Some(format!("not printed (in this order): {missing}"));
    }
    (quoted != printed).then(|| {
        format!(
            "quoted:\n{}\nprinted:\n{}",
            quoted.join("\n"),
            printed.join("\n")
        )
    })
}

/// A scratch directory for `page`, with `analyses/`, `tests/` and, when the page reads it, the
/// example gradients of reports/analyze.
fn scratch(page: &str, text: &str) -> PathBuf {
    let dir = common::fresh_dir(&page.replace('/', "-"));
    for linked in ["analyses", "tests"] {
        std::os::unix::fs::symlink(root().join(linked), dir.join(linked)).unwrap();
    }
    if text.contains("grads.safetensors") {
        gradients::write(&dir.join("grads.safetensors"), 1 << 22).unwrap();
    }
    dir
}

#[test]
fn every_quoted_output_is_the_binarys() {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_mixprec")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (mut run, mut failures) = (0, Vec::new());
    for page in pages() {
        let text = read(&page);
        let quotes = quotes(&text);
        if quotes.is_empty() {
            continue;
        }
        let dir = scratch(&page, &text);
        for quote in &quotes {
            let context = format!("{page}: $ {}", quote.command);
            if let Some((_, _, committed)) = NOT_RUN
                .iter()
                .find(|(start, _, _)| quote.command.starts_with(start))
            {
                if let Some(committed) = committed {
                    let html = read(committed);
                    let page_text = html
                        .replace("&lt;", "<")
                        .replace("&gt;", ">")
                        .replace("&quot;", "\"")
                        .replace("&#39;", "'")
                        .replace("&amp;", "&");
                    for line in quote.lines.iter().filter_map(|l| l.strip_prefix("- ")) {
                        if !page_text.contains(line) {
                            failures.push(format!("{context}: not in {committed}: {line}"));
                        }
                    }
                }
                continue;
            }
            let out = Command::new("sh")
                .arg("-c")
                .arg(&quote.command)
                .current_dir(&dir)
                .env("PATH", &path)
                .output()
                .unwrap();
            run += 1;
            if !out.status.success() {
                failures.push(format!(
                    "{context}: {}\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
            } else if let Some(why) = mismatch(&quote.lines, &String::from_utf8_lossy(&out.stdout))
            {
                failures.push(format!("{context}: {why}"));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(run >= 20, "only {run} quoted commands found");
}

/// A command listed as not run is still quoted somewhere (the list does not outlive its quotes).
#[test]
fn every_command_not_run_is_quoted() {
    let all: Vec<Quote> = pages().iter().flat_map(|p| quotes(&read(p))).collect();
    for (start, why, _) in NOT_RUN {
        assert!(
            all.iter().any(|q| q.command.starts_with(start)),
            "no page quotes `{start}` ({why})"
        );
    }
}

#[test]
fn the_reports_index_lists_every_folder() {
    let index = read("reports/README.md");
    for entry in std::fs::read_dir(root().join("reports")).unwrap() {
        let entry = entry.unwrap();
        if entry.path().is_dir() {
            let name = entry.file_name().into_string().unwrap();
            assert!(
                index.contains(&format!("`{name}/`")),
                "reports/README.md does not list {name}/"
            );
        }
    }
}
