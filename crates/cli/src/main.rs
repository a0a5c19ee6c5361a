use std::process::ExitCode;

fn main() -> ExitCode {
    hamictl::main_with(std::env::args_os().collect())
}
