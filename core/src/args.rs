//! Argument parsing shared by every command: owners, TTLs, timeouts, options.
//! Plain Rust over byte slices, so it is unit-tested without a server. Every failure
//! is an [`ArgError`] whose text is the error reply, naming the wrong argument.

use std::fmt;

use crate::holdings::Kind;

/// Settings that bound what a command may ask for (`lock.max-ttl`, `lock.max-owner-len`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest TTL in ms; 0 means no cap.
    pub max_ttl: i64,
    /// Longest owner in bytes.
    pub max_owner_len: usize,
}

/// How long a `WAIT` lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// `WAIT 0`: until the lock is granted, as `BLPOP 0`.
    Forever,
    /// `WAIT ms`.
    Millis(i64),
}

/// `LOCK.ACQUIRE key owner ttl [SHARED | LIMIT n] [WAIT timeout]`, without the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub owner: &'a [u8],
    pub ttl: i64,
    pub kind: Kind,
    pub wait: Option<Wait>,
}

/// The largest `LIMIT`: 2^31 permits.
pub const MAX_LIMIT: u32 = 1 << 31;

/// `LOCK.EXTEND key owner ttl`, without the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtendArgs<'a> {
    pub owner: &'a [u8],
    pub ttl: i64,
}

/// `LOCK.APPLY key owner token [PXAT unix-ms] [SHARED] [MARK n]`, without the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApplyArgs<'a> {
    pub owner: &'a [u8],
    pub token: i64,
    pub expires_at: Option<i64>,
    /// A shared holding, added beside the key's others (or replacing the owner's).
    pub shared: bool,
    /// `LAPSED`: the owner's shared holding with this token lapsed; remove it.
    pub lapsed: bool,
    /// The server's token mark, from a pure-AOF rewrite.
    pub mark: Option<i64>,
    /// `LIMIT n`: the shared holding was granted with that limit.
    pub limit: Option<u32>,
}

/// The largest TTL or WAIT timeout accepted, in ms (about 146 million years): far
/// beyond any real use, and small enough that `now + it` always fits the `i64` of
/// Unix milliseconds, for our expiry and for Redis, which adds a blocking timeout
/// to its clock in C without a check. Checked at parse time, so a call is refused
/// whatever state its lock is in, as `SET … PX` refuses such a TTL.
pub const MAX_DURATION_MS: i64 = i64::MAX / 2;

/// A bad argument. `Display` gives the whole error reply, `ERR` prefix included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    EmptyOwner,
    BadTtl,
    TtlOverMax {
        ttl: i64,
        max: i64,
    },
    BadTimeout,
    /// A TTL or timeout over [`MAX_DURATION_MS`]; names which.
    OutOfRange(&'static str),
    MissingValue(&'static str),
    UnknownOption(String),
    RepeatedOption(&'static str),
    BadToken,
    BadExpiry,
    BadLimit,
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::EmptyOwner => write!(f, "ERR invalid owner: must not be empty"),
            ArgError::BadTtl => write!(
                f,
                "ERR invalid ttl: expected a positive integer of milliseconds"
            ),
            ArgError::TtlOverMax { ttl, max } => write!(
                f,
                "ERR invalid ttl: {ttl} ms is over lock.max-ttl ({max} ms)"
            ),
            ArgError::BadTimeout => write!(
                f,
                "ERR invalid timeout: expected 0 (no limit) or a positive integer of milliseconds"
            ),
            ArgError::OutOfRange(name) => write!(
                f,
                "ERR invalid {name}: out of range, at most {MAX_DURATION_MS} ms"
            ),
            ArgError::MissingValue(option) => {
                write!(f, "ERR syntax error: {option} needs a value")
            }
            ArgError::UnknownOption(option) => {
                write!(f, "ERR syntax error: unknown option '{option}'")
            }
            ArgError::RepeatedOption(option) => {
                write!(f, "ERR syntax error: option {option} given more than once")
            }
            ArgError::BadToken => write!(f, "ERR invalid token: expected a positive integer"),
            ArgError::BadLimit => write!(
                f,
                "ERR invalid limit: expected an integer from 1 to {MAX_LIMIT}"
            ),
            ArgError::BadExpiry => write!(
                f,
                "ERR invalid PXAT: expected a positive integer of Unix milliseconds"
            ),
        }
    }
}

