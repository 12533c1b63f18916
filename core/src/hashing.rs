//! The hash maps of the module's indexes (queues by key and owner, holdings by
//! owner, waiters by handle): foldhash, seeded per map at random, instead of the
//! standard library's SipHash. A hand-off hashes each granted waiter's key and owner
//! about ten times; with SipHash that was a fifth of a hand-off's instructions
//! (bench/RESULTS.md, "Shared locks that scale"). The random seed keeps a client
//! from choosing owners that collide.

pub type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub type HashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;
