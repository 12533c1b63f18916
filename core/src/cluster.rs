//! What this node's `CLUSTER NODES` says about a slot it is migrating away. Plain
//! text parsing, unit-tested without a server; the glue asks Redis for the text.

/// The address (`ip:port`, as Redis prints it in `-ASK` and `-MOVED` redirects) of
/// the node that this node (flag `myself`) is migrating `slot` to, if it is.
///
/// A line is `<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
/// <pong-recv> <config-epoch> <link-state> <slot>…`, where a slot being migrated
/// shows as `[<slot>->-<target id>]` on the migrating node's own line.
pub fn migrating_target(nodes: &str, slot: i64) -> Option<&str> {
    let myself = nodes.lines().find(|line| {
        line.split(' ')
            .nth(2)
            .is_some_and(|flags| flags.split(',').any(|flag| flag == "myself"))
    })?;
    let marker = format!("[{slot}->-");
    let target_id = myself
        .split(' ')
        .skip(8)
        .find_map(|field| field.strip_prefix(marker.as_str())?.strip_suffix(']'))?;
    let target = nodes
        .lines()
        .find(|line| line.split(' ').next() == Some(target_id))?;
    let address = target.split(' ').nth(1)?;
    address
        .split(['@', ','])
        .next()
        .filter(|address| !address.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
2b2c1c0e6a0b6d4c9e1f0a3b5c7d9e1f2a4b6c8d 127.0.0.1:7001@17001 master - 0 1700000000000 2 connected 5461-10922 [5474-<-9f3a1b2c3d4e5f60718293a4b5c6d7e8f9012345]
9f3a1b2c3d4e5f60718293a4b5c6d7e8f9012345 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [5474->-2b2c1c0e6a0b6d4c9e1f0a3b5c7d9e1f2a4b6c8d]
77aa88bb99cc00dd11ee22ff33aa44bb55cc66dd 127.0.0.1:7002@17002,node-c master - 0 1700000000000 3 connected 10923-16383
";

    #[test]
    fn a_slot_this_node_migrates_names_its_target() {
        assert_eq!(migrating_target(NODES, 5474), Some("127.0.0.1:7001"));
    }

    #[test]
    fn a_slot_not_being_migrated_has_no_target() {
        assert_eq!(migrating_target(NODES, 5475), None);
        assert_eq!(migrating_target(NODES, 54), None);
        assert_eq!(migrating_target(NODES, 547), None);
    }

    #[test]
    fn an_importing_slot_is_not_migrating() {
        // The same text seen from the importing node.
        let from_target = NODES.replace("myself,master", "master").replace(
            "127.0.0.1:7001@17001 master",
            "127.0.0.1:7001@17001 myself,master",
        );
        assert_eq!(migrating_target(&from_target, 5474), None);
    }

    #[test]
    fn the_address_drops_the_bus_port_and_hostname() {
        let to_c = NODES.replace(
            "[5474->-2b2c1c0e6a0b6d4c9e1f0a3b5c7d9e1f2a4b6c8d]",
            "[5474->-77aa88bb99cc00dd11ee22ff33aa44bb55cc66dd]",
        );
        assert_eq!(migrating_target(&to_c, 5474), Some("127.0.0.1:7002"));
    }

    #[test]
    fn odd_text_gives_no_target() {
        for text in [
            "",
            "\n\n",
            "x y myself",
            "a b myself c d e f g [5474->-",
            "a b myself c d e f g [5474->-zz]",
        ] {
            assert_eq!(migrating_target(text, 5474), None, "{text:?}");
        }
    }
}
