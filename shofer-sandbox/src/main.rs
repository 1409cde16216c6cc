//! `shofer-sandbox`: parse, run, exit. Every exit status is decided in
//! [`shofer_sandbox::run`]; this file only maps usage errors to 125 (DESIGN §2.6).

use shofer_sandbox::cli::{self, Invocation};

fn main() {
    let code = match cli::parse(std::env::args_os().skip(1)) {
        Ok(Invocation::Help) => {
            print!("{}", cli::HELP);
            0
        }
        Ok(Invocation::Version) => {
            println!("shofer-sandbox {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Ok(Invocation::Probe { json, max_abi, net }) => shofer_sandbox::probe(json, max_abi, net),
        Ok(Invocation::Run(args)) => shofer_sandbox::run(*args),
        // 125: the sandbox could not be set up (here: a usage error).
        Err(e) => {
            eprintln!("shofer-sandbox: {e}");
            shofer_sandbox::EXIT_SETUP
        }
    };
    std::process::exit(code);
}
