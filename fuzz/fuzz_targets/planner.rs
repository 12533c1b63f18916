//! The planner (rules, hand-offs, lapses) on one key with a clock, driven by fuzzer
//! bytes: every promise of docs/contract.md is checked after each step by the same world as
//! the core's model test, and nothing panics on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redis_lock_core::Kind;

#[path = "../../core/tests/world/mod.rs"]
mod world;

use world::{Op, World};

fn op(bytes: &[u8]) -> Op {
    let [what, a, b, c] = [0, 1, 2, 3].map(|i| bytes.get(i).copied().unwrap_or(0));
    let owner = usize::from(a);
    let ttl = i64::from(b % 64) + 1;
    match what % 9 {
        0..=2 => Op::Acquire {
            owner,
            ttl,
            kind: match c % 4 {
                0 => Kind::Exclusive,
                1 => Kind::Shared { limit: None },
                n => Kind::Shared {
                    limit: Some(u32::from(n - 1) + u32::from(c >> 4)),
                },
            },
            wait: (c & 0x08 != 0).then(|| (c & 0x04 != 0).then(|| i64::from(b % 80) + 1)),
        },
        3 => Op::Release { owner },
        4 => Op::Extend { owner, ttl },
        5 => Op::Leave {
            handle: u32::from(b),
        },
        6 => Op::SetKeyExpiry {
            ttl: (c & 0x01 == 0).then(|| i64::from(b % 100)),
        },
        _ => Op::Tick {
            ms: i64::from(b % 100),
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let mut world = World::default();
    for bytes in data.chunks(4) {
        world.step(op(bytes));
    }
});
