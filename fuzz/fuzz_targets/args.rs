//! Argument parsing: never panics, and what it accepts is what the contract allows
//! (contract.md "Commands").
#![no_main]

use libfuzzer_sys::fuzz_target;
use redis_lock_core::args::{parse_acquire, parse_apply, parse_extend, parse_i64, Limits, Wait};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the limits; the rest are arguments separated by 0xFF.
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let limits = Limits {
        max_ttl: i64::from(first & 0x0f) * 1000,
        max_owner_len: usize::from(first >> 4) * 4 + 1,
    };
    let args: Vec<&[u8]> = rest.split(|b| *b == 0xff).collect();

    for arg in &args {
        if let Some(n) = parse_i64(arg) {
            // Only the canonical spelling of a number is accepted.
            assert_eq!(n.to_string().as_bytes(), *arg);
        }
    }
    if let Ok(request) = parse_acquire(&args, &limits) {
        // lock.max-owner-len is applied by the rules, to new holdings only.
        assert!(!request.owner.is_empty());
        assert!(request.ttl > 0);
        assert!(limits.max_ttl == 0 || request.ttl <= limits.max_ttl);
        if let Some(Wait::Millis(ms)) = request.wait {
            assert!(ms > 0);
        }
    }
    if let Ok(request) = parse_extend(&args, &limits) {
        assert!(request.ttl > 0 && !request.owner.is_empty());
        assert_eq!(args.len(), 2);
    }
    if let Ok(request) = parse_apply(&args) {
        assert!(request.token > 0 && !request.owner.is_empty());
        assert!(request.expires_at.is_none_or(|at| at > 0));
    }
    // Every error names what is wrong and fits on one line.
    for error in [
        parse_acquire(&args, &limits).err(),
        parse_extend(&args, &limits).err(),
        parse_apply(&args).err(),
    ]
    .into_iter()
    .flatten()
    {
        let text = error.to_string();
        assert!(text.starts_with("ERR ") && text.is_ascii() && !text.contains('\n'));
    }
});
