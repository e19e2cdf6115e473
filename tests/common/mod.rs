//! Helpers shared by the tests that run the `mixprec` binary (`mod common;` in each).
#![allow(dead_code)] // each test file uses its own subset

use std::path::PathBuf;
use std::process::{Command, Output};

/// The binary under test.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mixprec"))
}

/// An empty temporary path for `name`, unique to this test file and process.
pub fn fresh(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "mixprec-{}-{}-{name}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The standard output of a command that must succeed (its output shown when it does not).
pub fn ok(out: Output) -> String {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout.into_owned()
}

/// The one-line error of a command that must fail on bad input (exit code 2).
pub fn fails(out: Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}
