//! The command's bytes as the gate reads them: `struct msghdr`, its `iovec` array, the
//! `struct mmsghdr` array of `sendmmsg`, and the ancillary data (`cmsghdr` chain) of a
//! message — decoded by safe, bounds-checked Rust (issue 29, finding F7).
//!
//! Map:
//! - [`msghdr`] decodes the 56 bytes of a `struct msghdr` into a [`MsgHdr`];
//! - [`iovecs`] decodes an `iovec` array, [`iov_array_len`] sizes one;
//! - [`mmsghdr_at`] and [`mmsg_len_at`] locate the entries of a `sendmmsg` array;
//! - [`cmsgs`] walks a control buffer as the kernel's `__scm_send` does, yielding
//!   [`Cmsg::Rights`] (the descriptors of an `SCM_RIGHTS`) or [`Cmsg::Other`], and
//!   [`replace_rights`] rewrites every `SCM_RIGHTS` descriptor number in place (the gate
//!   replaces the caller's numbers with its own copies of the same files).
//!
//! It must never: index, slice or add without a check, or trust a length the command wrote.
//! Every length and offset comes from the command, which may write anything (a `cmsg_len` of
//! 2^64-16 wrapped `off + len` past the old bounds check, and the supervisor aborted); here a
//! malformed buffer is a [`WireError`], answered with the errno the kernel would give.
//!
//! # How
//! Layouts are x86_64's (the only ABI the gate's filter lets through): `msghdr` is name
//! (u64 @0), namelen (u32 @8), iov (u64 @16), iovlen (u64 @24), control (u64 @32),
//! controllen (u64 @40), flags (i32 @48); an `iovec` is base (u64 @0), len (u64 @8); a
//! `cmsghdr` is len (u64 @0), level (i32 @8), type (i32 @12), data from 16, the next header at
//! len rounded up to 8. The cmsg walk follows `for_each_cmsghdr` and `CMSG_OK` (Linux
//! `include/linux/socket.h`): fewer than 16 bytes left end the walk, a header whose length is
//! below 16 or beyond what is left is `EINVAL`; an `SCM_RIGHTS` carries
//! `(len - 16) / 4` descriptors (trailing bytes ignored) and a message at most
//! [`SCM_MAX_FD`] of them in all (`scm_fp_copy`).

/// `sizeof(struct msghdr)`.
pub const MSGHDR_SIZE: usize = 56;
/// `sizeof(struct mmsghdr)`: a `msghdr`, `msg_len` (u32 @56), padding.
pub const MMSGHDR_SIZE: u64 = 64;
/// `sizeof(struct iovec)`.
pub const IOVEC_SIZE: usize = 16;
/// `sizeof(struct cmsghdr)`.
const CMSG_HDR: usize = 16;
/// The kernel's limit on descriptors in one message (`SCM_MAX_FD`).
pub const SCM_MAX_FD: usize = 253;
/// Most payload copied for one send; a stream socket then reports a short write, which
/// callers handle; no datagram is this large.
pub const MAX_PAYLOAD: usize = 4 << 20;

/// What is wrong with bytes the command wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// A structure needs `need` bytes, `have` were given.
    Short {
        /// Bytes the structure takes.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// The `cmsghdr` at offset `at` declares `len` bytes: fewer than its header, or more than
    /// the control buffer holds from `at`.
    CmsgLen {
        /// Offset of the header in the control buffer.
        at: usize,
        /// Its `cmsg_len`.
        len: u64,
    },
    /// More than [`SCM_MAX_FD`] descriptors in one message.
    TooManyFds,
}

impl WireError {
    /// The errno the kernel gives for the same bytes: `EFAULT` for a structure it could not
    /// have copied whole, `EINVAL` for a malformed control buffer.
    pub fn errno(self) -> i32 {
        match self {
            WireError::Short { .. } => libc::EFAULT,
            WireError::CmsgLen { .. } | WireError::TooManyFds => libc::EINVAL,
        }
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Short { need, have } => write!(f, "{have} bytes where {need} are needed"),
            WireError::CmsgLen { at, len } => write!(f, "cmsg at {at} declares {len} bytes"),
            WireError::TooManyFds => write!(f, "more than {SCM_MAX_FD} descriptors"),
        }
    }
}

