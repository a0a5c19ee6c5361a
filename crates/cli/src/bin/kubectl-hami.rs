//! `kubectl-hami`: hamictl as a kubectl plugin (`kubectl hami top gpus`). The same
//! program as `hamictl`; `cargo install` puts both on the PATH.

use std::process::ExitCode;

fn main() -> ExitCode {
    hamictl::main_with(std::env::args_os().collect())
}
