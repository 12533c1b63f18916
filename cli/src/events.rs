//! One stderr line per event: acquired, waiting, renewal failed, lost, released,
//! each with the time it happened (RFC 3339, UTC, to the millisecond). Renewal
//! failures come from the client crate's `tracing` events; why a lock was lost, from
//! the lock itself (`Lock::cause`, see `why`).
//!
//! Every line the CLI prints goes through [`line()`] or [`out`], which never panic:
//! `eprintln!` and `println!` panic when the terminal is gone (EIO after a closed
//! pty) or the reader of a pipe has closed (EPIPE; Rust ignores SIGPIPE), and a
//! panic while a command runs would leave it running without the lock. A failed
//! write is dropped; supervision goes on.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::SystemTime;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Writes `redis-lock: {text}` and a newline to stderr, in one write; a failure is
/// ignored.
pub fn line(text: impl std::fmt::Display) {
    let text = format!("redis-lock: {text}\n");
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Writes `text` to stdout and flushes it; false if that failed.
pub fn out(text: &str) -> bool {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).is_ok() && stdout.flush().is_ok()
}

/// An owner id as it may be shown to people: control characters and other
/// non-printables escaped as Rust does (`\n`, `\u{1b}`), a backslash as `\\`, and
/// bytes that are not UTF-8 as `\xNN`. Any client can pick an owner, and a raw one
/// could move an operator's cursor, recolour the terminal or forge log lines; the
/// escaped form is also exact (two owners never show the same).
pub fn escaped(owner: &[u8]) -> String {
    let mut text = String::with_capacity(owner.len());
    for chunk in owner.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' | '\'' => text.push(c),
                c => text.extend(c.escape_debug()),
            }
        }
        for byte in chunk.invalid() {
            let _ = write!(text, "\\x{byte:02x}");
        }
    }
    text
}

#[derive(Debug, Clone, Copy)]
pub struct Events {
    quiet: bool,
}

impl Events {
    pub fn new(quiet: bool) -> Events {
        Events { quiet }
    }

    /// Writes an event line: `redis-lock: <time> {text}`, unless `--quiet`.
    pub fn say(&self, text: impl std::fmt::Display) {
        if !self.quiet {
            line(format_args!("{} {text}", now()));
        }
    }

    pub fn quiet(&self) -> bool {
        self.quiet
    }

    /// Prints the client's renewal failures as event lines (unless quiet).
    pub fn install_tracing(&self) {
        let _ = tracing::subscriber::set_global_default(RenewalFailures { quiet: self.quiet });
    }
}

/// Now, as event lines show it: RFC 3339 in UTC, to the millisecond.
fn now() -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_millis(SystemTime::now())
}

/// A subscriber that prints only `lock renewal failed` (the lock says why it was
/// lost itself: `Lock::cause`).
struct RenewalFailures {
    quiet: bool,
}

#[derive(Default)]
struct Fields {
    message: String,
    key: String,
    error: String,
    remaining_ms: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        match field.name() {
            "message" => self.message = text,
            "key" => self.key = text,
            "error" => self.error = text,
            "remaining_ms" => self.remaining_ms = text,
            _ => {}
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }
}

impl Subscriber for RenewalFailures {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN && metadata.target().starts_with("redis_lock_client")
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        // The client crate's words (client/src/held/renew.rs).
        if fields.message == "lock renewal failed" && !self.quiet {
            line(format_args!(
                "{} renew failed for {}: {} ({} ms of the lease left)",
                now(),
                fields.key,
                fields.error,
                fields.remaining_ms
            ));
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_shown_escaped_and_exact() {
        assert_eq!(escaped(b"worker-7"), "worker-7");
        assert_eq!(escaped(b"a\nb\x1b[31m"), "a\\nb\\u{1b}[31m");
        assert_eq!(
            escaped(b"\\x41"),
            "\\\\x41",
            "a backslash cannot fake an escape"
        );
        assert_eq!(escaped(b"\xff\xfeok"), "\\xff\\xfeok");
        assert_eq!(escaped("café \"q\"".as_bytes()), "café \"q\"");
        assert_eq!(
            escaped("\u{202e}".as_bytes()),
            "\\u{202e}",
            "a bidi override"
        );
    }
}
