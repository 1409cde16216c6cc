//! Fuzzes a request head to --net proxy's proxy (egress::head: HTTP and SOCKS5): no input may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_sandbox::fuzzing::proxy_head(data);
});
