//! `analyze --plots`: the charts written, sized to the tensors, and never over a file mixprec
//! did not write.

mod common;
use common::{Files, analyze_text, assert_bad, file_names, log_uniform, write_vectors};

#[test]
fn plots_are_written() {
    let (files, path) = Files::with_grads();
    let dir = files.path("plots");
    analyze_text(&path, &["--plots", dir.to_str().unwrap()]);
    for name in ["histogram", "sweep", "heatmap"] {
        let png = std::fs::read(dir.join(format!("{name}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let svg = std::fs::read_to_string(dir.join(format!("{name}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("log2"), "{name}");
    }
    // No temporary files left behind.
    let left = file_names(&dir);
    assert_eq!(left.len(), 6, "{left:?}");
}

#[test]
fn plots_never_replace_a_file_mixprec_did_not_write() {
    let (files, path) = Files::with_grads();
    let p = path.to_str().unwrap();
    // Not a directory: a regular file, a device.
    let file = files.path("plots.txt");
    std::fs::write(&file, "mine").unwrap();
    assert_bad(
        &["analyze", p, "--plots", file.to_str().unwrap()],
        "exists and is not a directory",
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    assert_bad(
        &["analyze", p, "--plots", "/dev/full"],
        "/dev/full: exists and is not a directory",
    );
    // A user's own histogram.png: left alone, nothing else written.
    let dir = files.path("plots");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("histogram.png"), "my own picture").unwrap();
    let d = dir.to_str().unwrap();
    assert_bad(
        &["analyze", p, "--plots", d],
        "histogram.png: exists and was not written by mixprec",
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("histogram.png")).unwrap(),
        "my own picture"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    // mixprec's own plots are replaced; a stale heatmap goes when there is one tensor.
    std::fs::remove_file(dir.join("histogram.png")).unwrap();
    for _ in 0..2 {
        analyze_text(&path, &["--plots", d]);
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 6);
    analyze_text(&path, &["--tensor", "tiny", "--plots", d]);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 4);
    assert!(!dir.join("heatmap.png").exists());
}

/// The PNG's (width, height) from its IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

#[test]
fn heatmap_grows_with_the_tensors() {
    let files = Files::new();
    let path = files.path("many.safetensors");
    let data: Vec<(String, Vec<f32>)> = (0..150)
        .map(|i| {
            (
                format!("layers.{}.w{}", i / 10, i % 10),
                log_uniform(i, 50, -20.0 - (i % 7) as f64, 0.0, 97),
            )
        })
        .collect();
    write_vectors(&path, &data);
    let dir = files.path("plots");
    analyze_text(&path, &["--plots", dir.to_str().unwrap()]);
    let png = std::fs::read(dir.join("heatmap.png")).unwrap();
    assert_eq!(png_size(&png), (1100, 200 + 16 * 150));
    let svg = std::fs::read_to_string(dir.join("heatmap.svg")).unwrap();
    assert!(
        svg.contains("layers.14.w9") && svg.contains("subnormal at 2^"),
        "labels and edges"
    );
    // The colour bar's scale in one unit: every tick a percentage, down to the palest.
    let texts: Vec<&str> = svg
        .split("</text>")
        .filter_map(|t| Some(t.rsplit('>').next()?.trim()))
        .collect();
    for tick in [
        "10%",
        "1%",
        "0.1%",
        "0.01%",
        "0.001%",
        "0.0001%",
        "palest: 0.0001%",
    ] {
        assert!(texts.contains(&tick), "{tick} in {texts:?}");
    }
    assert!(!texts.iter().any(|t| t.contains("e-")), "{texts:?}");
    assert_eq!(
        png_size(&std::fs::read(dir.join("sweep.png")).unwrap()),
        (1100, 650)
    );
}
