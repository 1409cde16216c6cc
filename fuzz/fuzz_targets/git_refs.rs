//! Fuzzes a private view's refs and index (git::refs, nested::index_fit_for_host): no input
//! may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_sandbox::fuzzing::git_refs(data);
});
