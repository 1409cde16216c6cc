//! Fuzzes a `struct msghdr` and its control buffer (gate::wire): no input may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_sandbox::fuzzing::msghdr_and_cmsgs(data);
});
