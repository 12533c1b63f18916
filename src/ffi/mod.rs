//! The one place that calls the Redis module C API, and the bottom layer of the
//! crate (ARCHITECTURE.md): everything `unsafe` lives under `ffi/` (the crate root
//! denies it elsewhere), and nothing here imports the layers above. Callbacks Redis
//! calls (commands, blocked clients, timers, the data type, events, configs) are C
//! entry points here, monomorphised over a trait the layer above implements, so no
//! code here names the module's own work.
//!
//! Every API is reached through `redis_module::raw::RedisModule_*`, function pointers
//! that Redis fills in at load time. `call!` turns a missing pointer into a fallback
//! value instead of a panic; with `missing_required_apis`, `init` refuses to load the
//! module on a server that lacks one we need, so the fallbacks are never taken in
//! practice.

pub mod block;
pub mod command;
pub mod config;
pub mod datatype;
pub mod events;
pub mod inner;
pub mod key;
pub mod query;
pub mod scan;
pub mod timer;

use std::ffi::{c_int, CStr, CString};
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

/// Calls `raw::RedisModule_<name>(args…)`, or evaluates `fallback` when the server
/// does not provide that API.
macro_rules! call {
    ($name:ident($($arg:expr),* $(,)?) else $fallback:expr) => {
        // SAFETY: the pointer was filled in by Redis at load time and is called with
        // arguments of the types its C prototype declares.
        match unsafe { redis_module::raw::$name } {
            Some(f) => unsafe { f($($arg),*) },
            None => $fallback,
        }
    };
}
pub(crate) use call;

/// `REDISMODULE_OK` as the C API returns it.
pub const OK: c_int = raw::REDISMODULE_OK as c_int;
/// `REDISMODULE_ERR` as the C API returns it.
pub const ERR: c_int = raw::REDISMODULE_ERR as c_int;

/// Names the APIs the module cannot run without that the server lacks. All are in
/// Redis 7.0; an older server gets a clear load error instead of a wrong reply.
pub fn missing_required_apis() -> Vec<&'static str> {
    macro_rules! missing {
        ($($name:ident),* $(,)?) => {{
            let mut missing = Vec::new();
            // SAFETY: reading a function pointer that Redis filled in at load time.
            $(if unsafe { raw::$name }.is_none() { missing.push(stringify!($name)); })*
            missing
        }};
    }
    missing!(
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ModuleTypeGetType,
        RedisModule_ModuleTypeGetValue,
        RedisModule_ModuleTypeSetValue,
        RedisModule_DeleteKey,
        RedisModule_SetAbsExpire,
        RedisModule_GetAbsExpire,
        RedisModule_Milliseconds,
        RedisModule_StringPtrLen,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithNull,
        RedisModule_ReplyWithError,
        RedisModule_ReplyWithMap,
        RedisModule_ReplyWithStringBuffer,
        RedisModule_ReplyWithSimpleString,
        RedisModule_WrongArity,
        RedisModule_Replicate,
        RedisModule_ReplicateVerbatim,
        RedisModule_Call,
        RedisModule_CallReplyType,
        RedisModule_CallReplyStringPtr,
        RedisModule_FreeCallReply,
        RedisModule_ReplyWithCallReply,
        RedisModule_GetCommandKeysWithFlags,
        RedisModule_IsKeysPositionRequest,
        RedisModule_KeyAtPosWithFlags,
        RedisModule_GetContextFlags,
        RedisModule_AvoidReplicaTraffic,
        RedisModule_CreateCommand,
        RedisModule_GetCommand,
        RedisModule_SetCommandInfo,
        RedisModule_SaveStringBuffer,
        RedisModule_LoadStringBuffer,
        RedisModule_SaveSigned,
        RedisModule_LoadSigned,
        RedisModule_IsIOError,
        RedisModule_EmitAOF,
        RedisModule_Free,
        RedisModule_DigestAddStringBuffer,
        RedisModule_DigestAddLongLong,
        RedisModule_DigestEndSequence,
        RedisModule_RegisterInfoFunc,
        RedisModule_InfoAddSection,
        RedisModule_InfoAddFieldLongLong,
        RedisModule_SubscribeToKeyspaceEvents,
        RedisModule_SubscribeToServerEvent,
        RedisModule_BlockClient,
        RedisModule_UnblockClient,
        RedisModule_SetDisconnectCallback,
        RedisModule_GetBlockedClientPrivateData,
        RedisModule_GetBlockedClientHandle,
        RedisModule_CreateTimer,
        RedisModule_StopTimer,
        RedisModule_GetSelectedDb,
        RedisModule_SelectDb,
        RedisModule_CreateString,
        RedisModule_FreeString,
        RedisModule_GetKeyNameFromOptCtx,
        RedisModule_GetDbIdFromOptCtx,
        RedisModule_GetKeyNameFromIO,
        RedisModule_GetDbIdFromIO,
        RedisModule_ScanCursorCreate,
        RedisModule_ScanCursorDestroy,
        RedisModule_Scan,
        RedisModule_GetDetachedThreadSafeContext,
        RedisModule_CreateStringFromLongLong,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_HoldString,
        RedisModule_SignalModifiedKey,
        RedisModule_SetModuleOptions,
        RedisModule_Log,
        RedisModule_ReplyWithArray,
        RedisModule_SaveUnsigned,
        RedisModule_LoadUnsigned,
        RedisModule_Call,
        RedisModule_CallReplyType,
        RedisModule_CallReplyArrayElement,
        RedisModule_CallReplyStringPtr,
        RedisModule_CallReplyInteger,
        RedisModule_FreeCallReply,
        RedisModule_RegisterStringConfig,
        RedisModule_LoadConfigs,
        RedisModule_CreateDataType,
    )
}

