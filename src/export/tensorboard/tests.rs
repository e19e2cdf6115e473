use std::collections::BTreeMap;

use super::*;
use crate::format::RoundCounts;
use crate::io::tensorboard::masked_crc32c;
use crate::io::test_dir_names as names;
use crate::recipe::{Class, StoreCounts};
use crate::run::schema::{EvalMetric, SiteCapture, Summary, UpdateRatios};

/// A protobuf field as read back: the decoder the tests check the writer's messages with.
#[derive(Clone, Debug, PartialEq)]
enum Field {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(Vec<u8>),
}

fn varint(data: &[u8], at: &mut usize) -> u64 {
    let mut x = 0u64;
    for shift in (0..64).step_by(7) {
        let b = data[*at];
        *at += 1;
        x |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            break;
        }
    }
    x
}

fn fields(data: &[u8]) -> Vec<(u32, Field)> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < data.len() {
        let key = varint(data, &mut at);
        let field = match key & 7 {
            0 => Field::Varint(varint(data, &mut at)),
            1 => {
                at += 8;
                Field::Fixed64(u64::from_le_bytes(data[at - 8..at].try_into().unwrap()))
            }
            2 => {
                let n = varint(data, &mut at) as usize;
                at += n;
                Field::Bytes(data[at - n..at].to_vec())
            }
            5 => {
                at += 4;
                Field::Fixed32(u32::from_le_bytes(data[at - 4..at].try_into().unwrap()))
            }
            wire => panic!("wire type {wire}"),
        };
        out.push(((key >> 3) as u32, field));
    }
    out
}

/// The records of an event file, their checksums checked.
fn records(file: &[u8]) -> Vec<Vec<u8>> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < file.len() {
        let len_bytes = &file[at..at + 8];
        let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(file[at + 8..at + 12].try_into().unwrap());
        assert_eq!(crc, masked_crc32c(len_bytes));
        let data = &file[at + 12..at + 12 + len];
        let crc = u32::from_le_bytes(file[at + 12 + len..at + 16 + len].try_into().unwrap());
        assert_eq!(crc, masked_crc32c(data));
        out.push(data.to_vec());
        at += 16 + len;
    }
    out
}

/// One summary event as read back: wall time, step, scalars and histograms by tag.
#[derive(Debug, Default)]
struct Event {
    wall_time: f64,
    step: i64,
    scalars: BTreeMap<String, f32>,
    histograms: BTreeMap<String, Vec<(u32, Field)>>,
}

fn bytes(f: &Field) -> &[u8] {
    match f {
        Field::Bytes(b) => b,
        other => panic!("{other:?} is not length-delimited"),
    }
}

fn event(data: &[u8]) -> Event {
    let mut e = Event::default();
    for (n, f) in fields(data) {
        match (n, f) {
            (1, Field::Fixed64(bits)) => e.wall_time = f64::from_bits(bits),
            (2, Field::Varint(step)) => e.step = step as i64,
            (5, summary) => {
                for (n, value) in fields(bytes(&summary)) {
                    assert_eq!(n, 1);
                    let value = fields(bytes(&value));
                    let tag = String::from_utf8(bytes(&value[0].1).to_vec()).unwrap();
                    assert_eq!(value[0].0, 1);
                    match &value[1] {
                        (2, Field::Fixed32(bits)) => {
                            e.scalars.insert(tag, f32::from_bits(*bits));
                        }
                        (5, histo) => {
                            e.histograms.insert(tag, fields(bytes(histo)));
                        }
                        other => panic!("{other:?}"),
                    }
                }
            }
            other => panic!("unexpected field {other:?}"),
        }
    }
    e
}

