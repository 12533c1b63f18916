//! A command run inside another, for `LOCK.GUARD`: its keys as Redis finds them
//! (`RedisModule_GetCommandKeysWithFlags`), and its run (`RedisModule_Call`) as the
//! caller would run it from a script, with its reply kept to be sent as it is.

use std::ffi::c_int;
use std::ptr;

use redis_module::raw;

use super::{call, Argv, Ctx, OK};

/// The reply of a command run with `RedisModule_Call`, freed when dropped.
pub struct Called(*mut raw::RedisModuleCallReply);

impl std::fmt::Debug for Called {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Called(..)")
    }
}

impl PartialEq for Called {
    /// Two replies of Redis are never the same reply.
    fn eq(&self, _: &Self) -> bool {
        false
    }
}

impl Eq for Called {}

impl Drop for Called {
    fn drop(&mut self) {
        if !self.0.is_null() {
            call!(RedisModule_FreeCallReply(self.0) else ());
        }
    }
}

impl Called {
    /// The reply's error line, if it is an error (`ERR …`, `NOPERM …`).
    pub fn error(&self) -> Option<String> {
        if call!(RedisModule_CallReplyType(self.0) else -1) != raw::REDISMODULE_REPLY_ERROR as i32 {
            return None;
        }
        let mut len = 0usize;
        let p = call!(RedisModule_CallReplyStringPtr(self.0, &mut len) else ptr::null());
        if p.is_null() {
            return Some(String::new());
        }
        // SAFETY: Redis returns a pointer to `len` bytes that live as long as the reply.
        let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
        Some(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// What came of running the inner command.
pub enum Outcome {
    /// Its reply: what the command answered, or (with `E`) the error reply Redis
    /// made when it refused to run it (an unknown command, its arity, script mode,
    /// OOM, a read-only replica, a key of another slot).
    Replied(Called),
    /// The caller's ACL denies it, a key of it or a channel of it: Redis's reason
    /// (`can't run this command or subcommand`, …).
    Denied(String),
    /// No reply at all (a name Redis cannot take, a server without the API).
    Nothing,
}

/// The keys of a command, as positions in its own argument vector with their
/// `REDISMODULE_CMD_KEY_*` flags.
pub struct Keys {
    pub positions: Vec<(usize, i32)>,
}

/// The arguments from `from` on: the inner command's vector, which `argv` keeps
/// alive for the call.
fn inner_vector<'a>(args: &Argv<'a>, from: usize) -> Option<&'a [*mut raw::RedisModuleString]> {
    args.raw_args()
        .get(from..)
        .filter(|inner| !inner.is_empty())
}

impl Ctx<'_> {
    /// The keys of the command in `args[from..]`, as Redis finds them (key specs,
    /// or its own or a module's key callback). None for an unknown command or a
    /// wrong number of arguments: Redis will refuse to run it anyway.
    pub fn command_keys(self, args: &Argv<'_>, from: usize) -> Keys {
        let mut positions = Vec::new();
        let Some(inner) = inner_vector(args, from) else {
            return Keys { positions };
        };
        let Ok(argc) = c_int::try_from(inner.len()) else {
            return Keys { positions };
        };
        let (mut count, mut flags): (c_int, *mut c_int) = (0, ptr::null_mut());
        // Redis only reads the vector; the cast drops a `const` its prototype lacks.
        let argv = inner.as_ptr().cast_mut();
        let found = call!(RedisModule_GetCommandKeysWithFlags(
            self.raw(),
            argv,
            argc,
            &mut count,
            &mut flags
        ) else ptr::null_mut());
        if !found.is_null() {
            let count = usize::try_from(count).unwrap_or(0);
            // SAFETY: Redis returns `count` positions and as many flags, allocated
            // for us to free.
            let found_slice = unsafe { std::slice::from_raw_parts(found, count) };
            let flag_slice = if flags.is_null() {
                &[][..]
            } else {
                // SAFETY: as above.
                unsafe { std::slice::from_raw_parts(flags, count) }
            };
            for (i, position) in found_slice.iter().enumerate() {
                let flag = flag_slice.get(i).copied().unwrap_or(0);
                if let Ok(position) = usize::try_from(*position) {
                    positions.push((position, flag));
                }
            }
            call!(RedisModule_Free(found.cast()) else ());
        }
        if !flags.is_null() {
            call!(RedisModule_Free(flags.cast()) else ());
        }
        Keys { positions }
    }

