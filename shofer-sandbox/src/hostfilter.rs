//! A second seccomp filter, for what the command could do to the host's state through its
//! own credentials (the hardening tier, docs/ARCHITECTURE.md):
//!
//! - **keyrings**: `add_key`, `request_key` and `keyctl` fail with `EPERM`. The command
//!   inherits the caller's session keyring, so it *possesses* the user's keys and could read,
//!   update or revoke them (keyrings(7)); neither Landlock nor the namespaces scope keys. The
//!   same three calls are refused by Docker's and Podman's default profiles.
//! - **identities**: `setuid`, `setgid`, `setreuid`, `setregid`, `setresuid` and `setresgid`
//!   with an id other than the caller's own (or -1, "unchanged") fail with `EPERM`. With every
//!   capability dropped the kernel refuses them anyway, but in a user namespace it answers
//!   `EINVAL` for an id outside the map (credentials(7)), which programs read as a bug rather
//!   than as "not permitted".
//!
//! x86-64 only, with its x32 entry points (the same numbers with bit 30 set), as the
//! terminal-injection filter; i386 entry points are left to the kernel (a 32-bit program
//! gets the kernel's own answers: `EPERM`, or `EINVAL` for an unmapped id in a namespace, and
//! its keyring calls are not refused).

//!
//! Installed wherever the terminal-injection filter is ([`crate::seccomp::FILTER_AVAILABLE`]).

#[cfg(target_arch = "x86_64")]
pub use x86_64::install;

#[cfg(target_arch = "x86_64")]
mod x86_64 {
    use std::io;

    const OFF_NR: u32 = 0;
    const OFF_ARCH: u32 = 4;
    /// Offset of `args[i]`'s low 32 bits (little-endian): uid_t and gid_t are 32 bits and the
    /// kernel truncates the argument to them.
    const fn off_arg_lo(i: u32) -> u32 {
        16 + 8 * i
    }

    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const NR_ADD_KEY: u32 = 248;
    const NR_REQUEST_KEY: u32 = 249;
    const NR_KEYCTL: u32 = 250;
    /// (syscall, how many id arguments, uid or gid)
    const ID_CALLS: [(u32, u32, bool); 6] = [
        (105, 1, true),  // setuid
        (106, 1, false), // setgid
        (113, 2, true),  // setreuid
        (114, 2, false), // setregid
        (117, 3, true),  // setresuid
        (119, 3, false), // setresgid
    ];
    const UNCHANGED: u32 = u32::MAX;

    /// One instruction with symbolic jump targets, resolved by [`assemble`].
    enum Insn {
        Load(u32),
        /// `nr &= !X32_SYSCALL_BIT`: x32 calls share the x86-64 numbers.
        ClearX32,
        /// if A == k goto then else goto otherwise (labels; `None` = the next instruction).
        Jeq(u32, Option<usize>, Option<usize>),
        Ret(u32),
        Label(usize),
    }

    const DENY: usize = 0;
    const ALLOW: usize = 1;

