//! Fuzzes a resolver's reply to the proxy's question (egress::dns::parse_reply): no input may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_sandbox::fuzzing::dns_reply(data);
});
