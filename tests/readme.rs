//! The README quotes the binary: each quoted command's block is what the binary prints now (the
//! blocks marked as excerpts with `...` are compared line by line where they quote), and the
//! reports index lists every folder of reports/.

use std::path::Path;

mod common;
use common::{mixprec, ok};

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The lines of the README's ```text block that starts with `$ COMMAND`, without that line.
fn quoted(readme: &str, command: &str) -> Vec<String> {
    let start = readme
        .find(&format!("```text\n$ {command}\n"))
        .unwrap_or_else(|| panic!("no block for {command}"));
    let body = &readme[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let body = &body[..body.find("```").unwrap()];
    body.lines().skip(1).map(str::to_string).collect()
}

#[test]
fn quoted_outputs_are_the_binarys() {
    let readme = read("README.md");
    for (command, args) in [
        (
            "mixprec explain 2049 --format fp16",
            &["explain", "2049", "--format", "fp16"][..],
        ),
        ("mixprec formats", &["formats"]),
    ] {
        let printed = ok(mixprec(args));
        let lines: Vec<&str> = printed.lines().collect();
        assert_eq!(quoted(&readme, command), lines, "{command}");
    }
}

#[test]
fn the_reports_index_lists_every_folder() {
    let index = read("reports/README.md");
    let reports = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports");
    for entry in std::fs::read_dir(reports).unwrap() {
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
