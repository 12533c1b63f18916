//! What a lock holds: one exclusive holding, or one or more shared ones.
//!
//! The common case, one exclusive holding, stays as small as a lock ever was: its
//! token and owner in 48 bytes (one allocation in jemalloc's 48-byte class), and its
//! expiry is the key's own Redis expiry, not stored again here. Shared holdings each
//! keep their own absolute expiry; the key's expiry is the latest of them, so the key
//! lives while any holding does. A key command may set the key's expiry by hand
//! (`PEXPIRE`, `PERSIST`, `RESTORE` or `MIGRATE` with a TTL): a key expiry before a
//! shared holding's own ends it then, with the key; a later one (or none) lengthens
//! no holding, each keeps its lease, and the key goes with the last of them
//! ([`Lock::as_held`]).

use std::borrow::Cow;

use crate::owner::Owner;
pub use crate::shared::{SharedHolding, SharedHoldings};

/// Whether a holding excludes all others (a write lock) or admits other shared
/// ones (a read lock, a semaphore permit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    Exclusive,
    Shared,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

/// What an acquire asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The default: no other holding beside it.
    Exclusive,
    /// A shared holding, granted while no exclusive one exists and, with a limit,
    /// while fewer than `limit` owners hold the key (a counting semaphore). The limit
    /// belongs to the request: clients that disagree on it each get their own.
    Shared { limit: Option<u32> },
}

impl Kind {
    pub fn mode(self) -> Mode {
        match self {
            Kind::Exclusive => Mode::Exclusive,
            Kind::Shared { .. } => Mode::Shared,
        }
    }
}

/// A lock value, as stored at a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lock {
    /// One exclusive holding; its expiry is the key's.
    Exclusive { token: i64, owner: Owner },
    /// Shared holdings, indexed (see [`SharedHoldings`]); never empty. Boxed: the
    /// common exclusive lock stays 48 bytes.
    Shared(Box<SharedHoldings>),
}

/// One holding as replies show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder<'a> {
    pub owner: &'a [u8],
    pub token: i64,
    /// Absolute expiry, Unix ms; `None` when the key has no expiry (set by hand).
    pub expires_at: Option<i64>,
    /// The `LIMIT` a shared holding was granted with, if any.
    pub limit: Option<u32>,
}

/// True while a holding expiring at `expires_at` still holds at `now_ms`. As Redis
/// treats a key: it lapses only once its time is strictly past.
pub fn holds_at(expires_at: i64, now_ms: i64) -> bool {
    expires_at >= now_ms
}

impl Lock {
    /// A lock of one exclusive holding.
    pub fn exclusive(owner: &[u8], token: i64) -> Self {
        Lock::Exclusive {
            token,
            owner: Owner::new(owner),
        }
    }

    /// A lock of one shared holding, granted with `limit` if it gave one.
    pub fn shared(owner: &[u8], token: i64, expires_at: i64, limit: Option<u32>) -> Self {
        let mut holdings = SharedHoldings::new();
        holdings.push(SharedHolding {
            token,
            expires_at,
            owner: Owner::new(owner),
            limit,
        });
        Lock::Shared(Box::new(holdings))
    }

    pub fn mode(&self) -> Mode {
        match self {
            Lock::Exclusive { .. } => Mode::Exclusive,
            Lock::Shared(_) => Mode::Shared,
        }
    }

    /// The holdings, oldest first, with their expiries (an exclusive holding's is
    /// the key's, `key_expires_at`). No allocation: the common exclusive lock is read
    /// on every save, digest and reply.
    pub fn holders(&self, key_expires_at: Option<i64>) -> impl Iterator<Item = Holder<'_>> + '_ {
        let (exclusive, shared) = match self {
            Lock::Exclusive { token, owner } => (
                Some(Holder {
                    owner: owner.as_bytes(),
                    token: *token,
                    expires_at: key_expires_at,
                    limit: None,
                }),
                None,
            ),
            Lock::Shared(holdings) => (None, Some(holdings.iter())),
        };
        exclusive
            .into_iter()
            .chain(shared.into_iter().flatten().map(|h| Holder {
                owner: h.owner.as_bytes(),
                token: h.token,
                expires_at: Some(h.expires_at),
                limit: h.limit,
            }))
    }

