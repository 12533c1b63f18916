//! `redis-lock guard -- COMMAND [ARG ...]`: in a job under `redis-lock run`, runs a
//! Redis command only while the job's lock is held with its token, checked and run
//! by the server in one step (`LOCK.GUARD`, or the library's `lock_guard`), and
//! prints the reply as redis-cli does. The lock comes from the environment `run`
//! gives its child (`REDIS_LOCK_KEY`, `REDIS_LOCK_TOKEN`), and so does the server
//! (see `args::Connection::under_run`).

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use redis::Value;
use redis_lock_client::{Backend, Connector, Error, LockClient};

use crate::args::GuardArgs;
use crate::events;
use crate::exit;

/// How long the look-up of the command's keys may take.
const KEYS_LIMIT: Duration = Duration::from_secs(2);

pub async fn guard<K: Connector>(locks: LockClient<K>, args: GuardArgs) -> i32 {
    let (key, token) = match held() {
        Ok(held) => held,
        Err(message) => {
            events::line(message);
            return exit::USAGE;
        }
    };
    let words: Vec<Vec<u8>> = args.command.iter().map(bytes).collect();
    let backend = match locks.detect_backend().await {
        Ok(backend) => backend,
        Err(error) => return exit::failure(&error, &key),
    };
    // The module finds the command's keys itself; the library takes them declared.
    let keys = if backend == Backend::Module {
        Vec::new()
    } else {
        match keys_of(&locks, &words).await {
            Ok(keys) => keys,
            Err(Error::Server(error)) => {
                events::line(format_args!(
                    "cannot ask the server for the command's keys, which the library takes \
                     declared (COMMAND GETKEYS: {}): allow +command|getkeys",
                    exit::plain(&error)
                ));
                return exit::SOFTWARE;
            }
            Err(error) => return exit::failure(&error, &key),
        }
    };
    let mut command = redis::Cmd::new();
    for word in &words {
        command.arg(word.as_slice());
    }
    match locks
        .guard_token::<Value>(&key, token, &keys, &command)
        .await
    {
        Ok(reply) => {
            let shown = crate::reply::format(&reply, std::io::stdout().is_terminal());
            let mut stdout = std::io::stdout().lock();
            if stdout
                .write_all(&shown)
                .and_then(|()| stdout.flush())
                .is_err()
            {
                return exit::OUTPUT;
            }
            0
        }
        Err(Error::Server(error)) => {
            // The command's own error, or the server's refusal of it: a reply.
            let text = crate::reply::error(&exit::plain(&error));
            let _ = writeln!(std::io::stderr().lock(), "{text}");
            exit::ERROR_REPLY
        }
        Err(error) => exit::failure(&error, &key),
    }
}

/// The job's lock, from the environment `run` gave it.
fn held() -> Result<(String, i64), String> {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                format!(
                    "{name} is not set: `redis-lock guard` runs in a job under `redis-lock run`, \
                 which sets REDIS_LOCK_KEY and REDIS_LOCK_TOKEN for it"
                )
            })
    };
    let key = var("REDIS_LOCK_KEY")?;
    let text = var("REDIS_LOCK_TOKEN")?;
    match text.parse::<i64>() {
        Ok(token) if token > 0 => Ok((key, token)),
        _ => Err(format!(
            "REDIS_LOCK_TOKEN={text:?} is not a fencing token (a positive integer)"
        )),
    }
}

fn bytes(word: &OsString) -> Vec<u8> {
    word.as_os_str().as_bytes().to_vec()
}

/// The keys the command touches, as the server says (`COMMAND GETKEYS`), for the
/// library, which takes them declared. A command the server finds no keys in (none,
/// an unknown command, a wrong count of arguments) has none: the guarded call then
/// answers for it.
async fn keys_of<K: Connector>(
    locks: &LockClient<K>,
    words: &[Vec<u8>],
) -> Result<Vec<Vec<u8>>, Error> {
    let mut con = locks.connector().connect(Some(KEYS_LIMIT)).await?;
    let mut getkeys = redis::cmd("COMMAND");
    getkeys.arg("GETKEYS");
    for word in words {
        getkeys.arg(word.as_slice());
    }
    match getkeys.query_async::<Vec<Vec<u8>>>(&mut con).await {
        Ok(keys) => Ok(keys),
        Err(error) if error.code().is_some() && error.code() != Some("NOPERM") => Ok(Vec::new()),
        Err(error) => Err(error.into()),
    }
}
