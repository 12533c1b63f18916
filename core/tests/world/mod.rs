//! One lock key, its queue and a clock, driven by operations, with the contract's
//! promises (docs/contract.md) checked after every step. Shared by the model test
//! (random operations) and the fuzz target `planner` (operations from fuzzer bytes).

use redis_lock_core::handoff::Answer;
use redis_lock_core::holdings::{Kind, Lock, Mode};
use redis_lock_core::queue::{Queues, Waiter};
use redis_lock_core::rules::{fits, Acquire, AcquirePlan};
use redis_lock_core::store::{self, MemoryStore};
use redis_lock_core::TokenMint;

pub const OWNERS: [&[u8]; 6] = [b"a", b"b", b"c", b"d", b"e", b"f"];

/// One thing that happens to the key.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// `LOCK.ACQUIRE k owner ttl [SHARED | LIMIT n]`, queueing when busy if `wait`
    /// (with a deadline `timeout` ms ahead, or none).
    Acquire {
        owner: usize,
        ttl: i64,
        kind: Kind,
        wait: Option<Option<i64>>,
    },
    Release {
        owner: usize,
    },
    Extend {
        owner: usize,
        ttl: i64,
    },
    /// The waiter with this handle disconnects.
    Leave {
        handle: u32,
    },
    /// A key command sets the key's expiry by hand: `PEXPIRE k ttl`, or `PERSIST k`
    /// for none (nothing when the key is gone).
    SetKeyExpiry {
        ttl: Option<i64>,
    },
    /// Time passes.
    Tick {
        ms: i64,
    },
}

pub struct World {
    pub store: MemoryStore,
    pub queues: Queues<u32>,
    pub mint: TokenMint,
    pub now: i64,
    pub next_handle: u32,
    last_token: i64,
    last_granted_handle: Option<u32>,
    /// A key command set the key's expiry since the key was created.
    set_by_hand: bool,
}

impl Default for World {
    fn default() -> Self {
        World {
            store: MemoryStore::default(),
            queues: Queues::new(),
            mint: TokenMint::new(),
            now: 1_000,
            next_handle: 0,
            last_token: 0,
            last_granted_handle: None,
            set_by_hand: false,
        }
    }
}

impl World {
    fn live(&self) -> Vec<(Vec<u8>, Mode)> {
        match &self.store.lock {
            None => Vec::new(),
            Some(lock) => lock
                .live_holders(self.store.expiry, self.now)
                .map(|h| (h.owner.to_vec(), lock.mode()))
                .collect(),
        }
    }

    fn check_holdings(&self) {
        let live = self.live();
        if live.iter().any(|(_, mode)| *mode == Mode::Exclusive) {
            assert_eq!(live.len(), 1, "an exclusive holding is alone: {live:?}");
        }
        // The key's expiry is the last shared holding's, unless a key command set it
        // by hand: no live holding then outlives the key.
        if let Some(Lock::Shared(holdings)) = &self.store.lock {
            assert!(!holdings.is_empty());
            let last = holdings.iter().map(|h| h.expires_at).max();
            if self.store.expiry != last {
                assert!(self.set_by_hand, "the key expires with its last holding");
                for holder in self
                    .store
                    .lock
                    .iter()
                    .flat_map(|l| l.live_holders(self.store.expiry, self.now))
                {
                    let (at, key) = (holder.expires_at, self.store.expiry);
                    assert!(key.is_none() || at <= key, "a holding outlives its key");
                }
            }
        }
    }

