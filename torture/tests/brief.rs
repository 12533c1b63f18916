//! The torture test, briefly, in each mode, as part of `make test` (`make torture`
//! runs it longer).

use redis_lock_testkit as common;

use std::process::Command;

fn brief_run(mode: &str, seconds: &str) {
    brief_run_on("module", mode, seconds);
}

fn brief_run_on(backend: &str, mode: &str, seconds: &str) {
    let module = common::module_path();
    let output = Command::new(env!("CARGO_BIN_EXE_lock-torture"))
        .args([
            "run",
            "--seconds",
            seconds,
            "--workers",
            "16",
            "--keys",
            "4",
        ])
        .args(["--mode", mode])
        .args(["--backend", backend])
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
        "over the limit:         0",
        "token regressions:      0",
        "torture: ok",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in\n{stdout}");
    }
}

#[test]
fn a_brief_torture_run_finds_no_violation() {
    brief_run("exclusive", "6");
}

#[test]
fn a_brief_semaphore_torture_run_finds_no_violation() {
    brief_run("semaphore", "4");
}

#[test]
fn a_brief_read_write_torture_run_finds_no_violation() {
    brief_run("rw", "4");
}

#[test]
fn a_brief_torture_run_on_the_function_library_finds_no_violation() {
    brief_run_on("functions", "rw", "4");
}
