//! One stderr line per event: acquired, waiting, renewal failed, lost, released.
//! Renewal failures come from the client crate's `tracing` events.

use std::fmt::Write;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

#[derive(Debug, Clone, Copy)]
pub struct Events {
    quiet: bool,
}

impl Events {
    pub fn new(quiet: bool) -> Events {
        Events { quiet }
    }

    pub fn say(&self, line: impl std::fmt::Display) {
        if !self.quiet {
            eprintln!("redis-lock: {line}");
        }
    }

    /// Prints the client's renewal failures as event lines.
    pub fn install_tracing(&self) {
        if !self.quiet {
            let _ = tracing::subscriber::set_global_default(RenewalFailures);
        }
    }
}

/// A subscriber that prints only `lock renewal failed`.
struct RenewalFailures;

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
        if fields.message == "lock renewal failed" {
            eprintln!(
                "redis-lock: renew failed for {}: {} ({} ms of the lease left)",
                fields.key, fields.error, fields.remaining_ms
            );
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}