impl std::error::Error for WireError {}

/// The gate answers with errnos: a [`WireError`] becomes [`WireError::errno`].
impl From<WireError> for i32 {
    fn from(e: WireError) -> i32 {
        e.errno()
    }
}

/// `N` bytes at `at` of `b`, or [`WireError::Short`].
fn bytes_at<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N], WireError> {
    let short = WireError::Short {
        need: at.saturating_add(N),
        have: b.len(),
    };
    let end = at.checked_add(N).ok_or(short)?;
    b.get(at..end).and_then(|s| s.try_into().ok()).ok_or(short)
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, WireError> {
    bytes_at(b, at).map(u64::from_ne_bytes)
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, WireError> {
    bytes_at(b, at).map(u32::from_ne_bytes)
}

fn i32_at(b: &[u8], at: usize) -> Result<i32, WireError> {
    bytes_at(b, at).map(i32::from_ne_bytes)
}

/// A `struct msghdr` as the command wrote it (pointers are addresses in its memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MsgHdr {
    /// `msg_name`.
    pub name: u64,
    /// `msg_namelen`.
    pub namelen: u32,
    /// `msg_iov`.
    pub iov: u64,
    /// `msg_iovlen`.
    pub iovlen: u64,
    /// `msg_control`.
    pub control: u64,
    /// `msg_controllen`.
    pub controllen: u64,
    /// `msg_flags` (ignored by `sendmsg`).
    pub flags: i32,
}

#[cfg(test)]
impl MsgHdr {
    /// The 56 bytes of this header (tests build messages with it).
    pub fn to_bytes(self) -> [u8; MSGHDR_SIZE] {
        let mut b = [0u8; MSGHDR_SIZE];
        let fields: [(usize, &[u8]); 7] = [
            (0, &self.name.to_ne_bytes()),
            (8, &self.namelen.to_ne_bytes()),
            (16, &self.iov.to_ne_bytes()),
            (24, &self.iovlen.to_ne_bytes()),
            (32, &self.control.to_ne_bytes()),
            (40, &self.controllen.to_ne_bytes()),
            (48, &self.flags.to_ne_bytes()),
        ];
        for (at, field) in fields {
            if let Some(dst) = b.get_mut(at..at + field.len()) {
                dst.copy_from_slice(field);
            }
        }
        b
    }
}

/// Decodes a `struct msghdr` from its first [`MSGHDR_SIZE`] bytes `h`.
///
/// # Errors
/// [`WireError::Short`] when `h` is shorter.
pub fn msghdr(h: &[u8]) -> Result<MsgHdr, WireError> {
    if h.len() < MSGHDR_SIZE {
        return Err(WireError::Short {
            need: MSGHDR_SIZE,
            have: h.len(),
        });
    }
    Ok(MsgHdr {
        name: u64_at(h, 0)?,
        namelen: u32_at(h, 8)?,
        iov: u64_at(h, 16)?,
        iovlen: u64_at(h, 24)?,
        control: u64_at(h, 32)?,
        controllen: u64_at(h, 40)?,
        flags: i32_at(h, 48)?,
    })
}

/// Bytes of an array of `iovlen` `iovec`s; `None` when that does not fit a `usize`.
pub fn iov_array_len(iovlen: u64) -> Option<usize> {
    usize::try_from(iovlen).ok()?.checked_mul(IOVEC_SIZE)
}

/// The (base, len) pairs of the `iovec` array `v`; a trailing partial entry is ignored
/// (the caller reads exactly [`iov_array_len`] bytes).
pub fn iovecs(v: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    v.chunks_exact(IOVEC_SIZE).map(|e| {
        // chunks_exact: both reads are within the 16 bytes.
        (u64_at(e, 0).unwrap_or(0), u64_at(e, 8).unwrap_or(0))
    })
}

/// Address of entry `i` of a `struct mmsghdr` array at `base`; `None` past the address space.
pub fn mmsghdr_at(base: u64, i: u64) -> Option<u64> {
    base.checked_add(i.checked_mul(MMSGHDR_SIZE)?)
}

/// Address of entry `i`'s `msg_len` (written back after the send); `None` past the address
/// space.
pub fn mmsg_len_at(base: u64, i: u64) -> Option<u64> {
    mmsghdr_at(base, i)?.checked_add(MSGHDR_SIZE as u64)
}

/// One ancillary message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmsg<'a> {
    /// `SOL_SOCKET`/`SCM_RIGHTS`: the descriptors, and the offset in the control buffer of
    /// the first.
    Rights {
        /// Offset of the first descriptor in the control buffer.
        at: usize,
        /// The descriptor numbers, in order.
        fds: Vec<i32>,
    },
    /// Anything else, passed to the kernel as it is.
    Other {
        /// `cmsg_level`.
        level: i32,
        /// `cmsg_type`.
        kind: i32,
        /// The data after the header, `cmsg_len - 16` bytes.
        data: &'a [u8],
    },
}

