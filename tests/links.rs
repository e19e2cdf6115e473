//! The links of README.md, ARCHITECTURE.md and the book (`docs/src/*.md`) lead somewhere: every
//! relative link (outside code) names a file or folder that exists, and its `#anchor` a heading of
//! that page, spelled as GitHub and mdBook make heading ids. Every chapter is in SUMMARY.md.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The pages checked: the README, ARCHITECTURE.md, then the book's sources.
fn pages() -> Vec<PathBuf> {
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root().join("docs/src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.sort();
    [
        vec![root().join("README.md"), root().join("ARCHITECTURE.md")],
        chapters,
    ]
    .concat()
}

/// The page's lines outside fenced code blocks, with inline code spans removed.
fn prose(page: &str) -> Vec<String> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans: text between backticks (a line's odd backtick, if any, starts none).
        let parts: Vec<&str> = line.split('`').collect();
        let unmatched = parts.len().is_multiple_of(2); // an odd number of backticks
        let kept = parts
            .iter()
            .enumerate()
            .filter(|(i, _)| i.is_multiple_of(2) || unmatched && *i == parts.len() - 1)
            .map(|(_, p)| *p)
            .collect::<Vec<_>>()
            .join(" ");
        lines.push(kept);
    }
    lines
}

/// The targets of the inline links and images on `line`: what stands in `](...)`, up to the
/// parenthesis that closes it, without a title.
fn targets(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let mut depth = 0;
        let end = after.char_indices().find(|&(_, c)| {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => return true,
                ')' => depth -= 1,
                _ => {}
            }
            false
        });
        let Some((end, _)) = end else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        found.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    found
}

/// A heading's id as GitHub and mdBook make it: lower case, spaces to `-`, only letters, digits,
/// `-` and `_` kept (the code spans' backticks dropped).
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_lowercase().next().unwrap())
            } else if c == ' ' {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The ids of a page's headings; a repeated heading gets `-1`, `-2`, ... as on GitHub.
fn anchors(page: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut fenced = false;
    let mut ids = Vec::new();
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let id = slug(line.trim_start_matches('#').trim());
        let n = seen.entry(id.clone()).or_insert(0);
        ids.push(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    ids
}

/// What is wrong with the link `target` on `page`, if anything.
fn broken(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().unwrap().join(path)
    };
    if !file.exists() {
        return Some(format!("{target}: no such file"));
    }
    if anchor.is_empty() {
        return None;
    }
    if file.extension().is_none_or(|e| e != "md") {
        return Some(format!(
            "{target}: an anchor into a page that is not markdown"
        ));
    }
    let text = std::fs::read_to_string(&file).unwrap();
    (!anchors(&text).iter().any(|a| a == anchor))
        .then(|| format!("{target}: no heading #{anchor} in {}", file.display()))
}

#[test]
fn every_relative_link_and_anchor_exists() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        for (n, line) in prose(&text).iter().enumerate() {
            for target in targets(line) {
                checked += 1;
                if let Some(why) = broken(&page, &target) {
                    failures.push(format!("{}:{}: {why}", page.display(), n + 1));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "broken links:\n{}",
        failures.join("\n")
    );
    assert!(checked > 50, "only {checked} links found");
}

#[test]
fn every_chapter_is_in_the_summary() {
    let summary = std::fs::read_to_string(root().join("docs/src/SUMMARY.md")).unwrap();
    let listed: Vec<String> = prose(&summary).iter().flat_map(|l| targets(l)).collect();
    for page in pages()
        .iter()
        .filter(|p| p.starts_with(root().join("docs/src")))
    {
        let name = page.file_name().unwrap().to_str().unwrap();
        assert!(
            name == "SUMMARY.md" || listed.iter().any(|t| t == name),
            "docs/src/SUMMARY.md does not list {name}"
        );
    }
}

/// The parser itself, on the cases the pages rely on.
#[test]
fn links_anchors_and_code_are_read_as_github_reads_them() {
    assert_eq!(
        targets("see [a](x.md#b-c) and ![i](../y.png \"t\") or [(p)](f(1).md)"),
        ["x.md#b-c", "../y.png", "f(1).md"]
    );
    assert_eq!(
        prose("a `[x](nowhere.md)` b\n```\n[y](nowhere.md)\n```\n[z](z.md)"),
        ["a   b", "[z](z.md)"]
    );
    assert_eq!(
        anchors(
            "# Choosing a loss scale: `analyze`\n## `--json`, `--plots`, `--report`\n## A\n## A"
        ),
        [
            "choosing-a-loss-scale-analyze",
            "--json---plots---report",
            "a",
            "a-1"
        ]
    );
}
