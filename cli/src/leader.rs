//! `redis-lock leader`: the leader of an election (its term and value), and with
//! `--watch` each new one as it takes office.

use redis_lock_client::{Connector, Election, Leader, LockClient};

use crate::args::LeaderArgs;
use crate::events;
use crate::exit;

/// Any TTL: `leader` only reads.
const READ_TTL: std::time::Duration = std::time::Duration::from_secs(1);

pub async fn leader<K: Connector>(locks: LockClient<K>, args: LeaderArgs) -> i32 {
    let election = match Election::new(locks, &args.key, READ_TTL) {
        Ok(election) => election,
        Err(error) => {
            events::line(exit::describe(&error));
            return exit::USAGE;
        }
    };
    if !args.watch {
        return match election.leader().await {
            Ok(leader) => print(&args, leader.as_ref()),
            Err(error) => exit::failure(&error, &args.key),
        };
    }
    let mut observer = election.observe();
    loop {
        match observer.next().await {
            Ok(leader) => {
                let code = print(&args, Some(&leader));
                if code != 0 {
                    return code;
                }
            }
            Err(error) => return exit::failure(&error, &args.key),
        }
    }
}

fn print(args: &LeaderArgs, leader: Option<&Leader>) -> i32 {
    let line = if args.json {
        let value = leader.map(|leader| String::from_utf8_lossy(&leader.value).into_owned());
        serde_json::json!({
            "key": args.key,
            "term": leader.map(|leader| leader.term),
            "value": value,
        })
        .to_string()
    } else {
        match leader {
            Some(leader) => format!(
                "{}: {} (term {})",
                args.key,
                events::escaped(&leader.value),
                leader.term
            ),
            None => format!("{}: no leader", args.key),
        }
    };
    if events::out(&format!("{line}\n")) {
        0
    } else {
        exit::OUTPUT
    }
}
