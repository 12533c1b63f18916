//! The rules and hand-offs against the properties docs/contract.md promises, over random
//! operations on one key with a clock (`world`): acquires of every kind with and
//! without waiting, releases, extends, disconnects, key expiries set by hand
//! (`PEXPIRE`, `PERSIST`) and the passing of time.

mod world;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis_lock_core::Kind;
use world::{Op, World, OWNERS};

fn random_kind(rng: &mut StdRng) -> Kind {
    match rng.gen_range(0..4) {
        0 => Kind::Exclusive,
        1 => Kind::Shared { limit: None },
        _ => Kind::Shared {
            limit: Some(rng.gen_range(1..4)),
        },
    }
}

fn random_op(rng: &mut StdRng, world: &World) -> Op {
    let owner = rng.gen_range(0..OWNERS.len());
    match rng.gen_range(0..10) {
        0..=4 => Op::Acquire {
            owner,
            ttl: rng.gen_range(1..40),
            kind: random_kind(rng),
            wait: rng
                .gen_bool(0.6)
                .then(|| rng.gen_bool(0.5).then(|| rng.gen_range(1..60))),
        },
        5 | 6 => Op::Release { owner },
        7 => Op::Extend {
            owner,
            ttl: rng.gen_range(1..40),
        },
        8 => Op::Leave {
            handle: rng.gen_range(0..=world.next_handle),
        },
        9 if rng.gen_bool(0.2) => Op::SetKeyExpiry {
            ttl: rng.gen_bool(0.8).then(|| rng.gen_range(0..80)),
        },
        _ => Op::Tick {
            ms: rng.gen_range(0..50),
        },
    }
}

#[test]
fn random_operations_keep_every_promise() {
    for seed in 0..40 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut world = World::default();
        for _ in 0..3_000 {
            let op = random_op(&mut rng, &world);
            world.step(op);
            world.step(Op::Tick {
                ms: rng.gen_range(0..6),
            });
        }
    }
}
