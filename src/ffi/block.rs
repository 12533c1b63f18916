//! Blocked clients: a waiter is blocked with `RedisModule_BlockClient` (not
//! `BlockClientOnKeys`: on Redis 7.0 a deleted or expired key wakes no one) and
//! answered with `RedisModule_UnblockClient(bc, answer)`; its reply callback then
//! sends the answer.
//!
//! The callbacks are monomorphised over the answer's type ([`Answer`]): a client
//! blocked by [`Ctx::block`] is a [`Blocked<A>`], answered with an `A` only, and the
//! free callback drops exactly that type. What waiting means (queues, hand-offs) is
//! the caller's, in the layer above; this one imports nothing of it.

use std::ffi::{c_int, c_void};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::ptr;

use redis_module::raw;

use super::{call, guarded, Ctx, ERR, OK};

/// What a blocked client is answered with, and what it does when Redis reports on
/// it. Each function runs inside a callback from Redis, with panics caught.
pub trait Answer: Sized + 'static {
    /// Sends the reply for `answer` (`None`: the client was woken without one).
    fn reply(ctx: Ctx, answer: Option<&Self>);
    /// The reply of `handle` is being sent.
    fn delivered(handle: Blocked<Self>);
    /// `handle` left without being answered: `CLIENT UNBLOCK`, a disconnect, or a
    /// master turned replica. Returns true if it was still waiting (Redis then needs
    /// its handle released), false if the module had answered it already.
    fn left(ctx: Ctx, handle: Blocked<Self>) -> bool;
}

/// A blocked client, by the handle Redis gave it, answered with an `A`; valid until
/// it is answered, times out or disconnects (each of which removes it from the
/// caller's queues first).
pub struct Blocked<A> {
    bc: usize,
    answer: PhantomData<fn(A)>,
}

impl<A> Clone for Blocked<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Blocked<A> {}

impl<A> PartialEq for Blocked<A> {
    fn eq(&self, other: &Self) -> bool {
        self.bc == other.bc
    }
}

impl<A> Eq for Blocked<A> {}

impl<A> Hash for Blocked<A> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.bc.hash(state);
    }
}

impl<A> fmt::Debug for Blocked<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Blocked({:#x})", self.bc)
    }
}

impl<A: Answer> Blocked<A> {
    fn from_ptr(bc: *mut raw::RedisModuleBlockedClient) -> Self {
        Blocked {
            bc: bc as usize,
            answer: PhantomData,
        }
    }

    fn as_ptr(self) -> *mut raw::RedisModuleBlockedClient {
        self.bc as *mut raw::RedisModuleBlockedClient
    }

    /// Wakes the client; its reply callback gets `answer`.
    pub fn answer(self, answer: A) {
        let data = Box::into_raw(Box::new(answer)).cast::<c_void>();
        if call!(RedisModule_UnblockClient(self.as_ptr(), data) else ERR) != OK {
            // SAFETY: Redis did not take the box, made just above from an `A`.
            drop(unsafe { Box::from_raw(data.cast::<A>()) });
        }
    }

    /// Releases a handle Redis still holds, without a reply to send (after a
    /// disconnect or an unblock by Redis). Never for a client already answered:
    /// Redis would free it twice.
    fn release(self) {
        call!(RedisModule_UnblockClient(self.as_ptr(), ptr::null_mut()) else ERR);
    }
}

/// Takes back the `Box<T>` a payload pointer came from.
///
/// # Safety
/// `data` is null or came from `Box::<T>::into_raw` (a block's answer, a timer's
/// payload, a value of the data type), and is taken back once.
pub(super) unsafe fn take_payload<T>(data: *mut c_void) -> Option<Box<T>> {
    // SAFETY: as the caller promises.
    (!data.is_null()).then(|| unsafe { Box::from_raw(data.cast::<T>()) })
}

impl Ctx<'_> {
    /// Blocks the calling client until the module answers it with an `A`, with Redis
    /// given no timeout (the caller keeps the waiter's deadline): only `CLIENT
    /// UNBLOCK` reaches the timeout callback. `None` when Redis refuses.
    pub fn block<A: Answer>(self) -> Option<Blocked<A>> {
        let bc = call!(RedisModule_BlockClient(
            self.raw(),
            Some(reply::<A>),
            Some(timeout::<A>),
            Some(free::<A>),
            0,
        ) else ptr::null_mut());
        if bc.is_null() {
            return None;
        }
        call!(RedisModule_SetDisconnectCallback(bc, Some(disconnected::<A>)) else ());
        Some(Blocked::from_ptr(bc))
    }

    /// The blocked client a reply or timeout callback runs for.
    fn blocked_handle<A: Answer>(self) -> Blocked<A> {
        Blocked::from_ptr(
            call!(RedisModule_GetBlockedClientHandle(self.raw()) else ptr::null_mut()),
        )
    }
}

extern "C" fn reply<A: Answer>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: the context Redis passed to this call, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    let data = call!(RedisModule_GetBlockedClientPrivateData(ctx.raw()) else ptr::null_mut());
    // SAFETY: every answer of a client blocked with these callbacks is an `A`
    // (`Blocked::<A>::answer`); it lives until the free callback, after this one.
    let answer = unsafe { data.cast::<A>().as_ref() };
    guarded((), || {
        A::delivered(ctx.blocked_handle());
        A::reply(ctx, answer);
    });
    OK
}

/// Redis times out no waiter itself (they block without a Redis timeout): this runs
/// for `CLIENT UNBLOCK … TIMEOUT`, whose reply is null. A waiter the module had
/// already answered may get here on Redis 7.2 and later, which then drop the
/// answer's reply (`Answer::left` takes its grant back).
extern "C" fn timeout<A: Answer>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: the context Redis passed to this call, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    let handle = ctx.blocked_handle::<A>();
    let was_waiting = guarded(false, || A::left(ctx, handle));
    guarded((), || A::reply(ctx, None));
    // Redis frees the handle only once the module unblocks it, also after a timeout;
    // the client is detached by then, so no second reply is sent. One already
    // answered was unblocked then: a second unblock would free it twice.
    if was_waiting {
        handle.release();
    }
    OK
}

extern "C" fn disconnected<A: Answer>(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    // SAFETY: the context Redis passed to this call, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    let handle = Blocked::<A>::from_ptr(bc);
    // On a panic, leaking the handle is better than freeing it twice.
    if guarded(false, || A::left(ctx, handle)) {
        // Redis frees a handle blocked with RedisModule_BlockClient only when the
        // module unblocks it, also after a disconnect; without a reply to send.
        handle.release();
    }
}

extern "C" fn free<A: Answer>(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: the only answer of a client blocked with these callbacks is an `A`.
    guarded((), || drop(unsafe { take_payload::<A>(data) }));
}
