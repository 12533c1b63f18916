//! `LOCK.GUARD key token command [arg ...]`: a write that lands only while the
//! holding of `key` with fencing token `token` lives (contract.md, "Fenced writes").
//! The rules here decide; the module runs the inner command where they say so.
//!
//! When a holding "lives" for the guard: an exclusive holding lives while its key
//! exists. Its expiry is the key's, and Redis decides that with the clock it holds
//! still for a whole command (`EXEC` and scripts included), so several guarded
//! writes in one `MULTI`/`EXEC` see one answer. A shared holding has an expiry of
//! its own, compared with `now_ms`.

use std::fmt;

use crate::args::{parse_positive, ArgError};
use crate::holdings::{holds_at, Lock};

/// What the guard found at the lock key for the token it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A live holding has the token: the inner command runs.
    Holds,
    /// Nothing holds the key.
    Free,
    /// The key is held, with other tokens: up to [`TOKENS_SHOWN`] of them, oldest
    /// first, and how many there are.
    HeldWith { tokens: Vec<i64>, count: usize },
}

/// How many of the holders' tokens a `FENCED` error names.
pub const TOKENS_SHOWN: usize = 3;

/// Longest part of a key a `FENCED` error shows, in bytes before escaping.
const KEY_SHOWN: usize = 128;

/// Whether `token` holds `lock` (`None`: the key is free) at `now_ms`.
///
/// A shared lock's token is found by walking its holdings: shared tokens do not
/// fence writers (contract.md), and the walk stops at the token's holding.
pub fn check(lock: Option<&Lock>, token: i64, now_ms: i64) -> Found {
    let Some(lock) = lock else {
        return Found::Free;
    };
    let mut live = lock.holders(None).filter(|h| match lock {
        Lock::Exclusive { .. } => true,
        Lock::Shared(_) => h.expires_at.is_none_or(|at| holds_at(at, now_ms)),
    });
    let mut tokens = Vec::new();
    let mut count = 0;
    for holder in live.by_ref() {
        if holder.token == token {
            return Found::Holds;
        }
        if tokens.len() < TOKENS_SHOWN {
            tokens.push(holder.token);
        }
        count += 1;
    }
    if count == 0 {
        Found::Free
    } else {
        Found::HeldWith { tokens, count }
    }
}

/// The token argument: an integer from 1 to 2^63 - 1.
pub fn parse_token(arg: &[u8]) -> Result<i64, ArgError> {
    parse_positive(arg).ok_or(ArgError::BadToken)
}

/// True for the module's own commands (`LOCK.*`), which the guard never runs.
pub fn is_lock_command(name: &[u8]) -> bool {
    name.get(..5)
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(b"lock."))
}

/// The `FENCED` error of a guard whose token does not hold the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced<'a> {
    pub key: &'a [u8],
    pub token: i64,
    pub found: Found,
}