/// Walks the control buffer `control` ([module docs](self)): each item is a [`Cmsg`], or one
/// [`WireError`] that ends the walk.
pub fn cmsgs(control: &[u8]) -> Cmsgs<'_> {
    Cmsgs {
        control,
        off: Some(0),
    }
}

/// The iterator of [`cmsgs`].
pub struct Cmsgs<'a> {
    control: &'a [u8],
    /// Offset of the next header; `None` once ended (after an error too).
    off: Option<usize>,
}

impl<'a> Cmsgs<'a> {
    fn step(&mut self, off: usize) -> Option<Result<Cmsg<'a>, WireError>> {
        let left = self.control.len().checked_sub(off)?;
        if left < CMSG_HDR {
            return None;
        }
        let item = (|| {
            let len = u64_at(self.control, off)?;
            let bad = WireError::CmsgLen { at: off, len };
            let size = usize::try_from(len).map_err(|_| bad)?;
            if size < CMSG_HDR || size > left {
                return Err(bad);
            }
            let level = i32_at(self.control, off + 8)?;
            let kind = i32_at(self.control, off + 12)?;
            let start = off.checked_add(CMSG_HDR).ok_or(bad)?;
            let end = off.checked_add(size).ok_or(bad)?;
            let data = self.control.get(start..end).ok_or(bad)?;
            // The next header: len rounded up to 8 (a wrap ends the walk).
            self.off = size
                .checked_add(7)
                .map(|s| s & !7)
                .and_then(|s| off.checked_add(s));
            Ok(if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
                Cmsg::Rights {
                    at: start,
                    fds: data
                        .chunks_exact(4)
                        .filter_map(|c| c.try_into().ok().map(i32::from_ne_bytes))
                        .collect(),
                }
            } else {
                Cmsg::Other { level, kind, data }
            })
        })();
        Some(item)
    }
}

impl<'a> Iterator for Cmsgs<'a> {
    type Item = Result<Cmsg<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        let off = self.off.take()?;
        let item = self.step(off);
        if !matches!(item, Some(Ok(_))) {
            self.off = None;
        }
        item
    }
}

