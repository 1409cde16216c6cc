//! The end of a session: every command's tree stops at once (issue 15 case 4).

mod common;

use std::time::{Duration, Instant};

use common::{kill_leftovers, marker, survivors, wait_for_processes};
use shofer_exec::{Engine, EngineConfig, ExecRequest, Status};

#[tokio::test]
async fn terminate_all_stops_every_background_command_term_ignoring_ones_included() {
    let d = tempfile::tempdir().unwrap();
    let m = marker();
    let mut c = EngineConfig::new(d.path(), d.path().join("artifacts"));
    c.subreaper = true;
    let e = Engine::new(c).unwrap();
    // 100 background commands of 4 processes each; half ignore SIGTERM.
    for i in 0..100 {
        let trap = if i % 2 == 0 { "trap '' TERM; " } else { "" };
        let o = e
            .execute(ExecRequest {
                command: format!("{trap}sleep {m} & sleep {m} & sleep {m} & exec sleep {m}"),
                timeout: Some(0.01),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(
            matches!(o.status, Status::Running | Status::Exited),
            "{o:?}"
        );
    }
    assert!(wait_for_processes(&m, 400) >= 400);
    let t = Instant::now();
    let running = e.terminate_all().await;
    let took = t.elapsed();
    let left = survivors(&m);
    kill_leftovers(&m);
    assert!(left.is_empty(), "survivors: {left:?}");
    assert_eq!(running, 100);
    assert!(e.list().iter().all(|o| o.status != Status::Running));
    // One grace period for all (250 ms): one command after another would take 50 × 250 ms
    // for the TERM-ignoring half alone.
    assert!(took < Duration::from_secs(10), "{took:?}");
    println!("400 processes of 100 commands stopped in {took:?}");
}
