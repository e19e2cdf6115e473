//! The `mixprec` command: parses arguments, runs one command, maps the outcome to an exit code
//! (0 ok, 1 a check the user asked for failed, 2 error).

use std::process::ExitCode;

fn main() -> ExitCode {
    match mixprec::cli::main(std::env::args_os()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("mixprec: {err:#}");
            ExitCode::from(2)
        }
    }
}