/// Rewrites, in place, every `SCM_RIGHTS` descriptor of `control` to `map(descriptor)`, in
/// order. The whole buffer is walked first: nothing is mapped when it is malformed.
///
/// # Errors
/// A [`WireError`] of the walk (also more than [`SCM_MAX_FD`] descriptors), converted into
/// `E`; the first error of `map` (the descriptors mapped before it are kept rewritten).
pub fn replace_rights<E: From<WireError>>(
    control: &mut [u8],
    mut map: impl FnMut(i32) -> Result<i32, E>,
) -> Result<(), E> {
    let mut slots = Vec::new();
    for item in cmsgs(control) {
        if let Cmsg::Rights { at, fds } = item? {
            if slots.len().saturating_add(fds.len()) > SCM_MAX_FD {
                return Err(WireError::TooManyFds.into());
            }
            let mut o = at;
            for fd in fds {
                slots.push((o, fd));
                o = o.saturating_add(4);
            }
        }
    }
    for (at, fd) in slots {
        let new = map(fd)?;
        let short = WireError::Short {
            need: at.saturating_add(4),
            have: control.len(),
        };
        at.checked_add(4)
            .and_then(|end| control.get_mut(at..end))
            .ok_or(short)?
            .copy_from_slice(&new.to_ne_bytes());
    }
    Ok(())
}

