//! The README's redis-cli session, run as written against a real server with the
//! module, so that the README cannot drift from what the server answers.
//!
//! The session is the fenced block after `<!-- readme-session -->`. Its lines are:
//! - `127.0.0.1:6390> COMMAND`: a command, sent by the real `redis-cli` (on its
//!   standard input, as typed, so redis-cli splits and quotes the arguments), whose
//!   human-format reply must equal the lines that follow it;
//! - `# …` comments; one that names the "second shell" makes the next commands
//!   those of a second redis-cli, started in the background (its `WAIT` blocks), and
//!   the reply lines after a later "second shell" comment are its answer; one that
//!   names the "first shell" switches back;
//! - `$ …`: the shell command that starts redis-cli, not run;
//! - every other line is a reply line. In a reply line, `<ms>` is any integer from 0
//!   to 60000 (the milliseconds a holding has left) and `<token-N>` (any name other
//!   than `ms`) is a fencing token: the same name is the same integer everywhere in
//!   the session, and each new name is a greater token than the names before it.
//!   Everything else must match exactly.

use redis_lock_testkit as common;

use std::collections::HashMap;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::Server;

const MARKER: &str = "<!-- readme-session -->";
const PROMPT: &str = "127.0.0.1:6390> ";
/// The largest TTL the session asks for: a `<ms>` above it is wrong.
const LONGEST_TTL_MS: i64 = 60_000;

#[derive(Debug, PartialEq)]
enum Shell {
    First,
    Second,
}

#[derive(Debug)]
struct Step {
    shell: Shell,
    command: String,
    expected: Vec<String>,
    /// The step's README line, for messages.
    line: usize,
}

#[derive(Debug)]
enum Event {
    /// Run step `i` (in the first shell: and compare its reply).
    Run(usize),
    /// Collect the reply of the second shell's step `i` and compare it.
    Answer(usize),
}

/// The fenced block after the marker, with the README line number of its first line.
fn session(readme: &str) -> (Vec<&str>, usize) {
    let lines: Vec<&str> = readme.lines().collect();
    let markers: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].trim() == MARKER)
        .collect();
    assert_eq!(markers.len(), 1, "README.md has one {MARKER}");
    let open = markers[0] + 1;
    assert!(
        lines.get(open).is_some_and(|l| l.starts_with("```")),
        "a fenced block follows {MARKER}"
    );
    let body: Vec<&str> = lines[open + 1..]
        .iter()
        .take_while(|l| !l.starts_with("```"))
        .copied()
        .collect();
    (body, open + 2)
}

fn parse(body: &[&str], first_line: usize) -> (Vec<Step>, Vec<Event>) {
    let mut steps: Vec<Step> = Vec::new();
    let mut events = Vec::new();
    let mut shell = Shell::First;
    let mut last = [None::<usize>, None::<usize>];
    let mut answered = false;
    for (n, line) in body.iter().enumerate() {
        let slot = usize::from(shell == Shell::Second);
        if line.starts_with("$ ") {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            if comment.contains("second shell") {
                shell = Shell::Second;
            } else if comment.contains("first shell") {
                shell = Shell::First;
            }
        } else if let Some(command) = line.strip_prefix(PROMPT) {
            if shell == Shell::Second {
                answered = false;
            }
            last[slot] = Some(steps.len());
            events.push(Event::Run(steps.len()));
            steps.push(Step {
                shell: if slot == 1 {
                    Shell::Second
                } else {
                    Shell::First
                },
                command: command.to_string(),
                expected: Vec::new(),
                line: first_line + n,
            });
        } else {
            let step = last[slot].unwrap_or_else(|| {
                panic!("README line {}: a reply before any command", first_line + n)
            });
            if shell == Shell::Second && !answered {
                answered = true;
                events.push(Event::Answer(step));
            }
            steps[step].expected.push(line.to_string());
        }
    }
    (steps, events)
}

