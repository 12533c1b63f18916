//! The failover run, briefly, as part of `make test` (`make failover` runs it long):
//! one partition of the master per mode, plain and durable.

use std::process::Command;

fn field<'a>(block: &'a str, label: &str) -> &'a str {
    block
        .lines()
        .find_map(|line| line.trim_start().strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {label:?} in\n{block}"))
}

#[test]
fn a_brief_failover_run_keeps_the_fence_in_both_modes() {
    let module = redis_lock_testkit::module_path();
    let output = Command::new(env!("CARGO_BIN_EXE_lock-failover"))
        .args(["run", "--modes", "plain,durable", "--faults", "partition"])
        .args(["--seconds", "9", "--wait-ms", "1000", "--seed", "14"])
        .arg("--module")
        .arg(&module)
        .output()
        .expect("lock-failover");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let blocks: Vec<&str> = stdout.split("mode ").skip(1).collect();
    assert_eq!(blocks.len(), 2, "{stdout}");
    for block in blocks {
        // The fault must have done its work, or the run proved nothing.
        assert!(field(block, "faults:").contains("1 partition"), "{block}");
        let failovers: usize = field(block, "failovers observed:").parse().unwrap();
        assert!(failovers >= 1, "no failover in\n{block}");
        let grants: usize = field(block, "grants:").parse().unwrap();
        assert!(grants > 50, "{block}");
        for label in [
            "unanswered waiters:",
            "equal tokens, two holders:",
            "overlaps the fence did not resolve:",
        ] {
            assert_eq!(field(block, label), "0", "{label} in\n{block}");
        }
        assert_eq!(field(block, "verdict:"), "ok", "{block}");
    }
    assert!(stdout.contains("failover: ok"), "{stdout}");
}

#[test]
fn a_brief_failover_run_on_the_function_library_keeps_the_fence() {
    let output = Command::new(env!("CARGO_BIN_EXE_lock-failover"))
        .args(["run", "--modes", "plain", "--faults", "partition"])
        .args(["--seconds", "9", "--wait-ms", "1000", "--seed", "14"])
        .args(["--backend", "functions"])
        .arg("--module")
        .arg(redis_lock_testkit::module_path())
        .output()
        .expect("lock-failover");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let block = stdout.split("mode ").nth(1).expect("a mode's block");
    assert!(field(block, "faults:").contains("1 partition"), "{block}");
    let failovers: usize = field(block, "failovers observed:").parse().unwrap();
    assert!(failovers >= 1, "no failover in\n{block}");
    for label in [
        "unanswered waiters:",
        "equal tokens, two holders:",
        "overlaps the fence did not resolve:",
    ] {
        assert_eq!(field(block, label), "0", "{label} in\n{block}");
    }
    assert_eq!(field(block, "verdict:"), "ok", "{block}");
}