/// The context of one call from Redis (a command, a callback, an event), valid for
/// that call only: only the entry points of `ffi` make one, from the pointer Redis
/// passed, and the lifetime keeps it from being stored beyond the call
/// (`Ctx::module` is the one context that lives on).
#[derive(Clone, Copy)]
pub struct Ctx<'a>(*mut raw::RedisModuleCtx, PhantomData<&'a ()>);

/// A value that only Redis's main thread touches: Redis runs module code (commands,
/// callbacks, timers, events) on its main thread only, and a fork child (BGSAVE)
/// has one thread. This is what lets the module keep its state in one `static`
/// without a lock.
pub struct MainThread<T>(T);

// SAFETY: see above; the value is never reached from another thread.
unsafe impl<T> Sync for MainThread<T> {}

impl<T> MainThread<T> {
    pub const fn new(value: T) -> Self {
        MainThread(value)
    }

    pub fn get(&self) -> &T {
        &self.0
    }
}

/// What the context flags say about where a command runs.
#[derive(Debug, Clone, Copy)]
pub struct CallSite {
    /// Inside MULTI/EXEC, a script, or anywhere else Redis forbids blocking.
    pub cannot_block: bool,
    /// Replaying what another server decided: the master's replication stream, or
    /// the AOF being loaded.
    pub replaying: bool,
}

/// The module's own long-lived context, for callbacks that get none (data-type
/// callbacks); set once at load.
static MODULE_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(ptr::null_mut());

/// Creates the module's long-lived context; false if Redis refused.
pub fn init_module_ctx(ctx: Ctx) -> bool {
    let detached = call!(RedisModule_GetDetachedThreadSafeContext(ctx.0) else ptr::null_mut());
    MODULE_CTX.store(detached, Ordering::Relaxed);
    !detached.is_null()
}

/// Runs `body`, the work of a callback from Redis: a panic there would unwind into
/// Redis's C code and abort the server, so it becomes `fallback` instead (the panic
/// hook has logged it, with its location).
pub fn guarded<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// Makes every panic write one line to the server log, with its location, before it
/// is caught by [`guarded`] (or a command's entry point).
pub fn log_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let location = info.location().map_or_else(
            || "an unknown place".to_string(),
            |l| format!("{}:{}", l.file(), l.line()),
        );
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        log_warning(&format!(
            "lock module: panic at {location}: {payload} (caught; the server goes on)"
        ));
        previous(info);
    }));
}

/// Writes `text` to the server log at warning level, as the module's (stderr is lost
/// when redis-server runs daemonized).
pub fn log_warning(text: &str) {
    log(c"warning", text);
}