    /// Resolves labels into forward jump offsets (BPF jumps go forward only, at most 255).
    fn assemble(prog: &[Insn]) -> Vec<libc::sock_filter> {
        let mut at = std::collections::HashMap::new();
        let mut n = 0usize;
        for insn in prog {
            match insn {
                Insn::Label(l) => {
                    at.insert(*l, n);
                }
                _ => n += 1,
            }
        }
        let mut out = Vec::with_capacity(n);
        for insn in prog {
            let here = out.len();
            let rel = |target: Option<usize>| -> u8 {
                target.map_or(0, |l| {
                    let dist = at[&l] - here - 1;
                    u8::try_from(dist).expect("seccomp jump within 255 instructions")
                })
            };
            let f = match insn {
                Insn::Label(_) => continue,
                Insn::Load(off) => libc::sock_filter {
                    code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
                    jt: 0,
                    jf: 0,
                    k: *off,
                },
                Insn::ClearX32 => libc::sock_filter {
                    code: (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16,
                    jt: 0,
                    jf: 0,
                    k: !X32_SYSCALL_BIT,
                },
                Insn::Jeq(k, then, otherwise) => libc::sock_filter {
                    code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                    jt: rel(*then),
                    jf: rel(*otherwise),
                    k: *k,
                },
                Insn::Ret(k) => libc::sock_filter {
                    code: (libc::BPF_RET | libc::BPF_K) as u16,
                    jt: 0,
                    jf: 0,
                    k: *k,
                },
            };
            out.push(f);
        }
        out
    }

    /// The program: keyrings refused, and with `ids = Some((uid, gid))` identity changes to
    /// other ids too.
    pub(super) fn program(ids: Option<(u32, u32)>) -> Vec<libc::sock_filter> {
        use Insn::*;
        let mut p = vec![
            Load(OFF_ARCH),
            Jeq(AUDIT_ARCH_X86_64, None, Some(ALLOW)),
            Load(OFF_NR),
            ClearX32,
            Jeq(NR_ADD_KEY, Some(DENY), None),
            Jeq(NR_REQUEST_KEY, Some(DENY), None),
            Jeq(NR_KEYCTL, Some(DENY), None),
        ];
        let Some((uid, gid)) = ids else {
            p.push(Ret(libc::SECCOMP_RET_ALLOW));
            p.push(Label(DENY));
            p.push(Ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32));
            p.push(Label(ALLOW));
            p.push(Ret(libc::SECCOMP_RET_ALLOW));
            return assemble(&p);
        };
        for (i, (nr, _, _)) in ID_CALLS.iter().enumerate() {
            p.push(Jeq(*nr, Some(10 + i), None));
        }
        p.push(Ret(libc::SECCOMP_RET_ALLOW));
        for (i, (_, args, is_uid)) in ID_CALLS.iter().enumerate() {
            let own = if *is_uid { uid } else { gid };
            p.push(Label(10 + i));
            for a in 0..*args {
                let next = 100 + 10 * i + a as usize;
                p.push(Load(off_arg_lo(a)));
                p.push(Jeq(own, Some(next), None));
                p.push(Jeq(UNCHANGED, None, Some(DENY)));
                p.push(Label(next));
            }
            p.push(Ret(libc::SECCOMP_RET_ALLOW));
        }
        p.push(Label(DENY));
        p.push(Ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32));
        p.push(Label(ALLOW));
        p.push(Ret(libc::SECCOMP_RET_ALLOW));
        assemble(&p)
    }

    /// Installs the filter on the calling thread (inherited by children, kept across exec):
    /// keyrings refused, and with `refuse_id_changes` every set*id call to an id other than
    /// the thread's own real uid/gid (leave it off when capabilities are kept on purpose,
    /// `--keep-caps`). Requires `no_new_privs` or `CAP_SYS_ADMIN`.
    ///
    /// # Errors
    /// The seccomp(2) error.
    pub fn install(refuse_id_changes: bool) -> io::Result<()> {
        // Safety: getuid/getgid cannot fail.
        let ids = refuse_id_changes.then(|| unsafe { (libc::getuid(), libc::getgid()) });
        let filter = program(ids);
        crate::seccomp::install(&filter, 0).map(drop)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// A tiny interpreter of the instructions `program` uses, to check its decisions
        /// without installing it.
        fn decide(prog: &[libc::sock_filter], data: &[u32; 16]) -> u32 {
            let mut pc = 0;
            let mut a = 0u32;
            loop {
                let f = prog[pc];
                match f.code as u32 {
                    c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                        a = data[(f.k / 4) as usize]
                    }
                    c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => a &= f.k,
                    c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                        pc += usize::from(if a == f.k { f.jt } else { f.jf });
                    }
                    c if c == libc::BPF_RET | libc::BPF_K => return f.k,
                    c => panic!("unexpected opcode {c:#x}"),
                }
                pc += 1;
            }
        }

        fn call(nr: u32, args: &[u32]) -> [u32; 16] {
            let mut d = [0u32; 16];
            d[0] = nr;
            d[1] = AUDIT_ARCH_X86_64;
            for (i, v) in args.iter().enumerate() {
                d[4 + 2 * i] = *v;
            }
            d
        }

        const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        const OK: u32 = libc::SECCOMP_RET_ALLOW;

        #[test]
        fn keyring_calls_are_refused_on_both_entry_points() {
            let p = program(None);
            for nr in [NR_ADD_KEY, NR_REQUEST_KEY, NR_KEYCTL] {
                assert_eq!(decide(&p, &call(nr, &[])), EPERM);
                assert_eq!(decide(&p, &call(nr | X32_SYSCALL_BIT, &[])), EPERM);
            }
            assert_eq!(decide(&p, &call(0, &[])), OK); // read
        }

        #[test]
        fn only_own_or_unchanged_ids_pass() {
            let p = program(Some((1000, 100)));
            assert_eq!(decide(&p, &call(105, &[1000])), OK);
            assert_eq!(decide(&p, &call(105, &[0])), EPERM);
            assert_eq!(decide(&p, &call(106, &[100])), OK);
            assert_eq!(decide(&p, &call(106, &[1000])), EPERM);
            assert_eq!(decide(&p, &call(117, &[UNCHANGED, 1000, UNCHANGED])), OK);
            assert_eq!(decide(&p, &call(117, &[UNCHANGED, 1000, 5])), EPERM);
            assert_eq!(decide(&p, &call(113, &[5, UNCHANGED])), EPERM);
            assert_eq!(decide(&p, &call(119, &[100, 100, 100])), OK);
            let mut other_arch = call(NR_KEYCTL, &[]);
            other_arch[1] = 0x4000_0003; // i386: left to the kernel
            assert_eq!(decide(&p, &other_arch), OK);
        }
    }
}