    /// Runs the command in `args[from..]` as the caller would run it from a script:
    /// under the caller's ACL (`C`), refused where a script may not run it (`S`:
    /// `MULTI`, `WATCH`, `SUBSCRIBE`, writes on a read-only replica …), refused under
    /// OOM where it is denied under OOM (`M`), never blocking (`RedisModule_Call`
    /// does not let a command block), with its reply in the caller's protocol
    /// (`0`), its effects propagated to replicas and the AOF as its own (`!`), and
    /// Redis's own error reply when it refuses (`E`).
    pub fn call_command(self, args: &Argv<'_>, from: usize) -> Outcome {
        let Some(rest) = inner_vector(args, from).and_then(|inner| inner.get(1..)) else {
            return Outcome::Nothing;
        };
        let name_bytes = args.string(from).map(|s| s.as_bytes()).unwrap_or(&[]);
        // The name goes as a C string: one with a NUL byte names no command. Names
        // are short; a longer one than the buffer names no command either.
        let mut buffer = [0u8; 64];
        let Some(slot) = buffer.get_mut(..name_bytes.len()) else {
            return Outcome::Nothing;
        };
        if name_bytes.contains(&0) {
            return Outcome::Nothing;
        }
        slot.copy_from_slice(name_bytes);
        let name = buffer.as_ptr().cast::<std::ffi::c_char>();
        // SAFETY: reading a function pointer that Redis filled in at load time.
        let Some(f) = (unsafe { raw::RedisModule_Call }) else {
            return Outcome::Nothing;
        };
        let ctx = self.raw();
        // A few arguments go one by one ("s" each: Redis sizes its vector once);
        // more as a vector ("v", which Redis grows). The flags take no arguments.
        macro_rules! call_with {
            ($format:literal $(, $arg:expr)*) => {
                // SAFETY: one "s" per RedisModuleString* given, each valid for the call.
                unsafe { f(ctx, name, $format.as_ptr() $(, *$arg)*) }
            };
        }
        let reply = match rest {
            [] => call_with!(c"!0CSME"),
            [a] => call_with!(c"s!0CSME", a),
            [a, b] => call_with!(c"ss!0CSME", a, b),
            [a, b, c] => call_with!(c"sss!0CSME", a, b, c),
            [a, b, c, d] => call_with!(c"ssss!0CSME", a, b, c, d),
            [a, b, c, d, e] => call_with!(c"sssss!0CSME", a, b, c, d, e),
            [a, b, c, d, e, g] => call_with!(c"ssssss!0CSME", a, b, c, d, e, g),
            // Redis only reads the vector; the cast drops a `const` its prototype
            // lacks. SAFETY: format "v" takes a RedisModuleString** and a size_t,
            // both valid for the call.
            _ => unsafe {
                f(
                    ctx,
                    name,
                    c"v!0CSME".as_ptr(),
                    rest.as_ptr().cast_mut(),
                    rest.len(),
                )
            },
        };
        if reply.is_null() {
            return Outcome::Nothing;
        }
        let called = Called(reply);
        match called.error().as_deref().and_then(acl_reason) {
            Some(reason) => Outcome::Denied(reason.to_string()),
            None => Outcome::Replied(called),
        }
    }

    /// Sends `called` as this command's reply, exactly as the inner command gave it.
    pub fn reply_called(self, called: &Called) -> bool {
        call!(RedisModule_ReplyWithCallReply(self.raw(), called.0) else super::ERR) == OK
    }
}

/// The reason in the error `RedisModule_Call` makes when the ACL denies a command
/// (`ERR acl verification failed, <reason>.`), or None for any other error.
fn acl_reason(text: &str) -> Option<&str> {
    let reason = text.strip_prefix("ERR acl verification failed")?;
    Some(reason.trim_start_matches([',', ' ']).trim_end_matches('.'))
}
