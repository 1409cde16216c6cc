//! Names for the supervisor's temporary entries in directories the command can write: random,
//! so the command cannot plant something at the name first.

/// 16 hex digits from getrandom(2), for temporary names the command cannot predict.
pub(super) fn random_suffix() -> String {
    let mut buf = [0u8; 8];
    let n = rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty());
    if n.ok() != Some(buf.len()) {
        // Never predictable from inside: nanoseconds and our PID mixed in.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        buf = (t ^ ((std::process::id() as u64) << 32)).to_ne_bytes();
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}
