//! Fuzzes a loose object file (objects::loose_object_id_of): no input may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_sandbox::fuzzing::loose_object(data);
});