/// Writes `text` to the server log at notice level, as the module's.
pub fn log_notice(text: &str) {
    log(c"notice", text);
}

fn log(level: &CStr, text: &str) {
    let line: Vec<u8> = text
        .bytes()
        .map(|b| if b == 0 { b' ' } else { b })
        .collect();
    let Ok(line) = CString::new(line) else {
        return;
    };
    // SAFETY: reading a function pointer that Redis filled in at load time.
    if let Some(log) = unsafe { raw::RedisModule_Log } {
        // SAFETY: "%s" with one C string; a null context logs without module name,
        // the module's own context with it.
        unsafe {
            log(
                MODULE_CTX.load(Ordering::Relaxed),
                level.as_ptr(),
                c"%s".as_ptr(),
                line.as_ptr(),
            )
        };
    }
}

impl Ctx<'static> {
    /// The module's own context (made at load), for timers started from callbacks
    /// that have no context of their own. Main thread only.
    pub fn module() -> Self {
        Ctx(MODULE_CTX.load(Ordering::Relaxed), PhantomData)
    }
}

impl<'a> Ctx<'a> {
    /// The context of the module's load, for the length of `OnLoad`.
    pub fn of_load(ctx: &'a redis_module::Context) -> Self {
        Ctx(ctx.ctx, PhantomData)
    }

    /// # Safety
    /// `ctx` is the context Redis passed to the running call, and the `Ctx` is used
    /// only during it.
    unsafe fn from_raw(ctx: *mut raw::RedisModuleCtx) -> Self {
        Ctx(ctx, PhantomData)
    }

    fn raw(self) -> *mut raw::RedisModuleCtx {
        self.0
    }

    pub fn selected_db(self) -> i32 {
        call!(RedisModule_GetSelectedDb(self.0) else 0)
    }

    /// Selects `db` for the keys this context opens next.
    pub fn select_db(self, db: i32) -> bool {
        self.selected_db() == db || call!(RedisModule_SelectDb(self.0, db) else ERR) == OK
    }

    /// True while the server keeps its dataset constant: clients are paused for
    /// writes (`CLIENT PAUSE WRITE`, FAILOVER, a cluster manual failover). Redis then
    /// neither expires nor deletes keys, and a write from a timer would both break
    /// the failover's promise and meet keys that are expired but still present.
    pub fn writes_paused(self) -> bool {
        call!(RedisModule_AvoidReplicaTraffic() else 0) != 0
    }

    /// True when the server is a replica: its locks change only as its master says.
    pub fn is_replica(self) -> bool {
        let flags = call!(RedisModule_GetContextFlags(self.0) else 0) as u32;
        flags & raw::REDISMODULE_CTX_FLAGS_SLAVE != 0
    }

    /// True while the server loads its RDB or AOF (at start, `DEBUG RELOAD`, or a
    /// replica's full synchronisation).
    pub fn is_loading(self) -> bool {
        let flags = call!(RedisModule_GetContextFlags(self.0) else 0) as u32;
        flags & raw::REDISMODULE_CTX_FLAGS_LOADING != 0
    }

    /// True when memory is over `maxmemory` now, so that Redis would refuse a
    /// `deny-oom` command (Redis computes it afresh for each call).
    pub fn out_of_memory(self) -> bool {
        let flags = call!(RedisModule_GetContextFlags(self.0) else 0) as u32;
        flags & raw::REDISMODULE_CTX_FLAGS_OOM != 0
    }

    /// True when the server runs in cluster mode.
    pub fn in_cluster(self) -> bool {
        let flags = call!(RedisModule_GetContextFlags(self.0) else 0) as u32;
        flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0
    }

    /// Unix time in milliseconds, as Redis sees it for this command.
    pub fn now_ms(self) -> i64 {
        call!(RedisModule_Milliseconds() else 0)
    }

    /// Where the running command was called from.
    pub fn call_site(self) -> CallSite {
        let flags = call!(RedisModule_GetContextFlags(self.0) else 0) as u32;
        let no_block = raw::REDISMODULE_CTX_FLAGS_MULTI
            | raw::REDISMODULE_CTX_FLAGS_LUA
            | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
            | raw::REDISMODULE_CTX_FLAGS_REPLICATED
            | raw::REDISMODULE_CTX_FLAGS_LOADING;
        let replaying = raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING;
        CallSite {
            cannot_block: flags & no_block != 0,
            replaying: flags & replaying != 0,
        }
    }

