//! Entry points for the fuzz targets (`fuzz/` at the repository root, `cargo fuzz`) and for
//! the arbitrary-bytes proptests below, which `cargo test` runs: one function per parser of
//! bytes a sandboxed command controls (issue 29, deliverable 3). Each takes any bytes and
//! must return without panicking (a panic aborts the supervisor: `panic = "abort"`).
//!
//! | entry point | parser | where the bytes come from |
//! |---|---|---|
//! | [`msghdr_and_cmsgs`] | `gate::wire` | `sendmsg`/`sendmmsg` arguments in the command's memory |
//! | [`sock_diag_reply`] | `gate::diag::parse_reply` | the kernel, with a name the command bound |
//! | [`git_index`] | `nested::parse_index` (entries, EOIE/IEOT, `link` + EWAH) | a nested repository's index |
//! | [`gitfile`] | `git::parse_pointer` | the worktree's `.git` file, a gitdir's back-link |
//! | [`git_config`] | `gitprotect::config_entries`, `nestedconfig::judge` | a nested repository's config |
//! | [`loose_object`] | `objects::loose_object_id_of` (zlib, header, size, fsck) | a loose object the run added |
//! | [`object_header`] | `objects::object_header` | an inflated loose object |
//! | [`fsck_object`] | `fsck::check` | a tree, commit or tag the run added |
//! | [`git_refs`] | `refs::parse_packed`, `refs::parse_value`, `nested::index_fit_for_host` | a private view's `packed-refs`, loose refs, index |
//! | [`proxy_head`] | `egress::head` (HTTP with `httparse`, SOCKS5) | what the command sends the proxy |
//! | [`tls_client_hello`] | `egress::sni::client_hello` | the first bytes of a tunnel |
//! | [`dns_reply`] | `egress::dns::parse_reply` | a resolver's datagram for a name the command asked for |
//!
//! Not part of the crate's interface: hidden from its docs, and free to change.

use crate::gate::wire;

/// The first [`wire::MSGHDR_SIZE`] bytes as a `struct msghdr`, the rest as its control
/// buffer: decoded, walked, and its descriptors rewritten.
pub fn msghdr_and_cmsgs(data: &[u8]) {
    let (head, control) = data.split_at(data.len().min(wire::MSGHDR_SIZE));
    if let Ok(h) = wire::msghdr(head) {
        let _ = wire::iov_array_len(h.iovlen);
        let _ = wire::mmsg_len_at(h.iov, h.iovlen);
    }
    let _ = wire::iovecs(control).count();
    let _ = wire::cmsgs(control).count();
    let mut control = control.to_vec();
    let _ = wire::replace_rights::<i32>(&mut control, |fd| Ok(fd.wrapping_add(1)));
}

/// A `NETLINK_SOCK_DIAG` reply for a unix socket (its inode taken from the first 4 bytes).
pub fn sock_diag_reply(data: &[u8]) {
    let ino = data
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_ne_bytes);
    let _ = crate::gate::diag::parse_reply(data.get(4..).unwrap_or_default(), ino);
}

/// A git index, read with SHA-1 and SHA-256 object names.
pub fn git_index(data: &[u8]) {
    for hash_len in [20, 32] {
        let _ = crate::git::parsers::parse_index_bytes(data, hash_len);
    }
}

/// A gitfile (`gitdir: <path>`) and a back-link (`<path>`).
pub fn gitfile(data: &[u8]) {
    let _ = crate::git::parsers::parse_pointer(data, "gitdir: ");
    let _ = crate::git::parsers::parse_pointer(data, "");
}

/// A git configuration file, read as the nested check reads it.
pub fn git_config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = crate::git::parsers::config_entries(&text);
    let _ = crate::git::nestedconfig::judge(data);
}

/// A loose object file (zlib stream of `<type> <size>\0<content>`), with a budget of 1 MiB.
pub fn loose_object(data: &[u8]) {
    let budget = std::cell::Cell::new(1 << 20);
    let _ = crate::git::parsers::loose_object_id_of(data, false, &budget);
    let _ = crate::git::parsers::loose_object_size(data);
}

