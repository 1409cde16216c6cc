//! Fuzzes a NETLINK_SOCK_DIAG reply (gate::diag::parse_reply): no input may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_sandbox::fuzzing::sock_diag_reply(data);
});
