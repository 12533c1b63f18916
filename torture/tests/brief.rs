//! The torture test, briefly, as part of `make test` (`make torture` runs it longer).

use redis_lock_testkit as common;

use std::process::Command;

#[test]
fn a_brief_torture_run_finds_no_violation() {
    let module = common::module_path();
    let output = Command::new(env!("CARGO_BIN_EXE_lock-torture"))
        .args(["run", "--seconds", "6", "--workers", "16", "--keys", "4"])
        .arg("--module")
        .arg(&module)
        .output()
        .expect("lock-torture");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "overlaps found:         0",
        "token regressions:      0",
        "torture: ok",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in\n{stdout}");
    }
}
