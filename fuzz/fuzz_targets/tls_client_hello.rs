//! Fuzzes the first bytes of a proxy tunnel as a TLS ClientHello (egress::sni): no input may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shofer_sandbox::fuzzing::tls_client_hello(data);
});