/// Parses an integer the way Redis does: an optional `-`, then digits, no `+`, no
/// spaces, no leading zeros, within `i64`.
pub fn parse_i64(arg: &[u8]) -> Option<i64> {
    let (negative, digits) = match arg {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, arg),
    };
    match digits {
        [b'0'] => return (!negative).then_some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    // One pass, checking each digit as it is added (cheaper than going through
    // str::parse on this hot path), towards the sign so i64::MIN fits.
    let sign = if negative { -1 } else { 1 };
    let mut n = 0i64;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        n = n
            .checked_mul(10)?
            .checked_add(sign * i64::from(digit - b'0'))?;
    }
    Some(n)
}

pub(crate) fn parse_positive(arg: &[u8]) -> Option<i64> {
    parse_i64(arg).filter(|&n| n > 0)
}

/// A well-formed positive integer too large for `i64`: out of range, not malformed.
fn is_past_i64(arg: &[u8]) -> bool {
    matches!(arg, [b'1'..=b'9', rest @ ..] if rest.iter().all(u8::is_ascii_digit))
        && parse_i64(arg).is_none()
}

/// An owner id: any non-empty bytes. `lock.max-owner-len` bounds only owners of new
/// holdings ([`plan_acquire`](crate::rules::plan_acquire)): a holder can always
/// release, extend and refresh what it holds, also after the setting was lowered.
pub fn parse_owner(arg: &[u8]) -> Result<&[u8], ArgError> {
    if arg.is_empty() {
        return Err(ArgError::EmptyOwner);
    }
    Ok(arg)
}

pub fn parse_ttl(arg: &[u8], limits: &Limits) -> Result<i64, ArgError> {
    let Some(ttl) = parse_positive(arg) else {
        return Err(if is_past_i64(arg) {
            ArgError::OutOfRange("ttl")
        } else {
            ArgError::BadTtl
        });
    };
    if limits.max_ttl > 0 && ttl > limits.max_ttl {
        return Err(ArgError::TtlOverMax {
            ttl,
            max: limits.max_ttl,
        });
    }
    if ttl > MAX_DURATION_MS {
        return Err(ArgError::OutOfRange("ttl"));
    }
    Ok(ttl)
}

fn parse_timeout(arg: &[u8]) -> Result<Wait, ArgError> {
    match parse_i64(arg) {
        Some(0) => Ok(Wait::Forever),
        Some(ms) if ms > MAX_DURATION_MS => Err(ArgError::OutOfRange("timeout")),
        Some(ms) if ms > 0 => Ok(Wait::Millis(ms)),
        None if is_past_i64(arg) => Err(ArgError::OutOfRange("timeout")),
        _ => Err(ArgError::BadTimeout),
    }
}

/// An option name as it may be shown in an error: ASCII, escaped, at most 64 bytes.
fn printable(arg: &[u8]) -> String {
    let shown = arg.get(..64).unwrap_or(arg);
    shown.escape_ascii().to_string()
}

/// `owner ttl [WAIT timeout]`: the arguments of LOCK.ACQUIRE after the key.
pub fn parse_acquire<'a>(args: &[&'a [u8]], limits: &Limits) -> Result<AcquireArgs<'a>, ArgError> {
    let [owner, ttl, options @ ..] = args else {
        return Err(ArgError::MissingValue("LOCK.ACQUIRE"));
    };
    let owner = parse_owner(owner)?;
    let ttl = parse_ttl(ttl, limits)?;
    let (mut wait, mut shared, mut limit) = (None, false, None);
    let mut rest = options;
    while let [name, tail @ ..] = rest {
        if name.eq_ignore_ascii_case(b"SHARED") {
            if shared {
                return Err(ArgError::RepeatedOption("SHARED"));
            }
            shared = true;
            rest = tail;
            continue;
        }
        let option = if name.eq_ignore_ascii_case(b"WAIT") {
            "WAIT"
        } else if name.eq_ignore_ascii_case(b"LIMIT") {
            "LIMIT"
        } else {
            return Err(ArgError::UnknownOption(printable(name)));
        };
        let [value, tail @ ..] = tail else {
            return Err(ArgError::MissingValue(option));
        };
        if option == "WAIT" {
            if wait.is_some() {
                return Err(ArgError::RepeatedOption("WAIT"));
            }
            wait = Some(parse_timeout(value)?);
        } else {
            if limit.is_some() {
                return Err(ArgError::RepeatedOption("LIMIT"));
            }
            let n = parse_positive(value)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n <= MAX_LIMIT)
                .ok_or(ArgError::BadLimit)?;
            limit = Some(n);
        }
        rest = tail;
    }
    // `LIMIT n` implies SHARED; `SHARED LIMIT n` is the same request.
    let kind = if shared || limit.is_some() {
        Kind::Shared { limit }
    } else {
        Kind::Exclusive
    };
    Ok(AcquireArgs {
        owner,
        ttl,
        kind,
        wait,
    })
}

