//! The module's process-wide state: the token mint, the INFO counters and the
//! settings, with the load arguments that set them. Redis runs module code on its
//! main thread; atomics make these statics `Sync` without `unsafe`.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicI64, Ordering};

use redis_lock_core::args::{parse_i64, Limits, MAX_DURATION_MS};
use redis_lock_core::{Stats, TokenMint};

pub static MINT: TokenMint = TokenMint::new();
pub static STATS: Stats = Stats::new();

/// `lock.max-ttl`: largest TTL in ms a command may ask for, 0 for no cap.
pub static MAX_TTL: AtomicI64 = AtomicI64::new(0);
/// `lock.max-owner-len`: longest owner in bytes for a new holding.
pub static MAX_OWNER_LEN: AtomicI64 = AtomicI64::new(DEFAULT_MAX_OWNER_LEN);

pub const DEFAULT_MAX_OWNER_LEN: i64 = 256;
/// Largest `lock.max-owner-len` accepted: owners are ids, not payloads.
pub const OWNER_LEN_CEILING: i64 = 1 << 20;

/// The settings in force for this call.
pub fn limits() -> Limits {
    Limits {
        max_ttl: MAX_TTL.load(Ordering::Relaxed),
        max_owner_len: usize::try_from(MAX_OWNER_LEN.load(Ordering::Relaxed)).unwrap_or(0),
    }
}

/// A module config: its name after `lock.`, where its value lives, its bounds.
pub struct Setting {
    pub name: &'static str,
    pub value: &'static AtomicI64,
    pub min: i64,
    pub max: i64,
}

pub static SETTINGS: [Setting; 2] = [
    Setting {
        name: "max-ttl",
        value: &MAX_TTL,
        min: 0,
        max: MAX_DURATION_MS,
    },
    Setting {
        name: "max-owner-len",
        value: &MAX_OWNER_LEN,
        min: 1,
        max: OWNER_LEN_CEILING,
    },
];

impl Setting {
    /// Reads a value for this setting: an integer in its bounds, or why not (the
    /// setting, the value as given and the range, for the log and `CONFIG SET`).
    pub fn parse(&self, value: &[u8]) -> Result<i64, String> {
        match parse_i64(value) {
            Some(n) if (self.min..=self.max).contains(&n) => Ok(n),
            _ => Err(format!(
                "invalid value '{}' for lock.{}: expected an integer from {} to {}",
                shown(value),
                self.name,
                self.min,
                self.max
            )),
        }
    }

    /// Sets it from `value`, or changes nothing and says why.
    pub fn set(&self, value: &[u8]) -> Result<(), String> {
        let n = self.parse(value)?;
        self.value.store(n, Ordering::Relaxed);
        Ok(())
    }
}

/// An argument as the log shows it: lossy text with control bytes escaped, cut short.
fn shown(arg: &[u8]) -> String {
    let text = String::from_utf8_lossy(arg);
    let mut shown: String = text.chars().take(64).flat_map(char::escape_debug).collect();
    if text.chars().nth(64).is_some() {
        shown.push_str("...");
    }
    shown
}

/// Reads `loadmodule … NAME VALUE …`: pairs of a setting's name (with or without
/// `lock.`) and an integer in its bounds. Any unknown name, bad value or lone name
/// refuses the whole load (as Redis refuses an unknown directive), with the reason.
pub fn parse_load_args(args: &[&[u8]]) -> Result<Vec<(&'static Setting, i64)>, String> {
    let mut chosen = Vec::new();
    let mut pairs = args.chunks(2);
    for pair in &mut pairs {
        let [name, value] = pair else {
            let name = pair.first().map_or(String::new(), |n| shown(n));
            return Err(format!("load argument '{name}' has no value"));
        };
        let bare = name.strip_prefix(b"lock.").unwrap_or(name);
        let Some(setting) = SETTINGS.iter().find(|s| s.name.as_bytes() == bare) else {
            let known: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
            return Err(format!(
                "unknown load argument '{}' (known: {})",
                shown(name),
                known.join(", ")
            ));
        };
        chosen.push((setting, setting.parse(value)?));
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(args: &[&[u8]]) -> Result<Vec<(&'static str, i64)>, String> {
        parse_load_args(args).map(|chosen| chosen.into_iter().map(|(s, n)| (s.name, n)).collect())
    }

    #[test]
    fn settings_are_read_by_name_with_or_without_the_prefix() {
        assert_eq!(names(&[]), Ok(vec![]));
        assert_eq!(
            names(&[b"max-ttl", b"5000", b"lock.max-owner-len", b"64"]),
            Ok(vec![("max-ttl", 5000), ("max-owner-len", 64)])
        );
    }

    #[test]
    fn a_bad_argument_is_refused_with_its_name() {
        for (args, named) in [
            (&[&b"max_ttl"[..], b"5000"][..], "max_ttl"),
            (&[b"max-ttl", b"abc"], "max-ttl"),
            (&[b"max-ttl", b"-1"], "max-ttl"),
            (&[b"max-owner-len", b"0"], "max-owner-len"),
            (&[b"max-owner-len", b"1048577"], "max-owner-len"),
            (&[b"max-ttl", b"1", b"max-owner-len"], "max-owner-len"),
        ] {
            let error = names(args).unwrap_err();
            assert!(error.contains(named), "{args:?}: {error}");
        }
    }
}