/// The header of an inflated loose object.
pub fn object_header(data: &[u8]) {
    let _ = crate::git::parsers::object_header(data);
}

/// A tree, commit or tag (picked by the first byte, which also picks SHA-1 or SHA-256).
pub fn fsck_object(data: &[u8]) {
    let Some((&pick, content)) = data.split_first() else {
        return;
    };
    let kind: &[u8] = match pick % 3 {
        0 => b"tree",
        1 => b"commit",
        _ => b"tag",
    };
    let _ = crate::git::parsers::fsck_check(kind, content, if pick & 0x80 != 0 { 32 } else { 20 });
}

/// A private view's `packed-refs`, a loose ref and an index (SHA-1 and SHA-256).
pub fn git_refs(data: &[u8]) {
    for hash_len in [20, 32] {
        let _ = crate::git::parsers::parse_packed(data, hash_len * 2);
        let _ = crate::git::parsers::parse_value(data, hash_len * 2);
        let _ = crate::git::parsers::index_fit_for_host(data, hash_len);
    }
}

/// A request head to the proxy, read as HTTP and as SOCKS5.
pub fn proxy_head(data: &[u8]) {
    let _ = crate::egress::head::http(data);
    let _ = crate::egress::head::socks_greeting(data);
    let _ = crate::egress::head::socks_request(data);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = crate::egress::head::authority_of(s, Some(80));
    }
}

/// The first bytes of a tunnel, read as a TLS ClientHello.
pub fn tls_client_hello(data: &[u8]) {
    let _ = crate::egress::sni::client_hello(data);
}

/// A resolver's reply (the question id and type from the first three bytes).
pub fn dns_reply(data: &[u8]) {
    let id = u16::from_be_bytes([
        data.first().copied().unwrap_or(0),
        data.get(1).copied().unwrap_or(0),
    ]);
    let qtype = if data.get(2).copied().unwrap_or(0) & 1 == 0 {
        1
    } else {
        28
    };
    let _ = crate::egress::dns::parse_reply(data.get(3..).unwrap_or_default(), id, qtype);
}

#[cfg(test)]
mod tests {
    //! Arbitrary bytes into every entry point (no panic), and for each parser valid input
    //! that must come back as written. The same entry points are the `cargo fuzz` targets.
    use super::*;
    use proptest::prelude::*;
    use std::path::PathBuf;

    fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..max)
    }

    /// A version 2 index (SHA-1) holding `entries` (name, mode), a zero trailing hash.
    fn index_v2(entries: &[(String, u32)]) -> Vec<u8> {
        let mut b = b"DIRC".to_vec();
        b.extend_from_slice(&2u32.to_be_bytes());
        b.extend_from_slice(&(entries.len() as u32).to_be_bytes());
        for (name, mode) in entries {
            let start = b.len();
            b.extend_from_slice(&[0; 24]);
            b.extend_from_slice(&mode.to_be_bytes());
            b.extend_from_slice(&[0; 12]); // uid, gid, size
            b.extend_from_slice(&[0x11; 20]); // object id
            b.extend_from_slice(&(name.len().min(0xFFF) as u16).to_be_bytes());
            b.extend_from_slice(name.as_bytes());
            let len = (62 + name.len() + 8) / 8 * 8;
            b.resize(start + len, 0);
        }
        b.extend_from_slice(&[0; 20]);
        b
    }

    #[test]
    fn an_index_is_fit_for_the_host_only_with_paths_git_accepts() {
        use crate::git::parsers::index_fit_for_host;
        for (name, ok) in [
            ("a/b", true),
            ("a/.gitignore", true),
            ("../x", false),
            (".git/hooks/x", false),
            ("a/.GIT/x", false),
            ("a/.git. /x", false),
            ("GIT~1/x", false),
            ("/abs", false),
            ("a//b", false),
            ("a/./b", false),
            ("a\\b", false),
        ] {
            let data = index_v2(&[(name.to_string(), 0o100644)]);
            assert_eq!(index_fit_for_host(&data, 20).is_ok(), ok, "{name}");
        }
        let mut data = index_v2(&[("a".into(), 0o100644)]);
        let last = data.len() - 1;
        data[last] = 1;
        assert!(index_fit_for_host(&data, 20).is_err(), "a wrong checksum");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn no_parser_panics_on_any_bytes(data in bytes(1024)) {
            msghdr_and_cmsgs(&data);
            sock_diag_reply(&data);
            git_index(&data);
            gitfile(&data);
            git_config(&data);
            loose_object(&data);
            object_header(&data);
            fsck_object(&data);
            git_refs(&data);
            proxy_head(&data);
            tls_client_hello(&data);
            dns_reply(&data);
        }

        #[test]
        fn an_index_header_followed_by_any_bytes_does_not_panic(
            version in 2u32..=4,
            count in prop_oneof![0u32..8, any::<u32>()],
            rest in bytes(2048),
        ) {
            let mut data = b"DIRC".to_vec();
            data.extend_from_slice(&version.to_be_bytes());
            data.extend_from_slice(&count.to_be_bytes());
            data.extend_from_slice(&rest);
            git_index(&data);
            // With an end-of-entries extension pointing into the bytes, the offset-table path.
            let at = data.len() as u32 / 2;
            data.extend_from_slice(b"EOIE");
            data.extend_from_slice(&24u32.to_be_bytes());
            data.extend_from_slice(&at.to_be_bytes());
            data.extend_from_slice(&[0; 40]);
            git_index(&data);
        }

        #[test]
        fn a_valid_index_yields_exactly_its_gitlinks(
            entries in proptest::collection::vec(
                ("[a-z][a-z0-9/._-]{0,40}", prop_oneof![Just(0o160000u32), Just(0o100644), Just(0o120000)]),
                0..12,
            ),
        ) {
            let mut entries = entries;
            entries.sort();
            entries.dedup_by(|a, b| a.0 == b.0);
            let data = index_v2(&entries);
            let (mut links, shared) = crate::git::parsers::parse_index_bytes(&data, 20).unwrap();
            links.sort();
            let mut want: Vec<PathBuf> = entries
                .iter()
                .filter(|(_, m)| *m == 0o160000)
                .map(|(n, _)| PathBuf::from(n))
                .collect();
            // Paths order by component ("y/" before "y-"), not as the strings did.
            want.sort();
            prop_assert_eq!(links, want);
            prop_assert!(shared.is_empty());
        }

        #[test]
        fn a_gitfile_round_trips(path in "[a-zA-Z0-9/._~-]([^\r\n\0]{0,100}[a-zA-Z0-9/._~-])?", tail in "[ \t]{0,3}(\n.{0,20})?") {
            let raw = format!("gitdir: {path}{tail}");
            prop_assert_eq!(crate::git::parsers::parse_pointer(raw.as_bytes(), "gitdir: "), Some(path.clone()));
            prop_assert_eq!(crate::git::parsers::parse_pointer(format!("{path}\n").as_bytes(), ""), Some(path));
        }

        #[test]
        fn a_config_round_trips(
            items in proptest::collection::vec(("[a-z][a-z0-9]{0,10}", "[a-z][a-z0-9-]{0,10}", "[a-zA-Z0-9/._-]{0,20}"), 0..8),
        ) {
            let mut text = String::new();
            for (s, k, v) in &items {
                text.push_str(&format!("[{s}]\n\t{k} = {v}\n"));
            }
            let got = crate::git::parsers::config_entries(&text);
            let want: Vec<_> = items.iter().map(|(s, k, v)| (s.clone(), k.clone(), v.clone())).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn a_loose_object_header_round_trips(
            kind in prop_oneof![Just("blob"), Just("tree"), Just("commit"), Just("tag")],
            size in any::<u64>(),
            rest in bytes(16),
        ) {
            let mut raw = format!("{kind} {size}\0").into_bytes();
            let len = raw.len() as u64;
            raw.extend_from_slice(&rest);
            prop_assert_eq!(crate::git::parsers::object_header(&raw).ok(), Some((len, size)));
        }

        #[test]
        fn a_loose_blob_hashes_to_its_name(content in bytes(4096)) {
            use sha1::Digest as _;
            use std::io::Write as _;
            let mut raw = format!("blob {}\0", content.len()).into_bytes();
            raw.extend_from_slice(&content);
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            z.write_all(&raw).unwrap();
            let file = z.finish().unwrap();
            let budget = std::cell::Cell::new(1 << 20);
            let id = crate::git::parsers::loose_object_id_of(&file[..], false, &budget).unwrap();
            prop_assert_eq!(id, sha1::Sha1::digest(&raw).to_vec());
            prop_assert_eq!(crate::git::parsers::loose_object_size(&file[..]).unwrap(), content.len() as u64);
            // Cut anywhere, it is an error, not a panic.
            for cut in [1, file.len() / 2, file.len() - 1] {
                let budget = std::cell::Cell::new(1 << 20);
                prop_assert!(crate::git::parsers::loose_object_id_of(&file[..cut], false, &budget).is_err());
            }
        }

        #[test]
        fn a_sock_diag_reply_round_trips(
            ino in any::<u32>(),
            dev in any::<u32>(),
            file in any::<u32>(),
            name in bytes(108),
        ) {
            let mut attrs = Vec::new();
            attrs.extend_from_slice(&12u16.to_ne_bytes());
            attrs.extend_from_slice(&1u16.to_ne_bytes()); // UNIX_DIAG_VFS
            attrs.extend_from_slice(&file.to_ne_bytes());
            attrs.extend_from_slice(&dev.to_ne_bytes());
            attrs.extend_from_slice(&(4 + name.len() as u16).to_ne_bytes());
            attrs.extend_from_slice(&0u16.to_ne_bytes()); // UNIX_DIAG_NAME
            attrs.extend_from_slice(&name);
            attrs.resize(attrs.len().div_ceil(4) * 4, 0);
            let mut msg = Vec::new();
            msg.extend_from_slice(&(32 + attrs.len() as u32).to_ne_bytes());
            msg.extend_from_slice(&20u16.to_ne_bytes()); // SOCK_DIAG_BY_FAMILY
            msg.extend_from_slice(&[0; 10]);
            msg.extend_from_slice(&[libc::AF_UNIX as u8, 0, 0, 0]);
            msg.extend_from_slice(&ino.to_ne_bytes());
            msg.extend_from_slice(&[0; 8]); // cookie
            msg.extend_from_slice(&attrs);
            prop_assert_eq!(
                crate::gate::diag::parse_reply(&msg, ino),
                crate::gate::diag::Lookup::Found { vfs: Some((dev, file)), name: Some(name) }
            );
            prop_assert_eq!(crate::gate::diag::parse_reply(&msg, ino ^ 1), crate::gate::diag::Lookup::Unknown);
        }
    }

    #[test]
    fn a_sock_diag_error_is_gone_only_for_enoent_and_never_overflows() {
        let error = |e: i32| {
            let mut m = 20u32.to_ne_bytes().to_vec();
            m.extend_from_slice(&2u16.to_ne_bytes()); // NLMSG_ERROR
            m.extend_from_slice(&[0; 10]);
            m.extend_from_slice(&e.to_ne_bytes());
            crate::gate::diag::parse_reply(&m, 0)
        };
        assert_eq!(error(-libc::ENOENT), crate::gate::diag::Lookup::Gone);
        assert_eq!(error(-libc::EPERM), crate::gate::diag::Lookup::Unknown);
        // The old `-(err as i32)` overflowed here.
        assert_eq!(error(i32::MIN), crate::gate::diag::Lookup::Unknown);
    }
}
