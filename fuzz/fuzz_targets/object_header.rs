//! Fuzzes an inflated loose object's header (objects::object_header): no input may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_sandbox::fuzzing::object_header(data);
});
