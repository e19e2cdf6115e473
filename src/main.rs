//! The `mixprec` command: parses arguments, runs one command, maps the outcome to an exit code
//! (0 ok, 1 a check the user asked for failed, 2 error).

use std::process::ExitCode;

fn main() -> ExitCode {
    match mixprec::cli::main(std::env::args_os()) {
        Ok(code) => code,
        // A reader that stopped early (`mixprec quantize | head`) is not an error.
        Err(err) if broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("mixprec: {}", one_line(&err));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes in one line, each cause only if the message does not already say it.
fn one_line(err: &anyhow::Error) -> String {
    let mut line = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !line.contains(&text) {
            line = format!("{line}: {text}");
        }
    }
    line.replace('\n', " ")
}

fn broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
