//! One file per command: parse the arguments, call the lock core, say what to reply.
//! Handlers never write a reply themselves; they return a [`Reply`], which the
//! command's entry point (`ffi::command`) sends after the handler returns (so a bug
//! that panics mid-way still yields exactly one well-formed error reply).

pub mod acquire;
pub mod apply;
mod common;
pub mod extend;
pub mod guard;
pub mod info;
pub mod lapse;
pub mod release;

use crate::ffi::command::{Commands, Spec};
use crate::ffi::{Argv, Ctx};
use crate::reply::Reply;
use common::Handler;

/// How many commands the module has.
const COMMAND_COUNT: usize = 7;

/// Every command of the module, registered in this order ...
const SPECS: [Spec; COMMAND_COUNT] = [
    acquire::SPEC,
    release::SPEC,
    extend::SPEC,
    info::SPEC,
    apply::SPEC,
    lapse::SPEC,
    guard::SPEC,
];

/// ... and their handlers, in the same order.
const HANDLERS: [Handler; COMMAND_COUNT] = [
    acquire::acquire,
    release::release,
    extend::extend,
    info::info,
    apply::apply,
    lapse::lapse,
    guard::guard,
];

/// The module's commands, as `ffi::command` registers and runs them.
pub struct Table;

impl Commands for Table {
    type Reply = Reply;
    const SPECS: &'static [Spec] = &SPECS;

    #[inline]
    fn run(index: usize, ctx: Ctx, args: &Argv) -> Reply {
        match HANDLERS.get(index) {
            Some(handler) => handler(ctx, args).unwrap_or_else(|reply| reply),
            None => Reply::error("ERR unknown lock command"),
        }
    }

    fn panicked() -> Reply {
        Reply::error("ERR internal error in the lock module")
    }

    #[inline]
    fn send(ctx: Ctx, reply: Reply) {
        reply.send(ctx);
    }
}
