//! Issue 13 case 7: nothing `shofer run` started survives it, however it detaches.
//!
//! A daemon that leaves the session and clears its environment while its shell exits at once
//! (`setsid env -i sleep & echo started`) is never seen by the command's tree scan; before the
//! fix about a quarter (up to all) of them outlived `shofer run`.

mod common;

use std::process::Command;

use common::{kill_leftovers, marker, survivors};

const SHOFER: &str = env!("CARGO_BIN_EXE_shofer");

#[test]
fn two_hundred_detached_daemons_leave_no_survivor() {
    let m = marker();
    // Four ways to detach, each with an empty environment (no tag to find it by).
    let forms = [
        format!("setsid env -i /bin/sleep {m} & echo started"),
        format!("(setsid env -i /bin/sleep {m} &) ; echo started"),
        format!("nohup setsid env -i /bin/sleep {m} >/dev/null 2>&1 & echo started"),
        format!("setsid sh -c 'env -i /bin/sleep {m} & exit 0' & echo started"),
    ];
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let forms = forms.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    let out = Command::new(SHOFER)
                        .args(["run", "--", &forms[(t + i) % forms.len()]])
                        .env_remove("SHOFER_SANDBOX")
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "{out:?}");
                    assert!(String::from_utf8_lossy(&out.stdout).contains("started"));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let left = survivors(&m);
    kill_leftovers(&m);
    assert!(
        left.is_empty(),
        "{} of 200 detached daemons survived: {left:?}",
        left.len()
    );
}