/// `owner ttl`: the arguments of LOCK.EXTEND after the key.
pub fn parse_extend<'a>(args: &[&'a [u8]], limits: &Limits) -> Result<ExtendArgs<'a>, ArgError> {
    match args {
        [owner, ttl] => Ok(ExtendArgs {
            owner: parse_owner(owner)?,
            ttl: parse_ttl(ttl, limits)?,
        }),
        [_, _, extra, ..] => Err(ArgError::UnknownOption(printable(extra))),
        _ => Err(ArgError::MissingValue("LOCK.EXTEND")),
    }
}

/// `LOCK.LAPSE key owner token [owner token …]`: shared holdings that lapsed together
/// on the master, each by its owner and token.
pub fn parse_lapse<'a>(args: &[&'a [u8]]) -> Result<Vec<(&'a [u8], i64)>, ArgError> {
    if args.is_empty() || !args.len().is_multiple_of(2) {
        return Err(ArgError::MissingValue("LOCK.LAPSE"));
    }
    args.chunks_exact(2)
        .map(|pair| match pair {
            [owner, token] => Ok((
                parse_owner(owner)?,
                parse_positive(token).ok_or(ArgError::BadToken)?,
            )),
            _ => Err(ArgError::MissingValue("LOCK.LAPSE")),
        })
        .collect()
}