    pub fn reply_integer(self, value: i64) {
        call!(RedisModule_ReplyWithLongLong(self.0, value) else ERR);
    }

    pub fn reply_null(self) {
        call!(RedisModule_ReplyWithNull(self.0) else ERR);
    }

    pub fn reply_simple_ok(self) {
        call!(RedisModule_ReplyWithSimpleString(self.0, c"OK".as_ptr()) else ERR);
    }

    pub fn reply_bulk(self, bytes: &[u8]) {
        call!(RedisModule_ReplyWithStringBuffer(self.0, bytes.as_ptr().cast(), bytes.len()) else ERR);
    }

    /// A map of `pairs` entries in RESP3, a flat array of `2 * pairs` in RESP2.
    pub fn reply_map(self, pairs: usize) {
        call!(RedisModule_ReplyWithMap(self.0, pairs as _) else ERR);
    }

    /// An array of `len` elements, sent next.
    pub fn reply_array(self, len: usize) {
        call!(RedisModule_ReplyWithArray(self.0, len as _) else ERR);
    }

    /// Replies with an error. `text` starts with its code (`ERR`, `WRONGTYPE` …);
    /// bytes Redis cannot carry in an error line are replaced.
    pub fn reply_error(self, text: &str) {
        let line: Vec<u8> = text
            .bytes()
            .map(|b| match b {
                b'\r' | b'\n' | 0 => b' ',
                _ => b,
            })
            .collect();
        let line = CString::new(line).unwrap_or_default();
        call!(RedisModule_ReplyWithError(self.0, line.as_ptr()) else ERR);
    }

    /// Sends the keyspace event `event` of `class` about `key` to `notify-keyspace-events`
    /// subscribers (pub/sub) and to modules that listen, as built-in writes do.
    pub fn notify(self, class: EventClass, event: &CStr, key: Arg<'_>) {
        let class = match class {
            EventClass::Generic => raw::REDISMODULE_NOTIFY_GENERIC,
            EventClass::Module => raw::REDISMODULE_NOTIFY_MODULE,
        } as c_int;
        let send = |key: *mut raw::RedisModuleString| {
            call!(RedisModule_NotifyKeyspaceEvent(self.0, class, event.as_ptr(), key) else ERR);
        };
        let bytes = match key {
            Arg::Str(key) => return send(key.as_ptr()),
            Arg::Bytes(bytes) => bytes,
            Arg::Word(word) => word.bytes(),
            Arg::Int(_) => return,
        };
        let key = self.create_string(bytes);
        if !key.is_null() {
            send(key);
            call!(RedisModule_FreeString(self.0, key) else ());
        }
    }

    /// Propagates the current command exactly as it was called.
    pub fn replicate_verbatim(self) {
        call!(RedisModule_ReplicateVerbatim(self.0) else ERR);
    }

    pub fn reply_wrong_arity(self) {
        call!(RedisModule_WrongArity(self.0) else ERR);
    }