fn doubles(f: &Field) -> Vec<f64> {
    bytes(f)
        .chunks(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn step(n: u64, skipped: bool) -> StepRecord {
    let mut counts = BTreeMap::new();
    counts.insert(
        Class::WeightGrad,
        StoreCounts {
            stored: 400,
            underflow: n,
            ..StoreCounts::default()
        },
    );
    counts.insert(Class::Activation, StoreCounts::default());
    StepRecord {
        step: n,
        loss: if n == 3 { f64::NAN } else { 2.0 / n as f64 },
        loss_scale: 65536.0 / f64::from(1 << u32::from(skipped)),
        overflow: skipped,
        skipped,
        first_nonfinite: None,
        updates_lost: f64::NAN,
        generator_loss: None,
        grad_amax: Some(0.5),
        grad_amax_bounded: false,
        intermediate_overflow: Vec::new(),
        counts,
        eval: (n == 4).then(|| EvalMetric {
            name: "test_accuracy".into(),
            value: 0.75,
            chance: None,
        }),
    }
}

fn capture(n: u64) -> CaptureRecord {
    let site = |tensor, part: Option<&str>, xs: &[f32]| SiteCapture {
        layer: "0.linear".into(),
        tensor,
        part: part.map(str::to_string),
        values: Histogram::from_f32(0, xs),
        rounding: RoundCounts::default(),
        rounded_into: None,
    };
    CaptureRecord {
        step: n,
        loss_scale: Some(65536.0),
        sites: vec![
            site(Class::Weight, None, &[0.0, 0.0, 0.3, -0.75, 3.0, f32::NAN]),
            site(Class::OptimizerState, Some("momentum"), &[1e-3]),
            site(Class::WeightGrad, None, &[f32::INFINITY]),
        ],
        update_ratios: vec![UpdateRatios {
            layer: "0.linear".into(),
            ratios: Histogram::from_f32(0, &[1024.0, 3000.0]),
        }],
    }
}

/// A run directory written by hand: steps 1..=4 (step 2 skipped, step 3's loss not finite),
/// captures at `captures`.
fn run_dir(dir: &Path, captures: &[u64], finished: bool) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join(CONFIG),
        r#"{"schema": 1, "recipe": "fp16-dynamic"}"#,
    )
    .unwrap();
    let lines = |xs: Vec<String>| xs.iter().map(|l| format!("{l}\n")).collect::<String>();
    let steps = (1..=4)
        .map(|n| serde_json::to_string(&step(n, n == 2)).unwrap())
        .collect();
    std::fs::write(dir.join(METRICS), lines(steps)).unwrap();
    let caps = captures
        .iter()
        .map(|&n| serde_json::to_string(&capture(n)).unwrap())
        .collect();
    std::fs::write(dir.join(CAPTURES), lines(caps)).unwrap();
    if finished {
        let summary = Summary {
            schema: 1,
            recipe: "fp16-dynamic".into(),
            steps: 4,
            skipped_steps: 1,
            overflow_steps: 1,
            bounded_steps: 0,
            diverged: false,
            final_loss: 0.5,
            eval_metric: EvalMetric {
                name: "test_accuracy".into(),
                value: 0.75,
                chance: None,
            },
            parameters: 10,
            wall_seconds: 2.0,
            coverage: None,
        };
        std::fs::write(
            dir.join(crate::run::SUMMARY),
            serde_json::to_string(&summary).unwrap(),
        )
        .unwrap();
    } else {
        std::fs::write(dir.join(crate::run::INCOMPLETE), "").unwrap();
    }
}

fn events_of(dir: &Path) -> (Vec<u8>, Vec<Event>) {
    let run = RunDir::open(dir).unwrap();
    let mut file = Vec::new();
    write_events(&run, &mut file, Path::new("x")).unwrap();
    let records = records(&file);
    let first = fields(&records[0]);
    assert_eq!(
        first,
        [
            (3, Field::Bytes(b"brain.Event:2".to_vec())),
            (
                10,
                Field::Bytes(
                    vec![0x0a, WRITER.len() as u8]
                        .into_iter()
                        .chain(WRITER.bytes())
                        .collect()
                )
            ),
        ]
    );
    (file, records[1..].iter().map(|r| event(r)).collect())
}

/// A run made by [`run_dir`] in a new temporary directory, exported: the directory, the event
/// file and its events.
fn exported(captures: &[u64], finished: bool) -> (tempfile::TempDir, Vec<u8>, Vec<Event>) {
    let dir = tempfile::tempdir().unwrap();
    run_dir(dir.path(), captures, finished);
    let (file, events) = events_of(dir.path());
    (dir, file, events)
}

/// The steps of `events`, in order.
fn steps(events: &[Event]) -> Vec<i64> {
    events.iter().map(|e| e.step).collect()
}

