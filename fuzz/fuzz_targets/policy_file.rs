//! Fuzzes a project's policy file (`<worktree>/.shofer/config.toml`, which a sandboxed command
//! can write) through the parser and the narrowing against a user's file: no input may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_core::policyfile::fuzz_project_file(data);
});
