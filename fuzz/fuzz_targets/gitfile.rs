//! Fuzzes a `.git` file or gitdir back-link (git::parse_pointer): no input may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_sandbox::fuzzing::gitfile(data);
});