    /// Propagates `command args…` to replicas and the AOF, inside this command's
    /// transaction. Strings Redis handed us go as they are (Redis takes a reference);
    /// bytes and integers are copied by Redis from our stack.
    ///
    /// The shapes of the commands clients call (a grant, a new expiry, a release, on
    /// the key the client named) go in one call with a format of their own: the
    /// module makes no strings of its own to free, and Redis sizes its argv once (a
    /// vector, "v", makes it grow it). Any other shape (hand-offs from timers and
    /// events, which know the key only as bytes) goes as a vector.
    pub fn replicate(self, command: &CStr, args: &[Arg<'_>]) {
        // SAFETY: reading a function pointer that Redis filled in at load time.
        let Some(f) = (unsafe { raw::RedisModule_Replicate }) else {
            return;
        };
        let (ctx, name) = (self.0, command.as_ptr());
        let (mut first, mut second) = (itoa::Buffer::new(), itoa::Buffer::new());
        // One call with its own format: 's' takes a RedisModuleString*, 'b' a char*
        // and a size_t. The pointers are valid for the call; Redis references or
        // copies what it keeps.
        macro_rules! replicate {
            ($format:literal $(, $arg:expr)*) => {
                // SAFETY: the format has one letter per argument, as above.
                { unsafe { f(ctx, name, $format.as_ptr() $(, $arg)*) }; }
            };
        }
        match *args {
            [Arg::Str(key)] => replicate!(c"s", key.as_ptr()),
            [Arg::Str(key), Arg::Int(n)] => {
                let n = first.format(n).as_bytes();
                replicate!(c"sb", key.as_ptr(), n.as_ptr(), n.len())
            }
            // A grant or a new expiry: `key owner token PXAT at`, the word referenced.
            [Arg::Str(key), Arg::Str(value), Arg::Int(n), Arg::Word(word), Arg::Int(m)] => {
                let word = word.string();
                if word.is_null() {
                    return self.replicate_vector(f, command, args);
                }
                let (n, m) = (first.format(n).as_bytes(), second.format(m).as_bytes());
                replicate!(
                    c"ssbsb",
                    key.as_ptr(),
                    value.as_ptr(),
                    n.as_ptr(),
                    n.len(),
                    word,
                    m.as_ptr(),
                    m.len()
                )
            }
            // A shared grant and a lapse, many per hand-off or settle: each argument
            // copied by Redis from a buffer costs less than a string made here first.
            [a, b, c, d] => {
                let mut ints = [(); 4].map(|_| itoa::Buffer::new());
                let [a, b, c, d] = bytes_of([&a, &b, &c, &d], &mut ints);
                replicate!(
                    c"bbbb",
                    a.as_ptr(),
                    a.len(),
                    b.as_ptr(),
                    b.len(),
                    c.as_ptr(),
                    c.len(),
                    d.as_ptr(),
                    d.len()
                )
            }
            [a, b, c, d, e, g] => {
                let mut ints = [(); 6].map(|_| itoa::Buffer::new());
                let [a, b, c, d, e, g] = bytes_of([&a, &b, &c, &d, &e, &g], &mut ints);
                replicate!(
                    c"bbbbbb",
                    a.as_ptr(),
                    a.len(),
                    b.as_ptr(),
                    b.len(),
                    c.as_ptr(),
                    c.len(),
                    d.as_ptr(),
                    d.len(),
                    e.as_ptr(),
                    e.len(),
                    g.as_ptr(),
                    g.len()
                )
            }
            _ => self.replicate_vector(f, command, args),
        }
    }

    /// [`Ctx::replicate`] for any shape: every argument made a string, sent as "v"
    /// (on the stack up to 8 arguments).
    fn replicate_vector(self, f: ReplicateFn, command: &CStr, args: &[Arg<'_>]) {
        const MAX: usize = 8;
        if args.len() > MAX {
            let mut argv = vec![ptr::null_mut::<raw::RedisModuleString>(); args.len()];
            let mut created = vec![false; args.len()];
            self.replicate_strings(f, command, args, &mut argv, &mut created);
            return;
        }
        let mut argv = [ptr::null_mut::<raw::RedisModuleString>(); MAX];
        let mut created = [false; MAX];
        let (Some(argv), Some(created)) =
            (argv.get_mut(..args.len()), created.get_mut(..args.len()))
        else {
            return;
        };
        self.replicate_strings(f, command, args, argv, created);
    }

    /// Makes each argument a string in `argv` (`created`: made here, to free), then
    /// replicates them as "v".
    fn replicate_strings(
        self,
        f: ReplicateFn,
        command: &CStr,
        args: &[Arg<'_>],
        argv: &mut [*mut raw::RedisModuleString],
        created: &mut [bool],
    ) {
        for ((arg, slot), slot_made) in args.iter().zip(argv.iter_mut()).zip(created.iter_mut()) {
            let (string, made) = match arg {
                Arg::Str(s) => (s.as_ptr(), false),
                Arg::Word(word) if !word.string().is_null() => (word.string(), false),
                Arg::Bytes(b) => (self.create_string(b), true),
                Arg::Word(word) => (self.create_string(word.bytes()), true),
                Arg::Int(n) => (
                    call!(RedisModule_CreateStringFromLongLong(self.0, *n) else ptr::null_mut()),
                    true,
                ),
            };
            *slot = string;
            *slot_made = made;
            if string.is_null() {
                self.free_strings(argv, created);
                return;
            }
        }
        // SAFETY: format "v" takes a RedisModuleString** and its length; Redis takes
        // its own references to the strings.
        unsafe {
            f(
                self.0,
                command.as_ptr(),
                c"v".as_ptr(),
                argv.as_mut_ptr(),
                argv.len(),
            )
        };
        self.free_strings(argv, created);
    }

    /// A copy of `bytes` this call owns (to free); null if Redis could not make it.
    fn create_string(self, bytes: &[u8]) -> *mut raw::RedisModuleString {
        call!(RedisModule_CreateString(self.0, bytes.as_ptr().cast(), bytes.len()) else ptr::null_mut())
    }

    fn free_strings(self, argv: &[*mut raw::RedisModuleString], created: &[bool]) {
        for (&string, &made) in argv.iter().zip(created) {
            if made && !string.is_null() {
                call!(RedisModule_FreeString(self.0, string) else ());
            }
        }
    }
}

/// `RedisModule_Replicate`: variadic, its arguments described by a format string.
type ReplicateFn = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *const std::ffi::c_char,
    *const std::ffi::c_char,
    ...
) -> c_int;

/// The class of a keyspace event: the letter that enables it in `notify-keyspace-events`.
#[derive(Clone, Copy)]
pub enum EventClass {
    /// `g`: generic commands (`del`, `expire`…).
    Generic,
    /// `d`: events of module data types.
    Module,
}

/// One argument of a propagated command.
#[derive(Clone, Copy)]
pub enum Arg<'a> {
    /// A string Redis handed to the command (key, owner): passed without a copy.
    Str(&'a RString),
    Bytes(&'a [u8]),
    /// A fixed word of the module's own commands, passed without a copy.
    Word(&'static Word),
    Int(i64),
}

/// A fixed word of the commands the module propagates (`PXAT`): one string made at
/// its first use and kept for the server's lifetime, as Redis keeps `shared.pxat`
/// for its own `SET`. Each propagation then takes a reference to it instead of
/// allocating, copying and freeing a string of its own (about 210 of the 9,400
/// instructions of a grant on Redis 7.0, bench/callgrind.sh).
pub struct Word {
    text: &'static CStr,
    string: AtomicPtr<raw::RedisModuleString>,
}

impl Word {
    pub const fn new(text: &'static CStr) -> Self {
        Word {
            text,
            string: AtomicPtr::new(ptr::null_mut()),
        }
    }

    pub fn bytes(&self) -> &'static [u8] {
        self.text.to_bytes()
    }

    /// The kept string, made on first use; null while Redis cannot make it (then
    /// callers pass the bytes instead). Module code runs on Redis's main thread; if
    /// two calls raced, the loser frees its copy.
    fn string(&self) -> *mut raw::RedisModuleString {
        let kept = self.string.load(Ordering::Relaxed);
        if !kept.is_null() {
            return kept;
        }
        let text = self.bytes();
        let made = call!(RedisModule_CreateString(ptr::null_mut(), text.as_ptr().cast(), text.len()) else ptr::null_mut());
        if made.is_null() {
            return made;
        }
        match self.string.compare_exchange(
            ptr::null_mut(),
            made,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => made,
            Err(other) => {
                call!(RedisModule_FreeString(ptr::null_mut(), made) else ());
                other
            }
        }
    }
}

/// The bytes of each argument, integers written into `ints`.
fn bytes_of<'a, const N: usize>(
    args: [&'a Arg<'a>; N],
    ints: &'a mut [itoa::Buffer; N],
) -> [&'a [u8]; N] {
    let mut out = [&[][..]; N];
    for ((slot, arg), int) in out.iter_mut().zip(args).zip(ints.iter_mut()) {
        *slot = match arg {
            Arg::Str(s) => s.as_bytes(),
            Arg::Bytes(b) => b,
            Arg::Word(word) => word.bytes(),
            Arg::Int(n) => int.format(*n).as_bytes(),
        };
    }
    out
}

/// A string argument of a command, borrowed from Redis for the call.
#[repr(transparent)]
pub struct RString(raw::RedisModuleString);

impl RString {
    /// Borrows a string Redis passed to a callback; `None` for null.
    ///
    /// # Safety
    /// `p` is null or a string Redis passed to the running callback, and the borrow
    /// ends with the callback.
    unsafe fn from_ptr<'a>(p: *mut raw::RedisModuleString) -> Option<&'a RString> {
        // SAFETY: as the caller promises.
        unsafe { p.cast::<RString>().as_ref() }
    }

    fn as_ptr(&self) -> *mut raw::RedisModuleString {
        (&self.0 as *const raw::RedisModuleString).cast_mut()
    }

    pub fn as_bytes(&self) -> &[u8] {
        let mut len = 0usize;
        let p = call!(RedisModule_StringPtrLen(self.as_ptr(), &mut len) else ptr::null());
        if p.is_null() {
            return &[];
        }
        // SAFETY: Redis returns the string's buffer and length; it lives as long as the
        // string, which outlives `self`'s borrow.
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
    }
}

/// A string the module made, freed when dropped: a key known only by its bytes (a
/// timer's, an event's), made once for the several calls that name it.
pub struct OwnedString(*mut raw::RedisModuleString);

impl OwnedString {
    /// A copy of `bytes`; `None` if Redis could not make it.
    pub fn new(bytes: &[u8]) -> Option<OwnedString> {
        let string = call!(RedisModule_CreateString(ptr::null_mut(), bytes.as_ptr().cast(), bytes.len()) else ptr::null_mut());
        (!string.is_null()).then_some(OwnedString(string))
    }

    pub fn as_rstring(&self) -> &RString {
        // SAFETY: a live string of ours, until `self` drops.
        unsafe { &*self.0.cast::<RString>() }
    }
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        call!(RedisModule_FreeString(ptr::null_mut(), self.0) else ());
    }
}

/// A string Redis passed to a callback, kept alive past the callback: while held, no
/// other string can take its address, so [`HeldString::is`] tells whether a later
/// callback got the very same object. Released when dropped.
pub struct HeldString(*mut raw::RedisModuleString);

impl HeldString {
    /// Holds `string` (Redis copies one that lives on its stack: it then never
    /// matches, which is the safe answer).
    pub fn hold(string: &RString) -> Option<HeldString> {
        let held =
            call!(RedisModule_HoldString(ptr::null_mut(), string.as_ptr()) else ptr::null_mut());
        (!held.is_null()).then_some(HeldString(held))
    }

