//! `shofer-sandbox`: parse, run, exit. Every exit status is decided in
//! [`shofer_sandbox::run`]; this file only maps usage errors to 125 (ARCHITECTURE §2.6).
//!
//! `no_main`: start-up is part of every sandboxed command's cost, and the Rust runtime's own
//! set-up (probing the main thread's stack guard through `/proc/self/maps`, installing a
//! signal stack, ignoring SIGPIPE) costs about as much as the sandbox's. None of it is needed
//! here: the arguments still come from `std::env` (glibc hands them to std at load time), a
//! panic aborts, and the child restores default signal dispositions itself.
#![no_main]

use shofer_sandbox::cli::{self, Invocation};

#[no_mangle]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if args
        .first()
        .is_some_and(|a| a == shofer_sandbox::GATE_HELPER_ARG)
    {
        shofer_sandbox::gate_helper_main(&args[1..]);
    }
    shofer_sandbox::take_back_sigchld();
    let code = match cli::parse(args) {
        Ok(Invocation::Help) => {
            print!("{}", cli::HELP);
            0
        }
        Ok(Invocation::Version) => {
            println!("shofer-sandbox {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Ok(Invocation::PrintAppArmorProfile) => shofer_sandbox::print_apparmor_profile(),
        Ok(Invocation::Probe {
            json,
            backend,
            max_abi,
            net,
            limits,
        }) => shofer_sandbox::probe(json, backend, max_abi, net, limits),
        Ok(Invocation::Run(args)) => shofer_sandbox::run(*args),
        Ok(Invocation::Repair(wt)) => shofer_sandbox::repair(&wt),
        // 125: the sandbox could not be set up (here: a usage error).
        Err(e) => {
            eprintln!("shofer-sandbox: {e}");
            shofer_sandbox::EXIT_SETUP
        }
    };
    std::process::exit(code);
}