#[test]
fn scalars_per_step_and_histograms_per_capture_in_step_order() {
    let (_dir, _, events) = exported(&[1, 4], true);
    assert_eq!(steps(&events), [1, 2, 3, 4]);
    // The run's 2 seconds spread over its 4 steps.
    assert_eq!(
        events.iter().map(|e| e.wall_time).collect::<Vec<_>>(),
        [0.5, 1.0, 1.5, 2.0]
    );
    let e = &events[1];
    assert_eq!(e.scalars["loss"], 1.0);
    assert_eq!(e.scalars["loss_scale"], 32768.0);
    assert_eq!(e.scalars["skipped"], 1.0);
    assert_eq!(e.scalars["overflow"], 1.0);
    assert_eq!(e.scalars["skipped_steps"], 1.0);
    assert_eq!(e.scalars["underflow/weight_grad"], 2.0 / 400.0);
    assert_eq!(e.scalars["grad_amax"], 0.5);
    // No store of a class, no share; no measurement, no scalar.
    assert!(!e.scalars.contains_key("underflow/activation"));
    assert!(!e.scalars.contains_key("updates_lost"));
    assert!(e.histograms.is_empty());
    assert!(events[2].scalars["loss"].is_nan());
    assert_eq!(events[2].scalars["skipped"], 0.0);
    assert_eq!(events[3].scalars["skipped_steps"], 1.0);
    assert_eq!(events[3].scalars["eval/test_accuracy"], 0.75);
    assert!(!events[2].scalars.contains_key("eval/test_accuracy"));
    let tags: Vec<&String> = events[0].histograms.keys().collect();
    // The all-infinite weight gradient has no finite value: no histogram.
    assert_eq!(
        tags,
        [
            "optimizer_state/0.linear/momentum",
            "update_ratio/0.linear",
            "weight/0.linear"
        ]
    );
    assert_eq!(events[3].histograms.len(), 3);
}

#[test]
fn a_histogram_is_the_captures_bins_with_zeros_first() {
    let (_dir, _, events) = exported(&[1], true);
    let h = &events[0].histograms["weight/0.linear"];
    let number = |n: u32| match h.iter().find(|(k, _)| *k == n) {
        Some((_, Field::Fixed64(bits))) => f64::from_bits(*bits),
        None => 0.0,
        other => panic!("{other:?}"),
    };
    // Values 0, 0, 0.3, -0.75, 3 (and a NaN, left out): min 0 is the default, not written.
    assert!(h.iter().all(|(k, _)| *k != 1));
    assert_eq!((number(2), number(3)), (3.0, 5.0));
    assert_eq!(number(4), f64::from(0.3f32) + 0.75 + 3.0);
    let limits = doubles(&h.iter().find(|(k, _)| *k == 6).unwrap().1);
    let counts = doubles(&h.iter().find(|(k, _)| *k == 7).unwrap().1);
    // Zeros below 2^-2, then [2^-2, 2^-1) [2^-1, 1) [1, 2) [2, 4).
    assert_eq!(limits, [0.25, 0.5, 1.0, 2.0, 4.0]);
    assert_eq!(counts, [2.0, 1.0, 1.0, 0.0, 1.0]);
}

#[test]
fn histogram_proto_edge_cases() {
    let only_zeros = histogram_proto(&Histogram::from_f32(0, &[0.0, -0.0])).unwrap();
    assert_eq!(only_zeros.bucket, [2.0]);
    assert_eq!(only_zeros.bucket_limit, [f64::from_bits(1)]);
    assert_eq!(
        (only_zeros.min, only_zeros.max, only_zeros.num),
        (0.0, 0.0, 2.0)
    );
    let no_zeros = histogram_proto(&Histogram::from_f32(0, &[3.0, 1e-30])).unwrap();
    assert_eq!(no_zeros.min, f64::from(1e-30f32));
    assert_eq!(no_zeros.bucket.iter().sum::<f64>(), 2.0);
    assert_eq!(no_zeros.bucket.len(), no_zeros.bucket_limit.len());
    assert_eq!(*no_zeros.bucket_limit.last().unwrap(), 4.0);
    assert_eq!(no_zeros.bucket_limit[0], 2f64.powi(-99));
    // Sub-bins: edges inside octaves.
    let fine = histogram_proto(&Histogram::from_f32(1, &[1.0, 1.6])).unwrap();
    assert_eq!(fine.bucket_limit, [1.5, 2.0]);
    assert_eq!(fine.bucket, [1.0, 1.0]);
    assert!(histogram_proto(&Histogram::from_f32(0, &[f32::NAN, f32::INFINITY])).is_none());
    assert!(histogram_proto(&Histogram::new(0)).is_none());
}

