//! The lock rules and the token mint: no panic on any input, and fresh grants always
//! get a token greater than any minted or observed before.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redis_lock::lock::{plan_acquire, plan_extend, AcquirePlan, Lock, TokenMint};

fn i64_at(data: &[u8], at: usize) -> i64 {
    let mut bytes = [0u8; 8];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = data.get(at + i).copied().unwrap_or(0);
    }
    i64::from_le_bytes(bytes)
}

fuzz_target!(|data: &[u8]| {
    let mint = TokenMint::new();
    let mut current: Option<Lock> = None;
    for step in data.chunks(18) {
        let (kind, owner) = (
            step.first().copied().unwrap_or(0),
            step.get(1).copied().unwrap_or(0) % 3,
        );
        let (ttl, now) = (i64_at(step, 2), i64_at(step, 10));
        let before = mint.high_water();
        match kind % 4 {
            0 => match plan_acquire(current.as_ref(), &[owner], ttl, || now, &mint, 1) {
                Ok(AcquirePlan::Grant { token, expires_at }) => {
                    assert!(current.is_none());
                    assert!(token > before && token > 0);
                    assert_eq!(Some(expires_at), now.checked_add(ttl));
                    current = Some(Lock::new(&[owner], token));
                }
                Ok(AcquirePlan::Refresh { token, .. }) => {
                    let lock = current.as_ref().expect("a refresh needs a holder");
                    assert!(lock.is_held_by(&[owner]) && lock.token() == token);
                    assert_eq!(mint.high_water(), before);
                }
                Ok(AcquirePlan::Busy) => {
                    assert!(current.as_ref().is_some_and(|l| !l.is_held_by(&[owner])))
                }
                Err(_) => assert_eq!(mint.high_water(), before),
            },
            1 => {
                if let Ok(Some(_)) = plan_extend(current.as_ref(), &[owner], ttl, now) {
                    assert!(current.as_ref().is_some_and(|l| l.is_held_by(&[owner])));
                }
            }
            2 => current = None, // released, expired or deleted
            _ => {
                mint.observe(ttl);
                assert!(mint.high_water() >= before.max(ttl));
            }
        }
    }
});