impl fmt::Display for Fenced<'_> {
    /// `FENCED token 17 does not hold jobs:1: the lock is free`, or `…: it is held
    /// with token 19`. The key is shown escaped (an error line is ASCII) and cut.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = self.key.get(..KEY_SHOWN).unwrap_or(self.key);
        let cut = if shown.len() < self.key.len() {
            "..."
        } else {
            ""
        };
        write!(
            f,
            "FENCED token {} does not hold {}{cut}: ",
            self.token,
            shown.escape_ascii()
        )?;
        match &self.found {
            Found::Free | Found::Holds => write!(f, "the lock is free"),
            Found::HeldWith { tokens, count } => {
                let listed: Vec<String> = tokens.iter().map(i64::to_string).collect();
                match (listed.as_slice(), count.saturating_sub(tokens.len())) {
                    ([one], 0) => write!(f, "it is held with token {one}"),
                    (_, 0) => write!(f, "it is held with tokens {}", listed.join(", ")),
                    (_, more) => write!(
                        f,
                        "it is held with tokens {} and {more} more",
                        listed.join(", ")
                    ),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::Owner;
    use crate::shared::{SharedHolding, SharedHoldings};

    fn exclusive(token: i64) -> Lock {
        Lock::Exclusive {
            token,
            owner: Owner::new(b"a"),
        }
    }

    fn shared(holdings: &[(i64, i64)]) -> Lock {
        let mut all = SharedHoldings::new();
        for (i, (token, expires_at)) in holdings.iter().enumerate() {
            all.push(SharedHolding {
                owner: Owner::new(format!("o{i}").as_bytes()),
                token: *token,
                expires_at: *expires_at,
                limit: None,
            });
        }
        Lock::Shared(Box::new(all))
    }

    #[test]
    fn the_holders_token_holds_and_no_other() {
        assert_eq!(check(Some(&exclusive(17)), 17, 1_000), Found::Holds);
        assert_eq!(
            check(Some(&exclusive(19)), 17, 1_000),
            Found::HeldWith {
                tokens: vec![19],
                count: 1
            }
        );
        assert_eq!(check(None, 17, 1_000), Found::Free);
    }

    #[test]
    fn an_exclusive_holding_lives_while_its_key_does_whatever_the_clock() {
        // Its expiry is the key's, which Redis checked when the key was opened.
        assert_eq!(check(Some(&exclusive(17)), 17, i64::MAX), Found::Holds);
    }

    #[test]
    fn a_lapsed_shared_holding_does_not_hold() {
        let lock = shared(&[(5, 900), (6, 2_000)]);
        assert_eq!(check(Some(&lock), 6, 1_000), Found::Holds);
        assert_eq!(
            check(Some(&lock), 5, 1_000),
            Found::HeldWith {
                tokens: vec![6],
                count: 1
            }
        );
        // Expiring at now still holds, as Redis treats a key.
        assert_eq!(check(Some(&lock), 5, 900), Found::Holds);
        assert_eq!(check(Some(&shared(&[(5, 900)])), 5, 1_000), Found::Free);
    }

    #[test]
    fn tokens_are_integers_from_one_to_the_largest_i64() {
        assert_eq!(parse_token(b"1"), Ok(1));
        assert_eq!(parse_token(b"9223372036854775807"), Ok(i64::MAX));
        for bad in [
            &b"0"[..],
            b"-1",
            b"9223372036854775808",
            b"abc",
            b"",
            b"1.5",
            b" 1",
            b"+1",
            b"01",
        ] {
            assert_eq!(parse_token(bad), Err(ArgError::BadToken), "{bad:?}");
        }
    }

    #[test]
    fn lock_commands_are_known_whatever_their_case() {
        assert!(is_lock_command(b"LOCK.ACQUIRE"));
        assert!(is_lock_command(b"lock.guard"));
        assert!(is_lock_command(b"Lock.Info"));
        assert!(!is_lock_command(b"LOCK"));
        assert!(!is_lock_command(b"SET"));
        assert!(!is_lock_command(b""));
    }

    #[test]
    fn a_fenced_error_names_the_key_the_token_and_why() {
        let fenced = |found| {
            Fenced {
                key: b"jobs:1",
                token: 17,
                found,
            }
            .to_string()
        };
        assert_eq!(
            fenced(Found::Free),
            "FENCED token 17 does not hold jobs:1: the lock is free"
        );
        assert_eq!(
            fenced(Found::HeldWith {
                tokens: vec![19],
                count: 1
            }),
            "FENCED token 17 does not hold jobs:1: it is held with token 19"
        );
        assert_eq!(
            fenced(Found::HeldWith {
                tokens: vec![3, 4, 5],
                count: 10
            }),
            "FENCED token 17 does not hold jobs:1: it is held with tokens 3, 4, 5 and 7 more"
        );
    }

    #[test]
    fn a_binary_or_long_key_is_shown_escaped_and_cut() {
        let key = [b"a\r\n\x00\xff".as_slice(), &[b'k'; 300]].concat();
        let text = Fenced {
            key: &key,
            token: 1,
            found: Found::Free,
        }
        .to_string();
        assert!(text.is_ascii());
        assert!(!text.contains('\r') && !text.contains('\n'));
        assert!(text.contains("a\\r\\n\\x00\\xff"), "{text}");
        assert!(text.contains("k...: the lock is free"), "{text}");
        assert!(text.len() < 200, "{}", text.len());
    }
}