#[test]
fn an_unfinished_run_has_wall_time_zero_and_capture_only_steps_are_events() {
    // A capture at step 6, beyond the last metrics line.
    let (dir, file, events) = exported(&[1, 6], false);
    assert_eq!(steps(&events), [1, 2, 3, 4, 6]);
    assert!(events.iter().all(|e| e.wall_time == 0.0));
    assert!(events[4].scalars.is_empty());
    assert_eq!(events[4].histograms.len(), 3);
    // The same run gives the same bytes.
    assert_eq!(events_of(dir.path()).0, file);
}

#[test]
fn steps_that_go_back_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    run_dir(dir.path(), &[4, 1], true);
    let run = RunDir::open(dir.path()).unwrap();
    let err = write_events(&run, &mut Vec::new(), Path::new("x")).unwrap_err();
    assert!(
        err.to_string()
            .contains("captures.jsonl: step 1 after step 4: the steps must increase"),
        "{err}"
    );
}

#[test]
fn export_writes_one_subdirectory_per_run_and_replaces_its_own_file() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    run_dir(&a, &[1], true);
    run_dir(&b, &[], false);
    let logdir = root.path().join("logs");
    let runs = [
        Export {
            dir: a.clone(),
            name: "a".into(),
        },
        Export {
            dir: b.clone(),
            name: "g/b".into(),
        },
    ];
    let done = export(&runs, &logdir).unwrap();
    assert_eq!(done[0].file, logdir.join("a").join(EVENTS_FILE));
    assert_eq!(
        done[0].counts,
        EventCounts {
            steps: 4,
            capture_steps: 1,
            histograms: 3
        }
    );
    assert!(done[0].complete && !done[1].complete);
    assert_eq!(names(&logdir), ["a", "g"]);
    assert_eq!(names(&logdir.join("g/b")), [EVENTS_FILE]);
    let first = std::fs::read(&done[0].file).unwrap();
    std::fs::write(logdir.join("a").join("notes.txt"), "mine").unwrap();
    export(&runs, &logdir).unwrap();
    assert_eq!(std::fs::read(&done[0].file).unwrap(), first);
    assert_eq!(names(&logdir.join("a")), [EVENTS_FILE, "notes.txt"]);
    assert_eq!(names(&logdir), ["a", "g"]);
}

#[test]
fn export_refuses_before_writing_anything() {
    let root = tempfile::tempdir().unwrap();
    let good = root.path().join("good");
    run_dir(&good, &[1], true);
    let logdir = root.path().join("logs");
    let export_as = |dir: &Path, name: &str| Export {
        dir: dir.to_path_buf(),
        name: name.into(),
    };
    let refused = |runs: &[Export], logdir: &Path, expected: &str| {
        let err = export(runs, logdir).unwrap_err().to_string();
        assert!(err.contains(expected), "{err}");
    };
    // A run whose log is malformed after good lines: nothing at all is written.
    let broken = root.path().join("broken");
    run_dir(&broken, &[1], true);
    let mut metrics = std::fs::read_to_string(broken.join(METRICS)).unwrap();
    metrics.push_str("{\"step\": 5,\n");
    std::fs::write(broken.join(METRICS), metrics).unwrap();
    refused(
        &[export_as(&good, "good"), export_as(&broken, "broken")],
        &logdir,
        "metrics.jsonl: line 5",
    );
    assert!(!logdir.exists());
    refused(
        &[export_as(&root.path().join("nothing"), "nothing")],
        &logdir,
        "not a run directory",
    );
    refused(
        &[export_as(&good, "x"), export_as(&good, "x")],
        &logdir,
        "given twice",
    );
    refused(
        &[export_as(&good, "x"), export_as(&broken, "x")],
        &logdir,
        "has the same name as",
    );
    refused(
        &[export_as(&good, "../x")],
        &logdir,
        "not a plain relative path",
    );
    // The run directories' own parent as the log directory.
    refused(
        &[export_as(&good, "good")],
        root.path(),
        "is a run directory",
    );
    std::fs::create_dir_all(logdir.join("good")).unwrap();
    std::fs::write(logdir.join("good/events.out.tfevents.1.host"), "").unwrap();
    refused(
        &[export_as(&good, "good")],
        &logdir,
        "holds an event file mixprec did not write (events.out.tfevents.1.host)",
    );
    std::fs::write(logdir.join("file"), "").unwrap();
    refused(&[export_as(&good, "file/x")], &logdir, "is not a directory");
    refused(
        &[export_as(&good, "good")],
        &logdir.join("file"),
        "--out is not a directory",
    );
    assert_eq!(names(&logdir), ["file", "good"]);
    assert_eq!(names(&logdir.join("good")), ["events.out.tfevents.1.host"]);
}