    /// What the module does whenever the key may have changed: Redis expires the
    /// key, lapsed shared holdings go, the queue is served.
    pub fn settle_and_hand_off(&mut self) {
        self.store.expire(self.now);
        store::settle(&mut self.store, self.now).unwrap();
        if self.store.lock.is_none() {
            self.set_by_hand = false;
        }
        assert!(
            self.store.lock.is_none() || !self.live().is_empty(),
            "the key exists while a holding lives, and only then"
        );
        let mut holders = self.live().len();
        let queued = self.queues.waiting(0, b"k");
        let step = store::hand_off(
            &mut self.store,
            &mut self.queues,
            0,
            b"k",
            None,
            self.now,
            &self.mint,
        )
        .unwrap();
        let answered: usize =
            step.answers.len() + step.grants.iter().map(|g| g.waiters.len()).sum::<usize>();
        assert_eq!(
            queued - self.queues.waiting(0, b"k"),
            answered,
            "every waiter that leaves is answered"
        );
        for (waiter, answer) in &step.answers {
            if *answer == Answer::TimedOut {
                assert!(waiter.has_timed_out(self.now), "timed out early");
            }
        }
        for grant in &step.grants {
            if grant.fresh {
                assert!(grant.token > self.last_token, "fresh tokens increase");
                self.last_token = grant.token;
            }
            for waiter in &grant.waiters {
                assert!(
                    !waiter.has_timed_out(self.now),
                    "granted after its deadline"
                );
            }
            // Grants go to the head of the queue in arrival order; an owner's later
            // waiters share its grant, ahead of their turn.
            let first = grant.waiters[0].handle;
            if let Some(last) = self.last_granted_handle {
                assert!(first > last, "FIFO: {first} after {last}");
            }
            self.last_granted_handle = Some(first);
            if grant.fresh {
                if let Kind::Shared { limit: Some(n) } = grant.kind {
                    assert!(holders < n as usize, "granted over LIMIT {n}");
                }
                holders += 1;
            }
        }
        self.check_holdings();
        if let Some(front) = self.queues.front(0, b"k") {
            let holds_other_mode = self
                .store
                .lock
                .as_ref()
                .is_some_and(|lock| lock.is_held_by(&front.owner));
            assert!(
                front.has_timed_out(self.now)
                    || holds_other_mode
                    || !fits(store::held(&self.store).as_deref(), front.kind, self.now),
                "the head of the queue fits and was not granted"
            );
        }
    }

    /// Applies `op` as the module would, then checks every promise.
    pub fn step(&mut self, op: Op) {
        self.settle_and_hand_off();
        match op {
            Op::Acquire {
                owner,
                ttl,
                kind,
                wait,
            } => {
                let owner = OWNERS[owner % OWNERS.len()];
                let request = Acquire { owner, ttl, kind };
                let queued = self.queues.waiting(0, b"k") > 0;
                let now = self.now;
                let before = self.live();
                let plan = store::acquire(&mut self.store, request, queued, || now, &self.mint, 64);
                match plan {
                    Ok(AcquirePlan::Grant { token, .. }) => {
                        assert!(!queued, "a newcomer never goes ahead of the queue");
                        assert!(token > self.last_token, "fresh tokens increase");
                        self.last_token = token;
                        if let Kind::Shared { limit: Some(n) } = kind {
                            assert!(before.len() < n as usize, "granted over LIMIT {n}");
                        }
                        if kind == Kind::Exclusive {
                            assert!(before.is_empty(), "an exclusive grant beside {before:?}");
                        }
                    }
                    Ok(AcquirePlan::Refresh { .. }) => {
                        assert!(before.iter().any(|(o, m)| o == owner && *m == kind.mode()));
                    }
                    Ok(AcquirePlan::Busy) => {
                        if let Some(timeout) = wait {
                            self.next_handle += 1;
                            self.queues.push(
                                0,
                                b"k",
                                Waiter {
                                    handle: self.next_handle,
                                    owner: owner.into(),
                                    ttl,
                                    kind,
                                    deadline: timeout.map(|ms| now.saturating_add(ms)),
                                    queued_at: 0,
                                },
                            );
                        }
                    }
                    Err(_) => {}
                }
            }
            Op::Release { owner } => {
                let owner = OWNERS[owner % OWNERS.len()];
                store::release(&mut self.store, owner, || Some(self.now)).unwrap();
            }
            Op::Extend { owner, ttl } => {
                let owner = OWNERS[owner % OWNERS.len()];
                let _ = store::extend(&mut self.store, owner, ttl, self.now);
            }
            Op::Leave { handle } => {
                self.queues.remove(handle);
            }
            Op::SetKeyExpiry { ttl } => {
                if self.store.lock.is_some() {
                    self.store.expiry = ttl.map(|ms| self.now.saturating_add(ms));
                    self.set_by_hand = true;
                }
            }
            Op::Tick { ms } => self.now = self.now.saturating_add(ms),
        }
        self.check_holdings();
        self.settle_and_hand_off();
    }
}
