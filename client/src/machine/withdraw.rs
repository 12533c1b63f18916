//! Taking back what a request cut short may have left in the server.

use std::collections::VecDeque;

use redis::Cmd;
use redis_lock_core::protocol;

use super::scripted::Scripted;
use super::step::{Input, Machine, Step};
use crate::request::Request;

/// The calls that take back what an unanswered request may have left: its place in
/// the library's queue and a grant pushed but not collected (`lock_cancel`, when
/// `queued`), and, for a fresh owner nobody else knows, a grant already made (a
/// release, which runs after it). A given owner's holding is never released: its
/// caller may hold the lock under it already.
pub(crate) fn withdrawals(request: &Request, queued: bool) -> Vec<Cmd> {
    let key = Some(request.key.as_str());
    let Ok(owner) = protocol::owner_args(request.owner.as_bytes()) else {
        return Vec::new();
    };
    let mut calls = Vec::new();
    if queued {
        calls.push(request.backend.call("lock_cancel", key, &owner));
    }
    if !request.owner_given {
        calls.push(request.backend.call("lock_release", key, &owner));
    }
    calls
}

/// Withdraws a request whose acquire was dropped before it answered: on the
/// library, `lock_cancel` (whether or not it waited: a grant may have been pushed),
/// then the release of a fresh owner, one after the other, until one fails.
pub(crate) struct Withdraw {
    calls: VecDeque<Cmd>,
}

impl Withdraw {
    pub(crate) fn new(request: &Request) -> Scripted<Withdraw> {
        let calls = withdrawals(request, request.backend.is_library());
        Scripted::new(Withdraw {
            calls: calls.into(),
        })
    }
}

impl Machine for Withdraw {
    type Output = ();

    fn step(&mut self, input: Input) -> Step<()> {
        if let Input::Reply(Err(error)) = input {
            return Step::Done(Err(error.into()));
        }
        match self.calls.pop_front() {
            Some(call) => Step::Send(call.into(), None),
            None => Step::Done(Ok(())),
        }
    }
}