    /// True when `string` is the very object held.
    pub fn is(&self, string: &RString) -> bool {
        std::ptr::eq(self.0, string.as_ptr())
    }
}

impl Drop for HeldString {
    fn drop(&mut self) {
        call!(RedisModule_FreeString(ptr::null_mut(), self.0) else ());
    }
}

/// The argv of a command call.
pub struct Argv<'a>(&'a [*mut raw::RedisModuleString]);

impl<'a> Argv<'a> {
    /// # Safety
    /// `argv` must point to `argc` valid strings that live for `'a`.
    unsafe fn new(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Self {
        if argv.is_null() || argc <= 0 {
            return Argv(&[]);
        }
        // SAFETY: as the caller promises.
        Argv(unsafe { std::slice::from_raw_parts(argv, argc as usize) })
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The strings themselves, for the API calls that take a vector.
    fn raw_args(&self) -> &'a [*mut raw::RedisModuleString] {
        self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn string(&self, index: usize) -> Option<&'a RString> {
        let p = *self.0.get(index)?;
        // SAFETY: argv entries are valid, non-null strings for the call.
        unsafe { p.cast::<RString>().as_ref() }
    }

    /// The bytes of arguments `from..` into `out`; `None` when there are more than
    /// `out` holds.
    pub fn bytes_from<'o>(&self, from: usize, out: &'o mut [&'a [u8]]) -> Option<&'o [&'a [u8]]> {
        let rest = self.0.get(from..).unwrap_or(&[]);
        let slots = out.get_mut(..rest.len())?;
        for (slot, index) in slots.iter_mut().zip(from..) {
            *slot = self.string(index).map(RString::as_bytes).unwrap_or(&[]);
        }
        Some(slots)
    }
}
