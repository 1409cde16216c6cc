//! Fuzzes a tree, commit or tag (fsck::check): no input may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_sandbox::fuzzing::fsck_object(data);
});
