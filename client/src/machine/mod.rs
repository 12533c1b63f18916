//! What each operation says on the wire, without doing any I/O: a machine is told
//! what happened ([`Input`]) and answers what to do next ([`Step`]): send a command
//! (with how long its reply may take), sleep, or stop with a result. The blocking
//! driver (`drive/blocking.rs`) and the tokio one (`drive/tokio.rs`) each run the
//! same machines with their own I/O, so the blocking and the async APIs cannot drift
//! apart, and every backend's acquire (the module's one blocking command, the
//! library's wait protocol) is one machine.
//!
//! - [`Acquire`]: take a lock, waiting as asked, retrying a lost reply, withdrawing
//!   what an unanswered request may have left.
//! - [`Extend`] and [`Release`]: a held lock's extend and release, which move or end
//!   its lease; nothing is sent for a lock of another process.
//! - [`Withdraw`]: take back what a request abandoned mid-way may have left.
//! - [`Detect`]: which backend a server offers.
//! - [`Guard`]: a guarded write, run only while the lock's token holds it.
//! - [`Single`]: one call and what its reply means; [`info`], who holds a lock.
//!
//! [`Scripted`] wraps any machine for the library backends: a `NOSCRIPT` reply (a
//! restart, `SCRIPT FLUSH`, a failover) loads the library and sends the same call
//! once more; the call did not run. An `FCALL` that finds the library gone (`ERR
//! Function not found`: a restart without persistence, `FUNCTION FLUSH`) is made
//! through the scripts path instead, which answers for what the server holds now.
//! An `FCALL` answered `WRONGTYPE` by a library this client does not accept (an
//! older one loaded over it) ends in the error that names both versions.

mod acquire;
mod detect;
mod extend;
mod guard;
mod release;
mod scripted;
mod single;
mod step;
mod withdraw;

pub(crate) use acquire::Acquire;
pub(crate) use detect::Detect;
pub(crate) use extend::Extend;
pub(crate) use guard::{reply_as, Guard};
pub(crate) use release::Release;
pub(crate) use scripted::Scripted;
pub(crate) use single::{info, Single};
pub(crate) use step::{Call, Input, Machine, Step};
pub(crate) use withdraw::Withdraw;

#[cfg(test)]
mod tests;
