use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = hamictl::Cli::parse();
    match hamictl::run(&cli) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hamictl: {e:#}");
            ExitCode::FAILURE
        }
    }
}