/// redis-cli with `command` on its standard input, as a user types it.
fn spawn_cli(server: &Server, command: &str) -> Child {
    let mut child = Command::new("redis-cli")
        .args(["-p", &server.port.to_string(), "--no-raw"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("redis-cli (Debian package redis-tools)");
    let mut stdin = child.stdin.take().expect("redis-cli's stdin");
    writeln!(stdin, "{command}").expect("writing to redis-cli");
    child
}

fn reply_of(child: Child) -> Vec<String> {
    let output = child.wait_with_output().expect("redis-cli ran");
    assert!(output.status.success(), "redis-cli failed: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Tokens seen so far, by name, in the order first seen.
#[derive(Default)]
struct Tokens {
    by_name: HashMap<String, i64>,
    greatest: Option<i64>,
}

impl Tokens {
    /// Whether `actual` matches the README's `expected` line, binding new tokens.
    fn matches(&mut self, expected: &str, actual: &str) -> Result<(), String> {
        let mut rest_expected = expected;
        let mut rest_actual = actual;
        while let Some(open) = rest_expected.find('<') {
            let Some(close) = rest_expected[open..].find('>') else {
                break;
            };
            let (literal, name) = (
                &rest_expected[..open],
                &rest_expected[open + 1..open + close],
            );
            rest_actual = rest_actual
                .strip_prefix(literal)
                .ok_or_else(|| format!("expected {literal:?} at {rest_actual:?}"))?;
            let digits = rest_actual
                .find(|c: char| !c.is_ascii_digit() && c != '-')
                .unwrap_or(rest_actual.len());
            let value: i64 = rest_actual[..digits]
                .parse()
                .map_err(|_| format!("<{name}> is not an integer in {rest_actual:?}"))?;
            self.bind(name, value)?;
            rest_actual = &rest_actual[digits..];
            rest_expected = &rest_expected[open + close + 1..];
        }
        if rest_expected == rest_actual {
            Ok(())
        } else {
            Err(format!("expected {rest_expected:?}, got {rest_actual:?}"))
        }
    }

    fn bind(&mut self, name: &str, value: i64) -> Result<(), String> {
        if name == "ms" {
            return if (0..=LONGEST_TTL_MS).contains(&value) {
                Ok(())
            } else {
                Err(format!("<ms> is {value}, not a TTL of the session"))
            };
        }
        if let Some(&known) = self.by_name.get(name) {
            return if known == value {
                Ok(())
            } else {
                Err(format!("<{name}> was {known}, now {value}"))
            };
        }
        if value <= 0 || self.greatest.is_some_and(|greatest| value <= greatest) {
            return Err(format!(
                "<{name}> = {value} is not a new token above {:?}",
                self.greatest
            ));
        }
        self.by_name.insert(name.to_string(), value);
        self.greatest = Some(value);
        Ok(())
    }
}

fn compare(tokens: &mut Tokens, step: &Step, actual: &[String]) {
    let context = || {
        format!(
            "README line {}: {}\nREADME says:\n{}\nredis-cli says:\n{}",
            step.line,
            step.command,
            step.expected.join("\n"),
            actual.join("\n")
        )
    };
    assert_eq!(
        step.expected.len(),
        actual.len(),
        "reply lines differ\n{}",
        context()
    );
    for (expected, actual) in step.expected.iter().zip(actual) {
        if let Err(why) = tokens.matches(expected, actual) {
            panic!("{why}\n{}", context());
        }
    }
}

fn blocked_clients(server: &Server) -> i64 {
    let mut con = server.connection();
    common::info_field(&mut con, "clients", "blocked_clients")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_readme_session_gets_the_replies_the_readme_shows() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let (body, first_line) = session(&readme);
    let (steps, events) = parse(&body, first_line);
    assert!(
        steps.len() >= 20,
        "the session has its commands: {steps:#?}"
    );
    assert!(
        steps.iter().any(|s| s.shell == Shell::Second),
        "the session has its second shell"
    );

    let server = Server::start();
    let mut tokens = Tokens::default();
    let mut waiting: HashMap<usize, Child> = HashMap::new();
    for event in events {
        match event {
            Event::Run(i) if steps[i].shell == Shell::Second => {
                let blocked = blocked_clients(&server);
                waiting.insert(i, spawn_cli(&server, &steps[i].command));
                // The first shell goes on only once the second one waits in the server.
                common::wait_until(Duration::from_secs(5), || {
                    blocked_clients(&server) > blocked
                });
            }
            Event::Run(i) => {
                let reply = reply_of(spawn_cli(&server, &steps[i].command));
                compare(&mut tokens, &steps[i], &reply);
            }
            Event::Answer(i) => {
                let child = waiting.remove(&i).expect("the second shell's command ran");
                compare(&mut tokens, &steps[i], &reply_of(child));
            }
        }
    }
    assert!(
        waiting.is_empty(),
        "a second-shell command without its answer in the README"
    );
}