/// `owner token [PXAT unix-ms] [SHARED [LIMIT n]] [LAPSED] [MARK n]`: the arguments
/// of LOCK.APPLY after the key. The owner is not held to `lock.max-owner-len`: the
/// master already checked it, and a replica with a smaller setting must still follow
/// its master.
///
/// `MARK n` carries the server's token mark in an AOF rewritten without an RDB
/// preamble (which holds no module data besides keys): replaying it raises the mark
/// to `n`, so tokens of released locks are not forgotten.
pub fn parse_apply<'a>(args: &[&'a [u8]]) -> Result<ApplyArgs<'a>, ArgError> {
    let [owner, token, options @ ..] = args else {
        return Err(ArgError::MissingValue("LOCK.APPLY"));
    };
    let mut request = ApplyArgs {
        owner: parse_owner(owner)?,
        token: parse_positive(token).ok_or(ArgError::BadToken)?,
        expires_at: None,
        shared: false,
        lapsed: false,
        mark: None,
        limit: None,
    };
    let mut rest = options;
    while let [name, tail @ ..] = rest {
        let flag = if name.eq_ignore_ascii_case(b"SHARED") {
            Some(("SHARED", &mut request.shared))
        } else if name.eq_ignore_ascii_case(b"LAPSED") {
            Some(("LAPSED", &mut request.lapsed))
        } else {
            None
        };
        if let Some((option, set)) = flag {
            if *set {
                return Err(ArgError::RepeatedOption(option));
            }
            *set = true;
            rest = tail;
            continue;
        }
        if name.eq_ignore_ascii_case(b"LIMIT") {
            let [value, tail @ ..] = tail else {
                return Err(ArgError::MissingValue("LIMIT"));
            };
            if request.limit.is_some() {
                return Err(ArgError::RepeatedOption("LIMIT"));
            }
            let n = parse_positive(value)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n <= MAX_LIMIT)
                .ok_or(ArgError::BadLimit)?;
            request.limit = Some(n);
            rest = tail;
            continue;
        }
        let (option, slot) = if name.eq_ignore_ascii_case(b"PXAT") {
            ("PXAT", &mut request.expires_at)
        } else if name.eq_ignore_ascii_case(b"MARK") {
            ("MARK", &mut request.mark)
        } else {
            return Err(ArgError::UnknownOption(printable(name)));
        };
        let [value, tail @ ..] = tail else {
            return Err(ArgError::MissingValue(option));
        };
        if slot.is_some() {
            return Err(ArgError::RepeatedOption(option));
        }
        let bad = if option == "PXAT" {
            ArgError::BadExpiry
        } else {
            ArgError::BadToken
        };
        *slot = Some(parse_positive(value).ok_or(bad)?);
        rest = tail;
    }
    if request.limit.is_some() && !request.shared {
        // Only a shared holding has a limit.
        return Err(ArgError::MissingValue("SHARED"));
    }
    if request.shared && !request.lapsed && request.expires_at.is_none() {
        // A shared holding has its own expiry; it cannot be replayed without it.
        return Err(ArgError::MissingValue("PXAT"));
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lapse_takes_owner_token_pairs_and_refuses_anything_else() {
        assert_eq!(
            parse_lapse(&[b"r1", b"7", b"r2", b"9"]),
            Ok(vec![(&b"r1"[..], 7), (&b"r2"[..], 9)])
        );
        assert!(parse_lapse(&[]).is_err());
        assert!(parse_lapse(&[b"r1"]).is_err());
        assert!(parse_lapse(&[b"r1", b"7", b"r2"]).is_err());
        assert_eq!(parse_lapse(&[b"r1", b"0"]), Err(ArgError::BadToken));
        assert_eq!(parse_lapse(&[b"r1", b"x"]), Err(ArgError::BadToken));
        assert!(parse_lapse(&[b"", b"7"]).is_err());
    }

    const LIMITS: Limits = Limits {
        max_ttl: 0,
        max_owner_len: 8,
    };

    #[test]
    fn integers_parse_as_redis_parses_them() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"1500"), Some(1500));
        assert_eq!(parse_i64(b"-7"), Some(-7));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"-9223372036854775809"), None);
        for bad in [
            &b""[..],
            b"-",
            b"+5",
            b"05",
            b"-0",
            b" 5",
            b"5 ",
            b"1e3",
            b"1.5",
            b"9223372036854775808",
            b"\xff",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", bad.escape_ascii().to_string());
        }
    }

    #[test]
    fn acquire_reads_owner_ttl_and_wait() {
        let args = parse_acquire(&[b"me", b"100"], &LIMITS).unwrap();
        assert_eq!(
            args,
            AcquireArgs {
                owner: b"me",
                ttl: 100,
                kind: Kind::Exclusive,
                wait: None
            }
        );
        let args = parse_acquire(&[b"me", b"100", b"wait", b"0"], &LIMITS).unwrap();
        assert_eq!(args.wait, Some(Wait::Forever));
        let args = parse_acquire(&[b"me", b"100", b"WAIT", b"250"], &LIMITS).unwrap();
        assert_eq!(args.wait, Some(Wait::Millis(250)));
    }

    #[test]
    fn acquire_reads_shared_and_limit_in_any_order_with_wait() {
        let kind = |args: &[&[u8]]| parse_acquire(args, &LIMITS).map(|a| a.kind);
        assert_eq!(
            kind(&[b"me", b"1", b"shared"]),
            Ok(Kind::Shared { limit: None })
        );
        assert_eq!(
            kind(&[b"me", b"1", b"LIMIT", b"5"]),
            Ok(Kind::Shared { limit: Some(5) })
        );
        assert_eq!(
            kind(&[b"me", b"1", b"LIMIT", b"5", b"WAIT", b"10", b"SHARED"]),
            Ok(Kind::Shared { limit: Some(5) }),
            "SHARED LIMIT n is one request"
        );
        assert_eq!(
            kind(&[b"me", b"1", b"LIMIT", b"2147483648"]),
            Ok(Kind::Shared {
                limit: Some(MAX_LIMIT)
            })
        );
        for bad in [
            &b"0"[..],
            b"-1",
            b"2147483649",
            b"x",
            b"1.5",
            b"99999999999",
        ] {
            assert_eq!(
                kind(&[b"me", b"1", b"LIMIT", bad]),
                Err(ArgError::BadLimit),
                "{bad:?}"
            );
        }
        assert_eq!(
            kind(&[b"me", b"1", b"LIMIT"]),
            Err(ArgError::MissingValue("LIMIT"))
        );
        assert_eq!(
            kind(&[b"me", b"1", b"SHARED", b"SHARED"]),
            Err(ArgError::RepeatedOption("SHARED"))
        );
        assert_eq!(
            kind(&[b"me", b"1", b"LIMIT", b"2", b"limit", b"3"]),
            Err(ArgError::RepeatedOption("LIMIT"))
        );
    }

    #[test]
    fn acquire_rejects_each_bad_argument_by_name() {
        let cases: [(&[&[u8]], ArgError); 9] = [
            (&[b"", b"100"], ArgError::EmptyOwner),
            (&[b"me", b"0"], ArgError::BadTtl),
            (&[b"me", b"-5"], ArgError::BadTtl),
            (&[b"me", b"ten"], ArgError::BadTtl),
            (
                &[b"me", b"99999999999999999999"],
                ArgError::OutOfRange("ttl"),
            ),
            (&[b"me", b"1", b"WAIT"], ArgError::MissingValue("WAIT")),
            (&[b"me", b"1", b"WAIT", b"-1"], ArgError::BadTimeout),
            (
                &[b"me", b"1", b"WAIT", b"1", b"WAIT", b"2"],
                ArgError::RepeatedOption("WAIT"),
            ),
            (
                &[b"me", b"1", b"NX", b"1"],
                ArgError::UnknownOption("NX".into()),
            ),
        ];
        for (args, expected) in cases {
            assert_eq!(parse_acquire(args, &LIMITS), Err(expected));
        }
    }

    #[test]
    fn ttl_over_the_cap_is_refused_and_zero_means_no_cap() {
        let capped = Limits {
            max_ttl: 1000,
            max_owner_len: 8,
        };
        assert_eq!(parse_ttl(b"1000", &capped), Ok(1000));
        assert_eq!(
            parse_ttl(b"1001", &capped),
            Err(ArgError::TtlOverMax {
                ttl: 1001,
                max: 1000
            })
        );
    }

    #[test]
    fn ttls_and_timeouts_whose_deadline_could_overflow_are_refused() {
        let max = MAX_DURATION_MS.to_string();
        let over = (MAX_DURATION_MS + 1).to_string();
        assert_eq!(parse_ttl(max.as_bytes(), &LIMITS), Ok(MAX_DURATION_MS));
        assert_eq!(
            parse_ttl(over.as_bytes(), &LIMITS),
            Err(ArgError::OutOfRange("ttl"))
        );
        assert_eq!(
            parse_ttl(b"9223372036854775807", &LIMITS),
            Err(ArgError::OutOfRange("ttl"))
        );
        // Past i64 too: out of range, not malformed; a negative one is not positive.
        for huge in [&b"9223372036854775808"[..], b"99999999999999999999999"] {
            assert_eq!(parse_ttl(huge, &LIMITS), Err(ArgError::OutOfRange("ttl")));
            assert_eq!(
                parse_acquire(&[b"me", b"1", b"WAIT", huge], &LIMITS),
                Err(ArgError::OutOfRange("timeout"))
            );
        }
        assert_eq!(
            parse_ttl(b"-9223372036854775809", &LIMITS),
            Err(ArgError::BadTtl)
        );
        assert_eq!(
            parse_ttl(b"09223372036854775808", &LIMITS),
            Err(ArgError::BadTtl)
        );
        assert_eq!(
            parse_acquire(&[b"me", b"1", b"WAIT", max.as_bytes()], &LIMITS).map(|a| a.wait),
            Ok(Some(Wait::Millis(MAX_DURATION_MS)))
        );
        assert_eq!(
            parse_acquire(&[b"me", b"1", b"WAIT", over.as_bytes()], &LIMITS),
            Err(ArgError::OutOfRange("timeout"))
        );
        // Even the largest deadline fits: now (Unix ms) is far below the bound.
        let now_ms = 1_800_000_000_000i64;
        assert!(now_ms.checked_add(MAX_DURATION_MS).is_some());
    }

    #[test]
    fn error_texts_start_with_err_and_name_the_argument() {
        let samples = [
            (ArgError::BadTtl, "ttl"),
            (ArgError::BadTimeout, "timeout"),
            (ArgError::OutOfRange("ttl"), "ttl"),
            (ArgError::OutOfRange("timeout"), "timeout"),
            (ArgError::EmptyOwner, "owner"),
            (ArgError::UnknownOption("X".into()), "'X'"),
            (ArgError::BadToken, "token"),
        ];
        for (error, named) in samples {
            let text = error.to_string();
            assert!(text.starts_with("ERR "), "{text}");
            assert!(text.contains(named), "{text}");
        }
    }

    #[test]
    fn unknown_options_are_shown_escaped_and_short() {
        let long = [b'\n'; 200];
        let error = parse_acquire(&[b"me", b"1", &long, b"1"], &LIMITS).unwrap_err();
        let text = error.to_string();
        assert!(text.is_ascii());
        assert!(!text.contains('\n'));
        assert!(text.len() < 400);
    }

    #[test]
    fn extend_takes_exactly_owner_and_ttl() {
        assert_eq!(
            parse_extend(&[b"me", b"5"], &LIMITS),
            Ok(ExtendArgs {
                owner: b"me",
                ttl: 5
            })
        );
        assert_eq!(
            parse_extend(&[b"me", b"5", b"WAIT"], &LIMITS),
            Err(ArgError::UnknownOption("WAIT".into()))
        );
        assert_eq!(parse_extend(&[b"me", b"0"], &LIMITS), Err(ArgError::BadTtl));
    }

    #[test]
    fn apply_reads_a_shared_holding_s_limit() {
        let apply = |args: &[&[u8]]| parse_apply(args).map(|a| a.limit);
        assert_eq!(
            apply(&[b"me", b"1", b"PXAT", b"5", b"SHARED", b"LIMIT", b"3"]),
            Ok(Some(3))
        );
        assert_eq!(apply(&[b"me", b"1", b"PXAT", b"5", b"SHARED"]), Ok(None));
        assert_eq!(
            apply(&[b"me", b"1", b"PXAT", b"5", b"LIMIT", b"3"]),
            Err(ArgError::MissingValue("SHARED"))
        );
        assert_eq!(
            apply(&[b"me", b"1", b"PXAT", b"5", b"SHARED", b"LIMIT", b"0"]),
            Err(ArgError::BadLimit)
        );
        assert_eq!(
            apply(&[b"me", b"1", b"PXAT", b"5", b"SHARED", b"LIMIT"]),
            Err(ArgError::MissingValue("LIMIT"))
        );
        assert_eq!(
            apply(&[b"me", b"1", b"PXAT", b"5", b"SHARED", b"LIMIT", b"2", b"LIMIT", b"2"]),
            Err(ArgError::RepeatedOption("LIMIT"))
        );
    }

    #[test]
    fn apply_reads_token_and_absolute_expiry() {
        assert_eq!(
            parse_apply(&[b"me", b"42", b"pxat", b"1700000000000"]),
            Ok(ApplyArgs {
                owner: b"me",
                token: 42,
                expires_at: Some(1_700_000_000_000),
                shared: false,
                lapsed: false,
                mark: None,
                limit: None,
            })
        );
        assert_eq!(
            parse_apply(&[b"me", b"42", b"MARK", b"99", b"PXAT", b"5"])
                .map(|a| (a.mark, a.expires_at)),
            Ok((Some(99), Some(5)))
        );
        assert_eq!(
            parse_apply(&[b"me", b"42", b"MARK", b"1", b"mark", b"2"]),
            Err(ArgError::RepeatedOption("MARK"))
        );
        assert_eq!(
            parse_apply(&[b"me", b"42", b"MARK", b"-1"]),
            Err(ArgError::BadToken)
        );
        assert_eq!(
            parse_apply(&[b"me", b"42", b"SHARED", b"PXAT", b"9"])
                .map(|a| (a.shared, a.expires_at)),
            Ok((true, Some(9)))
        );
        assert_eq!(
            parse_apply(&[b"me", b"42", b"SHARED"]),
            Err(ArgError::MissingValue("PXAT"))
        );
        assert_eq!(
            parse_apply(&[b"me", b"42", b"LAPSED"]).map(|a| a.lapsed),
            Ok(true)
        );
        assert_eq!(parse_apply(&[b"me", b"42"]).map(|a| a.expires_at), Ok(None));
        assert_eq!(parse_apply(&[b"me", b"0"]), Err(ArgError::BadToken));
        assert_eq!(
            parse_apply(&[b"me", b"1", b"PXAT", b"x"]),
            Err(ArgError::BadExpiry)
        );
        assert_eq!(
            parse_apply(&[b"me", b"1", b"PXAT"]),
            Err(ArgError::MissingValue("PXAT"))
        );
    }
}