/// One `cmsghdr` with its data, padded to 8 (tests build buffers with it).
#[cfg(test)]
pub fn encode_cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(CMSG_HDR + data.len() + 7);
    b.extend_from_slice(&((CMSG_HDR + data.len()) as u64).to_ne_bytes());
    b.extend_from_slice(&level.to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(data);
    b.resize(b.len().div_ceil(8) * 8, 0);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rights(fds: &[i32]) -> Vec<u8> {
        let data: Vec<u8> = fds.iter().flat_map(|f| f.to_ne_bytes()).collect();
        encode_cmsg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &data)
    }

    /// The buffer of issue 29's F7: a valid first cmsg, then one with `cmsg_len = 2^64-16`
    /// (`off + len` wrapped to 0 in the old walk, which then read past the buffer).
    fn f7_control() -> Vec<u8> {
        let mut control = rights(&[0]);
        let mut second = rights(&[1, 2]);
        second[..8].copy_from_slice(&(u64::MAX - 15).to_ne_bytes());
        control.extend_from_slice(&second);
        control
    }

    /// Issue 29, F7: the walk of the old `read_message`, kept here to show what the buffer
    /// did to it. With overflow checks (tests) it panics on `off + clen`; in the release
    /// build (`panic = "abort"`, no overflow checks) `off + clen` wraps past the bounds check
    /// and the descriptor loop indexes far past the buffer, and the supervisor aborts.
    fn old_walk(control: &[u8]) -> Vec<u32> {
        let u64_at = |o: usize| u64::from_ne_bytes(control[o..o + 8].try_into().unwrap());
        let u32_at = |o: usize| u32::from_ne_bytes(control[o..o + 4].try_into().unwrap());
        let mut fds = Vec::new();
        let mut off = 0usize;
        while off + 16 <= control.len() {
            let clen = u64_at(off) as usize;
            if clen < 16 || off.wrapping_add(clen) > control.len() {
                break;
            }
            if u32_at(off + 8) as i32 == libc::SOL_SOCKET
                && u32_at(off + 12) as i32 == libc::SCM_RIGHTS
            {
                for k in 0..(clen - 16) / 4 {
                    fds.push(u32_at(off + 16 + 4 * k));
                }
            }
            off = off.wrapping_add((clen.wrapping_add(7)) & !7);
        }
        fds
    }

    #[test]
    fn f7_old_walk_panics_on_a_wrapping_cmsg_len() {
        // The old logic with the release build's wrapping arithmetic: it runs off the end.
        let control = f7_control();
        let r = std::panic::catch_unwind(|| old_walk(&control));
        assert!(r.is_err(), "the old walk read past the buffer and panicked");
    }

    #[test]
    fn f7_cmsg_len_near_2_pow_64_is_einval_not_a_wrap() {
        // https issue 29 (F7): rejected, with the kernel's errno, and nothing rewritten.
        let mut control = f7_control();
        let items: Vec<_> = cmsgs(&control).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(
            items[0],
            Ok(Cmsg::Rights {
                at: 16,
                fds: vec![0]
            })
        );
        assert_eq!(
            items[1],
            Err(WireError::CmsgLen {
                at: 24,
                len: u64::MAX - 15
            })
        );
        let before = control.clone();
        let mut called = 0;
        let r: Result<(), i32> = replace_rights(&mut control, |fd| {
            called += 1;
            Ok(fd + 100)
        });
        assert_eq!(r, Err(libc::EINVAL));
        assert_eq!(called, 0);
        assert_eq!(control, before);
    }

    #[test]
    fn every_cmsg_len_that_could_wrap_is_rejected() {
        for len in [u64::MAX, u64::MAX - 7, u64::MAX - 15, 1 << 63, 25, 15, 0] {
            let mut c = rights(&[3]);
            c.extend_from_slice(&rights(&[4]));
            // The second header starts at 24 (20 bytes, padded to 8).
            c[24..32].copy_from_slice(&len.to_ne_bytes());
            let last = cmsgs(&c).last().unwrap();
            assert_eq!(last, Err(WireError::CmsgLen { at: 24, len }), "{len}");
        }
    }

    #[test]
    fn rights_are_rewritten_in_place_and_others_kept() {
        let other = encode_cmsg(libc::SOL_SOCKET, libc::SCM_CREDENTIALS, &[7; 12]);
        let mut c = rights(&[3, 4]);
        c.extend_from_slice(&other);
        c.extend_from_slice(&rights(&[5]));
        replace_rights::<i32>(&mut c, |fd| Ok(fd * 10)).unwrap();
        let items: Vec<_> = cmsgs(&c).map(Result::unwrap).collect();
        assert_eq!(
            items,
            vec![
                Cmsg::Rights {
                    at: 16,
                    fds: vec![30, 40]
                },
                Cmsg::Other {
                    level: libc::SOL_SOCKET,
                    kind: libc::SCM_CREDENTIALS,
                    data: &[7; 12]
                },
                Cmsg::Rights {
                    at: 16 + 8 + 32 + 16,
                    fds: vec![50]
                },
            ]
        );
    }

    #[test]
    fn a_short_tail_ends_the_walk_and_too_many_fds_are_einval() {
        let mut c = rights(&[1]);
        c.extend_from_slice(&[0xff; 15]);
        assert_eq!(cmsgs(&c).count(), 1);
        let many: Vec<i32> = (0..254).collect();
        let r: Result<(), i32> = replace_rights(&mut rights(&many), Ok);
        assert_eq!(r, Err(libc::EINVAL));
        replace_rights::<i32>(&mut rights(&many[..253]), Ok).unwrap();
    }

    #[test]
    fn mmsghdr_addresses_are_checked() {
        assert_eq!(mmsghdr_at(1000, 2), Some(1128));
        assert_eq!(mmsg_len_at(1000, 2), Some(1184));
        assert_eq!(mmsghdr_at(u64::MAX - 63, 1), None);
        assert_eq!(mmsg_len_at(u64::MAX - 55, 0), None);
        assert_eq!(mmsghdr_at(0, u64::MAX), None);
        assert_eq!(iov_array_len(1024), Some(16384));
        assert_eq!(iov_array_len(u64::MAX), None);
    }

    #[test]
    fn msghdr_matches_the_c_layout() {
        let h = MsgHdr {
            name: 1,
            namelen: 2,
            iov: 3,
            iovlen: 4,
            control: 5,
            controllen: 6,
            flags: 7,
        };
        // Safety: an all-zero msghdr is valid; the fields are plain integers and pointers.
        let mut c: libc::msghdr = unsafe { std::mem::zeroed() };
        c.msg_name = std::ptr::without_provenance_mut(1);
        c.msg_namelen = 2;
        c.msg_iov = std::ptr::without_provenance_mut(3);
        c.msg_iovlen = 4;
        c.msg_control = std::ptr::without_provenance_mut(5);
        c.msg_controllen = 6;
        c.msg_flags = 7;
        // Safety: reading the bytes of a plain C struct we own (its padding was zeroed).
        let raw: [u8; MSGHDR_SIZE] = unsafe { std::mem::transmute(c) };
        assert_eq!(raw, h.to_bytes());
        assert_eq!(msghdr(&raw), Ok(h));
        assert_eq!(std::mem::size_of::<libc::mmsghdr>() as u64, MMSGHDR_SIZE);
        assert_eq!(
            msghdr(&raw[..55]),
            Err(WireError::Short { need: 56, have: 55 })
        );
    }

    proptest! {
        #[test]
        fn any_control_bytes_walk_without_panic(
            mut control in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let before = control.clone();
            let walked: Vec<_> = cmsgs(&control).collect();
            // At most one error, and it is last.
            let errors = walked.iter().filter(|i| i.is_err()).count();
            prop_assert!(errors <= 1);
            prop_assert!(errors == 0 || walked.last().is_some_and(Result::is_err));
            let n: usize = walked.iter().map(|i| match i {
                Ok(Cmsg::Rights { fds, .. }) => fds.len(),
                _ => 0,
            }).sum();
            let mut seen = 0usize;
            let r: Result<(), i32> = replace_rights(&mut control, |fd| { seen += 1; Ok(!fd) });
            if errors == 1 || n > SCM_MAX_FD {
                prop_assert!(r.is_err());
                prop_assert_eq!(&control, &before);
            } else {
                prop_assert!(r.is_ok());
                prop_assert_eq!(seen, n);
            }
        }

        #[test]
        fn valid_control_buffers_round_trip(
            items in proptest::collection::vec(
                prop_oneof![
                    proptest::collection::vec(any::<i32>(), 0..8).prop_map(Ok),
                    (any::<i32>(), proptest::collection::vec(any::<u8>(), 0..40))
                        .prop_map(Err),
                ],
                0..6,
            ),
        ) {
            let mut control = Vec::new();
            let mut want = Vec::new();
            for item in &items {
                match item {
                    Ok(fds) => {
                        control.extend_from_slice(&rights(fds));
                        want.push(Ok(fds.iter().map(|f| f.wrapping_add(1)).collect::<Vec<_>>()));
                    }
                    Err((kind, data)) => {
                        // A level other than SOL_SOCKET: never SCM_RIGHTS.
                        control.extend_from_slice(&encode_cmsg(libc::SOL_IP, *kind, data));
                        want.push(Err(data.clone()));
                    }
                }
            }
            let total: usize = items.iter().map(|i| i.as_ref().map_or(0, Vec::len)).sum();
            prop_assume!(total <= SCM_MAX_FD);
            replace_rights::<i32>(&mut control, |fd| Ok(fd.wrapping_add(1))).unwrap();
            let got: Vec<_> = cmsgs(&control)
                .map(|i| match i.unwrap() {
                    Cmsg::Rights { fds, .. } => Ok(fds),
                    Cmsg::Other { data, .. } => Err(data.to_vec()),
                })
                .collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn any_header_bytes_decode_and_round_trip(h in proptest::collection::vec(any::<u8>(), 0..80)) {
            match msghdr(&h) {
                Ok(m) => {
                    prop_assert!(h.len() >= MSGHDR_SIZE);
                    prop_assert_eq!(msghdr(&m.to_bytes()), Ok(m));
                }
                Err(e) => prop_assert_eq!(e, WireError::Short { need: MSGHDR_SIZE, have: h.len() }),
            }
            prop_assert_eq!(iovecs(&h).count(), h.len() / IOVEC_SIZE);
        }

        #[test]
        fn mmsghdr_addresses_never_wrap(base in any::<u64>(), i in any::<u64>()) {
            if let Some(a) = mmsg_len_at(base, i) {
                prop_assert_eq!(a as u128, base as u128 + i as u128 * 64 + 56);
            }
        }
    }
}
