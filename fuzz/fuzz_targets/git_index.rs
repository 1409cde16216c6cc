//! Fuzzes a nested repository's git index (nested::parse_index): no input may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_sandbox::fuzzing::git_index(data);
});
