//! The `mixprec` command: parses arguments, runs one command, maps the outcome to an exit code
//! (0 ok, 1 a check the user asked for failed, 2 error).

use std::process::ExitCode;

mod cli;

fn main() -> ExitCode {
    match cli::main(std::env::args_os(), stdout_at_start::closed()) {
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

/// Whether standard output was closed when the process started (`mixprec ... >&-`).
///
/// Rust's runtime puts `/dev/null` (opened read-write) in the place of a closed standard
/// descriptor before `main`, after which every write would succeed and vanish, and nothing tells
/// it apart from a caller's own `/dev/null` (Python's `subprocess.DEVNULL` opens it read-write
/// too). So the descriptor is looked at earlier, by a constructor the C runtime calls before
/// Rust's: closed means `fcntl` finds no descriptor 1 at all. Where no such constructor is
/// wired (neither ELF nor Mach-O), nothing is refused.
mod stdout_at_start {
    use std::sync::atomic::{AtomicBool, Ordering};

    static CLOSED: AtomicBool = AtomicBool::new(false);

    pub fn closed() -> bool {
        CLOSED.load(Ordering::Relaxed)
    }

    #[cfg(unix)]
    extern "C" fn look() {
        // SAFETY: F_GETFD on a descriptor only reads its flags; a closed one gives -1 (EBADF).
        let flags = unsafe { libc::fcntl(1, libc::F_GETFD) };
        CLOSED.store(flags == -1, Ordering::Relaxed);
    }

    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    #[used]
    #[unsafe(link_section = ".init_array")]
    static LOOK: extern "C" fn() = look;

    #[cfg(target_vendor = "apple")]
    #[used]
    #[unsafe(link_section = "__DATA,__mod_init_func")]
    static LOOK: extern "C" fn() = look;
}
