//! The waiter queues against a plain model: same waiters, same order, nothing left
//! behind for keys nobody waits on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redis_lock_core::queue::{Queues, Waiter};
use redis_lock_core::{Kind, Mode};

fuzz_target!(|data: &[u8]| {
    let mut queues: Queues<u8> = Queues::new();
    // The model: (db, key, handle, owner) in arrival order.
    let mut model: Vec<(i32, u8, u8, u8)> = Vec::new();
    for op in data.chunks(4) {
        let [kind, a, b, c] = [0, 1, 2, 3].map(|i| op.get(i).copied().unwrap_or(0));
        let (db, key, handle, owner) = (i32::from(a % 2), [b % 3], c % 16, a % 3);
        match kind % 4 {
            0 => {
                if !model.iter().any(|w| w.2 == handle) {
                    model.push((db, key[0], handle, owner));
                }
                queues.push(
                    db,
                    &key,
                    Waiter {
                        handle,
                        owner: vec![owner].into(),
                        ttl: 1,
                        kind: Kind::Exclusive,
                        deadline: None,
                        queued_at: 0,
                    },
                );
            }
            1 => {
                let expected = model.iter().position(|w| w.0 == db && w.1 == key[0]);
                let expected = expected.map(|i| model.remove(i).2);
                assert_eq!(queues.pop_front(db, &key).map(|w| w.handle), expected);
            }
            2 => {
                let expected = model
                    .iter()
                    .position(|w| w.2 == handle)
                    .map(|i| model.remove(i).2);
                assert_eq!(queues.remove(handle).map(|w| w.handle), expected);
            }
            _ => {
                let taken: Vec<u8> = queues
                    .take_owner(db, &key, &[owner], Mode::Exclusive)
                    .into_iter()
                    .map(|w| w.handle)
                    .collect();
                let expected: Vec<u8> = model
                    .iter()
                    .filter(|w| w.0 == db && w.1 == key[0] && w.3 == owner)
                    .map(|w| w.2)
                    .collect();
                model.retain(|w| !(w.0 == db && w.1 == key[0] && w.3 == owner));
                assert_eq!(taken, expected);
            }
        }
        assert_eq!(queues.len(), model.len());
        let waiting = model.iter().filter(|w| w.0 == db && w.1 == key[0]).count();
        assert_eq!(queues.waiting(db, &key), waiting);
        assert_eq!(queues.keys(None).len(), {
            let mut keys: Vec<(i32, u8)> = model.iter().map(|w| (w.0, w.1)).collect();
            keys.sort();
            keys.dedup();
            keys.len()
        });
    }
});