    /// The key's expiry when a key command set it by hand (`PEXPIRE`, `RESTORE`
    /// with a TTL…) before the own expiry of some shared holding, which then ends
    /// with the key: `None` for an exclusive lock (its expiry is always the key's),
    /// and when no shared holding outlives the key.
    pub fn key_cap(&self, key_expires_at: Option<i64>) -> Option<i64> {
        let (Lock::Shared(holdings), Some(key)) = (self, key_expires_at) else {
            return None;
        };
        holdings.latest().is_some_and(|at| at > key).then_some(key)
    }

    /// The lock as it holds at a key expiring at `key_expires_at`: each shared
    /// holding until its own expiry or the key's, whichever comes first (see
    /// [`Lock::key_cap`]). A copy only when the key ends some holding early.
    pub fn as_held(&self, key_expires_at: Option<i64>) -> Cow<'_, Lock> {
        match self.key_cap(key_expires_at) {
            None => Cow::Borrowed(self),
            Some(cap) => {
                let mut held = self.clone();
                held.cap_expiries(cap);
                Cow::Owned(held)
            }
        }
    }

    /// Ends every shared holding by `cap` at the latest (a [`Lock::key_cap`]).
    pub fn cap_expiries(&mut self, cap: i64) {
        if let Lock::Shared(holdings) = self {
            holdings.cap_expiries(cap);
        }
    }

    /// The holdings that still hold at `now_ms` (shared holdings whose expiry passed
    /// are gone, even before the module removes them), each with its expiry as it
    /// holds (see [`Lock::as_held`]).
    pub fn live_holders(
        &self,
        key_expires_at: Option<i64>,
        now_ms: i64,
    ) -> impl Iterator<Item = Holder<'_>> + '_ {
        let cap = self.key_cap(key_expires_at);
        self.holders(key_expires_at)
            .map(move |h| match (cap, h.expires_at) {
                (Some(cap), Some(at)) => Holder {
                    expires_at: Some(at.min(cap)),
                    ..h
                },
                _ => h,
            })
            .filter(move |h| h.expires_at.is_none_or(|at| holds_at(at, now_ms)))
    }

    /// The token of `owner`'s holding in `mode`, if it has one (lapsed or not).
    pub fn token_of(&self, owner: &[u8], mode: Mode) -> Option<i64> {
        match self {
            Lock::Exclusive { token, owner: o } if mode == Mode::Exclusive => {
                (o.as_bytes() == owner).then_some(*token)
            }
            Lock::Shared(holdings) if mode == Mode::Shared => holdings.get(owner).map(|h| h.token),
            _ => None,
        }
    }

    /// True when `owner` has a holding here, in either mode (lapsed or not).
    pub fn is_held_by(&self, owner: &[u8]) -> bool {
        self.token_of(owner, self.mode()).is_some()
    }

    /// The token of `owner`'s holding, if it has one (lapsed or not), in the lock's
    /// mode.
    pub fn holding_of(&self, owner: &[u8]) -> Option<i64> {
        self.token_of(owner, self.mode())
    }

    /// Shared holdings' count; 1 for an exclusive lock.
    pub fn len(&self) -> usize {
        match self {
            Lock::Exclusive { .. } => 1,
            Lock::Shared(holdings) => holdings.len(),
        }
    }

    /// Never true: a lock has at least one holding (a lock whose last holding goes
    /// is deleted).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key's expiry for these holdings: the latest shared one, or (exclusive)
    /// the key's own.
    pub fn key_expiry(&self, key_expires_at: Option<i64>) -> Option<i64> {
        match self {
            Lock::Exclusive { .. } => key_expires_at,
            Lock::Shared(holdings) => holdings.latest(),
        }
    }

    /// The earliest own expiry among shared holdings: when the module must look, to
    /// remove a holding that lapses while others live on, and also the last one's,
    /// as a key command may since have set the key to outlive its holdings
    /// (`PERSIST`, a longer `PEXPIRE`): nothing of the lock may stay after them.
    pub fn next_lapse(&self) -> Option<i64> {
        match self {
            Lock::Exclusive { .. } => None,
            Lock::Shared(holdings) => holdings.earliest(),
        }
    }

    /// Adds a shared holding (the lock is shared), granted with `limit` if any.
    pub fn add_shared(&mut self, owner: &[u8], token: i64, expires_at: i64, limit: Option<u32>) {
        if let Lock::Shared(holdings) = self {
            holdings.push(SharedHolding {
                token,
                expires_at,
                owner: Owner::new(owner),
                limit,
            });
        }
    }

    /// Sets the expiry of `owner`'s shared holding.
    pub fn set_shared_expiry(&mut self, owner: &[u8], expires_at: i64) -> bool {
        match self {
            Lock::Shared(holdings) => holdings.set_expiry(owner, expires_at),
            Lock::Exclusive { .. } => false,
        }
    }

    /// Removes `owner`'s holding; true if it had one. A lock left empty must be
    /// deleted by the caller (see [`Lock::is_empty`]): for an exclusive lock that is
    /// always the case.
    pub fn remove(&mut self, owner: &[u8]) -> bool {
        match self {
            Lock::Exclusive { owner: o, .. } => o.as_bytes() == owner,
            Lock::Shared(holdings) => holdings.remove(owner).is_some(),
        }
    }

    /// Removes the shared holdings that lapsed at `now_ms`; returns their owners and
    /// tokens, oldest first. An exclusive lock lapses with its key, which Redis
    /// removes.
    pub fn remove_lapsed(&mut self, now_ms: i64) -> Vec<(Box<[u8]>, i64)> {
        let Lock::Shared(holdings) = self else {
            return Vec::new();
        };
        holdings
            .remove_lapsed(now_ms)
            .into_iter()
            .map(|h| (h.owner.as_bytes().into(), h.token))
            .collect()
    }

    /// Heap bytes this lock owns besides the `Lock` itself (for `MEMORY USAGE`).
    pub fn heap_size(&self) -> usize {
        match self {
            Lock::Exclusive { owner, .. } => owner.heap_size(),
            Lock::Shared(holdings) => {
                std::mem::size_of::<SharedHoldings>().saturating_add(holdings.heap_size())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exclusive_lock_with_a_uuid_owner_fits_one_48_byte_allocation() {
        assert_eq!(std::mem::size_of::<Lock>(), 48);
    }

    #[test]
    fn owners_compare_as_bytes() {
        let lock = Lock::exclusive(b"owner\0\xff", 1);
        assert!(lock.is_held_by(b"owner\0\xff"));
        assert!(!lock.is_held_by(b"owner\0"));
        assert!(!lock.is_held_by(b"OWNER\0\xff"));
    }

    #[test]
    fn an_exclusive_holding_expires_with_its_key() {
        let lock = Lock::exclusive(b"a", 7);
        assert_eq!(lock.key_expiry(Some(500)), Some(500));
        assert_eq!(
            lock.holders(Some(500)).collect::<Vec<_>>(),
            [Holder {
                owner: b"a",
                token: 7,
                expires_at: Some(500),
                limit: None,
            }]
        );
        assert_eq!(lock.next_lapse(), None);
        assert_eq!(
            lock.token_of(b"a", Mode::Shared),
            None,
            "not in the other mode"
        );
    }

    #[test]
    fn the_key_of_shared_holdings_expires_with_the_last_of_them() {
        let mut lock = Lock::shared(b"a", 1, 300, None);
        lock.add_shared(b"b", 2, 100, None);
        lock.add_shared(b"c", 3, 200, None);
        assert_eq!(lock.key_expiry(None), Some(300));
        assert_eq!(lock.next_lapse(), Some(100));
        assert_eq!(lock.live_holders(Some(300), 150).count(), 2);
        assert_eq!(lock.remove_lapsed(150), [(b"b"[..].into(), 2)]);
        assert_eq!(lock.next_lapse(), Some(200));
        assert!(lock.set_shared_expiry(b"c", 300));
        assert_eq!(lock.next_lapse(), Some(300), "the last one's too");
        assert!(lock.remove(b"a") && !lock.remove(b"a"));
        assert_eq!(lock.holders(None).map(|h| h.token).collect::<Vec<_>>(), [3]);
        assert!(lock.remove(b"c") && lock.is_empty());
    }

    #[test]
    fn a_holding_lapses_only_once_its_time_is_strictly_past() {
        assert!(holds_at(100, 100));
        assert!(!holds_at(100, 101));
    }
}
