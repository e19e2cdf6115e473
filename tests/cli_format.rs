//! The real binary: `formats`, `explain` and `quantize`, happy paths and every bad input.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

mod common;
use common::stochastic;

/// The binary running with `args`, its standard input, output and error piped.
fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_mixprec"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs")
}

/// Runs the binary with `args` on `stdin` (written on a thread, so that a child that stops
/// reading, or answers as it reads, cannot block it); returns what the child wrote.
fn mixprec_bytes(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = spawn(args);
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn mixprec(args: &[&str], stdin: &str) -> Output {
    mixprec_bytes(args, stdin.as_bytes())
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// The JSON rows `mixprec ARGS` prints, which must succeed.
fn json_rows(args: &[&str]) -> Vec<serde_json::Value> {
    let o = mixprec(args, "");
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Each of `rows` has exactly the keys `keys` (in any order).
fn assert_keys(rows: &[serde_json::Value], keys: &[&str]) {
    for row in rows {
        let obj = row.as_object().unwrap();
        assert_eq!(obj.len(), keys.len(), "{row}");
        for k in keys {
            assert!(obj.contains_key(*k), "{k}");
        }
    }
}

/// Exit code 2, one line on stderr that mentions `needle`, no panic.
fn assert_bad(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("mixprec: "), "{err}");
    assert!(err.contains(needle), "'{needle}' not in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn formats_table_and_json() {
    let o = mixprec(&["formats"], "");
    assert!(o.status.success());
    let table = stdout(&o);
    for name in [
        "fp32", "tf32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "65504", "448", "57344",
    ] {
        assert!(table.contains(name), "{name} missing from\n{table}");
    }
    let rows = json_rows(&["formats", "--json", "fp16", "e4m3fn", "e4m3", "e3m2"]);
    assert_eq!(rows.len(), 4);
    let keys = [
        "name",
        "exponent_bits",
        "mantissa_bits",
        "bias",
        "max",
        "min_normal",
        "min_subnormal",
        "epsilon",
        "log2_max",
        "log2_min_normal",
        "log2_min_subnormal",
        "has_infinity",
        "has_nan",
    ];
    assert_keys(&rows, &keys);
    assert_eq!(rows[0]["name"], "fp16");
    assert_eq!(rows[0]["max"], 65504.0);
    assert_eq!(rows[0]["min_subnormal"], 2f64.powi(-24));
    assert_eq!(rows[0]["bias"], 15);
    assert_eq!(rows[0]["log2_min_subnormal"], -24.0);
    assert_eq!(rows[0]["log2_min_normal"], -14.0);
    assert_eq!(rows[0]["log2_max"], 65504f64.log2());
    assert_eq!(rows[1]["name"], "fp8-e4m3");
    assert_eq!(rows[1]["max"], 448.0);
    assert_eq!(rows[1]["has_infinity"], false);
    assert_eq!(rows[2]["max"], 240.0);
    assert_eq!(rows[2]["has_infinity"], true);
    assert_eq!(rows[3]["epsilon"], 0.25);
    let all = json_rows(&["formats", "--json"]);
    // The 9 element presets, then the 8 block formats with their own keys.
    assert_eq!(all.len(), 9 + 8);
    let fp4 = &all[8];
    assert_eq!(fp4["name"], "fp4-e2m1");
    assert_eq!(fp4["max"], 6.0);
    assert_eq!(fp4["min_subnormal"], 0.5);
    assert_eq!(
        (&fp4["has_infinity"], &fp4["has_nan"]),
        (&false.into(), &false.into())
    );
    assert_eq!(all[6]["max"], 7.5);
    assert_eq!(all[7]["max"], 28.0);
    assert_eq!(all[4]["has_nan"], true);
}

/// The table's note is true of the rows shown, and each format is shown once, however named.
#[test]
fn formats_note_fits_the_rows_and_each_format_shows_once() {
    // A custom e2m1 has inf and NaN (IEEE-like), fp4-e2m1 neither.
    let custom = stdout(&mixprec(&["formats", "e2m1"], ""));
    assert!(!custom.contains("no inf or NaN"), "{custom}");
    let fp4 = stdout(&mixprec(&["formats", "fp4-e2m1"], ""));
    assert!(
        fp4.contains(" fp4-e2m1 has no inf or NaN: it saturates."),
        "{fp4}"
    );
    let all = stdout(&mixprec(&["formats"], ""));
    assert!(
        all.contains(" fp6-e2m3, fp6-e3m2 and fp4-e2m1 have no inf or NaN: they saturate."),
        "{all}"
    );
    let twice = stdout(&mixprec(
        &["formats", "fp8-e4m3", "e4m3fn", "mxfp4", "mxfp4"],
        "",
    ));
    assert_eq!(twice.matches("\nfp8-e4m3 ").count(), 1, "{twice}");
    assert_eq!(twice.matches("\nmxfp4 ").count(), 1, "{twice}");
    assert_eq!(json_rows(&["formats", "fp16", "fp16", "--json"]).len(), 1);
}

#[test]
fn formats_bad_name() {
    #[rustfmt::skip]
    let cases: [(&[&str], &str); 5] = [
        (&["formats", "fp12"], "unknown format 'fp12'"),
        (&["formats", "e9m2"], "unknown format 'e9m2'"),
        (&["formats", "e1m1"], "eXmY with X in 2..=8 and Y in 1..=23"),
        // The message lists every preset (from the list the parser reads).
        (&["explain", "1", "--format", "fp12"], "expected one of fp32, tf32, fp16, bf16, fp8-e4m3, fp8-e5m2, fp6-e2m3, fp6-e3m2, fp4-e2m1, or eXmY"),
        (&["formats", "--bogus"], "--bogus"),
    ];
    for (args, needle) in cases {
        assert_bad(&mixprec(args, ""), needle);
    }
}

#[test]
fn help_says_e4m3_is_not_fp8_e4m3() {
    for cmd in ["formats", "explain", "quantize"] {
        let o = mixprec(&[cmd, "--help"], "");
        assert!(o.status.success());
        let text = stdout(&o);
        assert!(
            text.contains("e4m3") && text.contains("240") && text.contains("448"),
            "{cmd}:\n{text}"
        );
    }
}

#[test]
fn quantize_values_and_bits() {
    let input = "0.1\n  1e-8 \nNaN\n-INF\ninf\n-1e-30\n65520\n1\n3.14159\n-0\n1e300\n2.5E-3\n";
    let o = mixprec(&["quantize", "--format", "fp16"], input);
    assert!(o.status.success(), "{}", stderr(&o));
    let want = "0.0999755859375\n0\nNaN\n-inf\ninf\n-0\ninf\n1\n3.140625\n-0\ninf\n0.0025005340576171875\n";
    assert_eq!(stdout(&o), want);
    // Every printed value parses back to exactly the rounded binary64 value.
    for (line, x) in stdout(&o).lines().zip(input.lines()) {
        let x: f64 = x.trim().parse().unwrap();
        let back: f64 = line.parse().unwrap();
        let r = mixprec::format::Rounder::new(mixprec::format::FP16, Default::default()).round(x);
        assert!(
            back.to_bits() == r.to_bits() || (back.is_nan() && r.is_nan()),
            "{line}"
        );
    }
    #[rustfmt::skip]
    let cases: [(&[&str], &str, &str); 7] = [
        (&["-f", "fp16", "--output", "bits"], "0.1\n1e-8\nnan\n-inf\n65520\n1\n-0\n", "0x2e66\n0x0000\n0x7e00\n0xfc00\n0x7c00\n0x3c00\n0x8000\n"),
        (&["-f", "fp8-e4m3", "--output", "bits"], "448\n465\n-1000\n0.0009\n0.001\n", "0x7e\n0x7f\n0xff\n0x00\n0x01\n"),
        (&["-f", "fp8-e4m3", "--overflow", "saturate"], "1000\n-inf\n", "448\n-448\n"),
        (&["-f", "fp16", "--subnormals", "off"], "3e-6\n-3e-6\n7e-5\n", "0\n-0\n0.0000699758529663086\n"),
        (&["-f", "e3m2", "--rounding", "up"], "0.3\n-0.3\n", "0.3125\n-0.25\n"),
        (&["-f", "bf16", "--output", "bits"], "1\n", "0x3f80\n"),
        (&["-f", "e2m1", "--output", "bits"], "1\n", "0x2\n"),
    ];
    for (flags, input, want) in cases {
        let o = mixprec(&[&["quantize"], flags].concat(), input);
        assert_eq!(stdout(&o), want, "{flags:?}");
    }
}

#[test]
fn quantize_stochastic_is_seeded_and_reproducible() {
    let input = "1.0003\n".repeat(2000);
    let run = |seed: &str| {
        stdout(&mixprec(
            &["quantize", "-f", "fp16", "-r", "stochastic", "--seed", seed],
            &input,
        ))
    };
    let a = run("1");
    assert_eq!(a, run("1"));
    assert_ne!(a, run("2"));
    // 1.0003 lies 0.307 of the way from 1 to 1 + 2^-10.
    let ups = a.lines().filter(|l| *l != "1").count();
    assert!((450..=780).contains(&ups), "{ups}");
}

#[test]
fn quantize_streams_many_lines() {
    let n = 300_000;
    let input: String = (0..n).map(|i| format!("{}\n", i as f64 * 0.37)).collect();
    let o = mixprec(&["quantize", "-f", "bf16"], &input);
    assert!(o.status.success());
    let out = stdout(&o);
    assert_eq!(out.lines().count(), n);
    let r = mixprec::format::Rounder::new(mixprec::format::BF16, Default::default());
    for (i, line) in out.lines().enumerate().step_by(997) {
        assert_eq!(
            line.parse::<f64>().unwrap(),
            r.round(i as f64 * 0.37),
            "line {i}"
        );
    }
}

#[test]
fn quantize_bad_input() {
    let o = mixprec(&["quantize", "-f", "fp16"], "1\n2\nx1\n4\n");
    assert_bad(&o, "line 3: 'x1' is not a number");
    assert_eq!(stdout(&o), "1\n2\n");
    assert_bad(
        &mixprec(&["quantize", "-f", "fp16"], "1\n\n3\n"),
        "line 2: '' is not a number",
    );
    assert_bad(&mixprec(&["quantize", "-f", "fp16"], "1e5000x\n"), "line 1");
    assert_bad(&mixprec(&["quantize", "-f", "fp16"], "1,5\n"), "'1,5'");
    assert_bad(
        &mixprec(&["quantize", "-f", "fp17"], ""),
        "unknown format 'fp17'",
    );
    // A bad value for any option is named in the error.
    for (flag, value) in [
        ("-r", "nearest-odd"),
        ("--overflow", "wrap"),
        ("--subnormals", "maybe"),
        ("--output", "hex"),
        ("--seed", "-1"),
    ] {
        let o = mixprec(&["quantize", "-f", "fp16", flag, value], "");
        assert_bad(&o, value);
        let err = stderr(&o);
        assert!(
            err.matches("invalid value").count() <= 1,
            "said once: {err}"
        );
    }
    // Invalid UTF-8 is a line that is not a number, not a crash.
    assert_bad(&mixprec_bytes(&["quantize"], b"1\n\xff\xfe\n"), "line 2");
}

#[test]
fn quantize_answers_each_line_before_the_input_ends() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_mixprec"))
        .args(["quantize", "-f", "fp16"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    for (x, want) in [("0.1", "0.0999755859375"), ("65520", "inf")] {
        writeln!(input, "{x}").unwrap();
        input.flush().unwrap();
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), want);
    }
    drop(input);
    assert!(child.wait().unwrap().success());
}

#[test]
fn quantize_edges_of_the_stream() {
    // A byte-order mark before the first number is not part of it.
    assert_eq!(
        stdout(&mixprec(&["quantize"], "\u{feff}1.5\n2\n")),
        "1.5\n2\n"
    );
    // A reader that stops early is not an error.
    let input = "1\n".repeat(2_000_000);
    let mut child = spawn(&["quantize"]);
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let mut first = [0u8; 2];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert_eq!(&first, b"1\n");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A bad line deep in the stream is reported with its own number.
    let mut big = "0.5\n".repeat(400_000);
    big += "oops\n";
    assert_bad(&mixprec(&["quantize"], &big), "line 400001: 'oops'");
}

#[test]
fn missing_command_and_io_errors_are_one_line() {
    assert_bad(
        &mixprec(&[], ""),
        "missing command: one of demo, formats, explain, quantize",
    );
    let o = Command::new(env!("CARGO_BIN_EXE_mixprec"))
        .args(["quantize"])
        .stdin(std::fs::File::open("/").unwrap())
        .output()
        .unwrap();
    assert_bad(&o, "Is a directory");
    let err = stderr(&o);
    assert_eq!(err.matches("Is a directory").count(), 1, "{err}");
}

/// `formats` prints ranges as powers of two; `--plots` writes the three figures (whose data the
/// library's tests check) and the band of typical gradients, taken by default from the underflow
/// study's FP32 run: trained here, its captured gradients give the same band.
#[test]
fn formats_ranges_and_plots() {
    let t = stdout(&mixprec(&["formats"], ""));
    assert!(t.contains("2^-24 / 2^-14 .. (2 - 2^-10) x 2^15"), "{t}");
    // A max just under a power of two is not printed as that power.
    let custom = stdout(&mixprec(&["formats", "e2m23", "e4m20"], ""));
    assert!(
        custom.contains(" 3.9999998e0 ") && custom.contains(" 2.559999e2 "),
        "{custom}"
    );
    assert!(t.contains("2^-9 / 2^-6 .. (2 - 2^-2) x 2^8"), "{t}");
    let root = std::env::temp_dir().join(format!("mixprec-formats-plots-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let plots = root.join("plots");
    let o = mixprec(&["formats", "--plots", plots.to_str().unwrap()], "");
    let t = stdout(&o);
    let band = "gradient band (98% of values): 2^-48..2^-24, from gradients of analyses/underflow/fp32.json (MLP on digits, loss x 2^-16)";
    assert!(t.contains(band), "{t}");
    for name in ["number-line", "ranges", "spacing"] {
        let png = std::fs::read(plots.join(format!("{name}.png"))).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{name}");
        let svg = std::fs::read_to_string(plots.join(format!("{name}.svg"))).unwrap();
        assert!(svg.contains("<svg"), "{name}");
    }
    let run = root.join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_mixprec"))
        .args(["train", "--config", "analyses/underflow/fp32.json", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let with_gradients = |from: &Path| {
        let (plots, from) = (plots.to_str().unwrap(), from.to_str().unwrap());
        mixprec(&["formats", "--plots", plots, "--gradients", from], "")
    };
    let t = stdout(&with_gradients(&run));
    assert!(
        t.contains("gradient band (98% of values): 2^-48..2^-24, from gradients of"),
        "{t}"
    );
    assert_bad(&mixprec(&["formats", "--gradients", "x"], ""), "--plots");
    assert_bad(&with_gradients(&root), "not a run directory");
    std::fs::write(root.join("mine.png"), "x").unwrap();
    std::fs::write(plots.join("ranges.png"), "x").unwrap();
    assert_bad(
        &mixprec(&["formats", "--plots", plots.to_str().unwrap()], ""),
        "not written by mixprec",
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// The OCP fp6/fp4 elements: saturation under the default overflow rule, every value a
/// pattern, NaN kept in values but refused as bits (it has no pattern), and `explain` saying so.
#[test]
fn ocp_fp4_quantize_and_explain() {
    let o = mixprec(
        &["quantize", "--format", "fp4-e2m1"],
        "1.2\n-7\ninf\nnan\n0.2\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "1\n-6\n6\nNaN\n0\n");
    let o = mixprec(
        &["quantize", "--format", "fp4-e2m1", "--output", "bits"],
        "6\n-0.5\n",
    );
    assert_eq!(stdout(&o), "0x7\n0x9\n");
    let o = mixprec(
        &["quantize", "--format", "fp6-e3m2", "--output", "bits"],
        "28\nnan\n",
    );
    assert_bad(&o, "line 2: NaN has no bit pattern in fp6-e3m2");
    assert_eq!(
        stdout(&o),
        "0x1f\n",
        "the lines before the error are written"
    );
    let o = mixprec(&["explain", "nan", "--format", "fp4-e2m1"], "");
    assert!(
        stdout(&o).contains("fp4-e2m1 has no NaN pattern"),
        "{}",
        stdout(&o)
    );
    let o = mixprec(&["explain", "100", "--format", "fp6-e2m3"], "");
    let text = stdout(&o);
    assert!(text.contains("7.5 (0x1f) < x < no finite value"), "{text}");
    assert!(text.contains("giving 7.5 (clamped)"), "{text}");
    let o = mixprec(&["explain", "0x3f", "--format", "fp6-e3m2"], "");
    assert!(stdout(&o).contains("decodes to -28"), "{}", stdout(&o));
}

#[test]
fn formats_lists_block_formats() {
    let table = stdout(&mixprec(&["formats"], ""));
    let blocks = table
        .split("block format")
        .nth(1)
        .expect("a second table of block formats");
    for (name, shape, scale) in [
        ("mxfp8-e4m3", "1 x 32", "e8m0"),
        ("mxfp4", "1 x 32", "e8m0"),
        ("nvfp4", "1 x 16", "e4m3 + fp32 per tensor"),
        ("fp8-e4m3@1x128", "1 x 128", "fp32"),
        ("fp8-e4m3@128x128", "128 x 128", "fp32"),
    ] {
        let row = blocks
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing from\n{blocks}"));
        assert!(row.contains(shape) && row.ends_with(scale), "{row}");
    }
    let rows = json_rows(&["formats", "--json"]);
    let keys = [
        "name",
        "scheme",
        "block_rows",
        "block_cols",
        "element",
        "element_max",
        "element_min_subnormal",
        "scale",
    ];
    assert_keys(&rows[9..], &keys);
    assert_eq!(rows[9]["name"], "mxfp8-e4m3");
    // The scheme's machine name beside the scale's words.
    assert_eq!(
        (&rows[9]["scheme"], &rows[9]["scale"]),
        (&"mx".into(), &"e8m0".into())
    );
    assert_eq!(rows[14]["name"], "nvfp4");
    assert_eq!(rows[14]["scheme"], "nvfp4");
    assert_eq!(rows[16]["scheme"], "tile");
    assert_eq!(rows[14]["block_cols"], 16);
    assert_eq!(rows[16]["block_rows"], 128);
    assert_eq!(rows[16]["element_max"], 448.0);
    // Names of either kind, in their tables; a tile by any element.
    let v = json_rows(&["formats", "bf16@4x8", "fp16", "--json"]);
    assert_eq!(v[0]["name"], "fp16");
    assert_eq!(v[1]["name"], "bf16@4x8");
    assert_eq!(v[1]["block_cols"], 8);
    #[rustfmt::skip]
    let cases: [(&[&str], &str); 3] = [
        (&["formats", "mxfp9"], "unknown format 'mxfp9'"),
        (&["formats", "fp8-e4m3@0x1"], "unknown block format 'fp8-e4m3@0x1'"),
        (&["formats", "nvfp4", "--plots", "/nonexistent/x"], "--plots draws element formats"),
    ];
    for (args, needle) in cases {
        assert_bad(&mixprec(args, ""), needle);
    }
}

/// The rounded values of `input` through `mixprec quantize ARGS`, one per line.
fn quantized(args: &[&str], input: &str) -> Vec<f64> {
    let o = mixprec(args, input);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o).lines().map(|l| l.parse().unwrap()).collect()
}

#[test]
fn quantize_block_formats() {
    // One MX block: amax 1000 sets the scale 2, under which 0.001 underflows.
    assert_eq!(
        quantized(&["quantize", "-f", "mxfp8-e4m3"], "1000\n3\n0.001\n-2.5\n"),
        [896.0, 3.0, 0.0, -2.5]
    );
    // A batch per row of 2 (the tile's width): each pair has its own scale.
    let got = quantized(&["quantize", "-f", "fp8-e4m3@1x2"], "1000\n3\n0.001\n");
    assert_eq!(got[0], 1000.0);
    assert_eq!(got[2], f64::from(0.001f32));
    // NVFP4 with its tensor scale over a batch: 16 values of one block at amax 6 are exact.
    let exact = "6\n-4\n3\n2\n1.5\n1\n0.5\n0\n".repeat(2);
    let want: Vec<f64> = exact.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(quantized(&["quantize", "-f", "nvfp4"], &exact), want);
    // NaN poisons its MX block only.
    let got = quantized(
        &["quantize", "-f", "mxfp4", "--cols", "2"],
        "1\nnan\n3\n4\n",
    );
    assert!(got[0].is_nan() && got[1].is_nan());
    assert_eq!(&got[2..], [3.0, 4.0]);
}

/// The binary's batches are BlockRounder's matrices: the stream cut into rows x cols, the last
/// batch partial, stream positions continuing from batch to batch.
#[test]
fn quantize_blocks_batch_the_stream() {
    use mixprec::format::BlockRounder;
    let values: Vec<f32> = (0..1000)
        .map(|i: i32| ((i * 7919) % 1013 - 500) as f32 * 1.7f32.powi(i % 23 - 11))
        .collect();
    let input: String = values.iter().map(|v| format!("{v:e}\n")).collect();
    for (name, rows, cols) in [
        ("fp8-e4m3@2x16", 3, 40),
        ("nvfp4", 5, 30),
        ("mxfp6-e3m2", 1, 32),
    ] {
        let (r, c) = (rows.to_string(), cols.to_string());
        let args = [
            "quantize",
            "-f",
            name,
            "--rows",
            &r,
            "--cols",
            &c,
            "-r",
            "stochastic",
            "--seed",
            "4",
        ];
        let got = quantized(&args, &input);
        let rounder = BlockRounder::new(name.parse().unwrap(), stochastic(4));
        let mut want = values.clone();
        for (b, batch) in want.chunks_mut(rows * cols).enumerate() {
            rounder.round_matrix_at(batch, cols, (b * rows * cols) as u64);
        }
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(*g, f64::from(*w), "{name} value {i}");
        }
    }
}

#[test]
fn quantize_block_bad_input() {
    assert_bad(
        &mixprec(&["quantize", "-f", "nvfp4", "--output", "bits"], "1\n"),
        "--output bits is for element formats",
    );
    assert_bad(
        &mixprec(&["quantize", "-f", "fp16", "--cols", "4"], "1\n"),
        "--cols and --rows are for block formats",
    );
    assert_bad(
        &mixprec(&["quantize", "-f", "nvfp4", "--cols", "0"], ""),
        "'0'",
    );
    assert_bad(
        &mixprec(
            &[
                "quantize", "-f", "nvfp4", "--rows", "100000", "--cols", "100000",
            ],
            "",
        ),
        "values per batch",
    );
    let o = mixprec(&["quantize", "-f", "mxfp99"], "");
    assert_bad(&o, "unknown format 'mxfp99'");
    for name in ["mxfp8-e4m3", "nvfp4", "eXmY", "ELEMENT@RxC"] {
        assert!(stderr(&o).contains(name), "{name}: {}", stderr(&o));
    }
    assert_bad(
        &mixprec(&["quantize", "-f", "fp9@1x128"], ""),
        "unknown element format 'fp9'",
    );
    assert_bad(
        &mixprec(&["quantize", "-f", "fp8-e4m3@1x128x"], ""),
        "RxC with R and C whole numbers",
    );
    // A line that is not a number ends the stream: the values before it are written first.
    let o = mixprec(&["quantize", "-f", "mxfp8-e4m3"], "1\n2\noops\n4\n");
    assert_bad(&o, "line 3: 'oops' is not a number");
    assert_eq!(stdout(&o), "1\n2\n");
    let o = mixprec(&["quantize", "-f", "nvfp4"], &"x".repeat(70_000));
    assert_bad(&o, "line 1: longer than");
}
