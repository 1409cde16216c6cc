//! Fuzzes a nested repository's config (gitprotect::config_entries, nestedconfig::judge): no input may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_sandbox::fuzzing::git_config(data);
});
