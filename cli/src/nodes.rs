//! The servers that hold keys, for the commands that look at all of them (`list`,
//! `stats`): the one server (a URL, or the master the sentinels name), or every
//! master of a Cluster, each reached on its own.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, RedisResult, Value};
use redis_lock_client::{Connector, Sentinel};

/// How long one command of `list` or `stats` may take: a SCAN step of a bounded
/// COUNT and a pipeline of as many LOCK.INFO answer in milliseconds.
pub const REPLY_LIMIT: Duration = Duration::from_secs(10);

/// One server, and how to send it commands.
pub enum Node {
    Direct(MultiplexedConnection),
    /// A master of a Cluster, by its address, through the cluster connection.
    Master {
        con: ClusterConnection,
        host: String,
        port: u16,
    },
}

impl Node {
    /// `host:port` of a Cluster's master; empty for the one server.
    pub fn name(&self) -> String {
        match self {
            Node::Direct(_) => String::new(),
            Node::Master { host, port, .. } => format!("{host}:{port}"),
        }
    }

    pub async fn query(&mut self, cmd: Cmd) -> RedisResult<Value> {
        match self {
            Node::Direct(con) => con.req_packed_command(&cmd).await,
            Node::Master { con, host, port } => {
                let route = RoutingInfo::SingleNode(address(host, *port));
                con.route_command(cmd, route).await
            }
        }
    }

    /// The commands of `pipeline`, their answers in order: an error answer is a
    /// `Value::ServerError` among them, not an error of the whole.
    pub async fn pipeline(&mut self, pipeline: Pipeline) -> RedisResult<Vec<Value>> {
        let count = pipeline.len();
        match self {
            Node::Direct(con) => con.req_packed_commands(&pipeline, 0, count).await,
            Node::Master { con, host, port } => {
                con.route_pipeline(pipeline, 0, count, address(host, *port))
                    .await
            }
        }
    }
}

fn address(host: &str, port: u16) -> SingleNodeRoutingInfo {
    SingleNodeRoutingInfo::ByAddress {
        host: host.to_string(),
        port,
    }
}

/// The connectors whose servers `list` and `stats` can look at one by one.
pub trait Nodes: Connector {
    /// The servers that hold keys: the one, or every master of a Cluster.
    fn masters(&self) -> impl Future<Output = RedisResult<Vec<Node>>> + Send;
}

impl Nodes for redis::Client {
    async fn masters(&self) -> RedisResult<Vec<Node>> {
        Ok(vec![Node::Direct(self.connect(Some(REPLY_LIMIT)).await?)])
    }
}

impl Nodes for Sentinel {
    async fn masters(&self) -> RedisResult<Vec<Node>> {
        Ok(vec![Node::Direct(self.connect(Some(REPLY_LIMIT)).await?)])
    }
}

impl Nodes for ClusterClient {
    async fn masters(&self) -> RedisResult<Vec<Node>> {
        let mut con = self.connect(Some(REPLY_LIMIT)).await?;
        let slots: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut con)
            .await?;
        let masters = masters_of(slots)?;
        Ok(masters
            .into_iter()
            .map(|(host, port)| Node::Master {
                con: con.clone(),
                host,
                port,
            })
            .collect())
    }
}

/// The masters in a `CLUSTER SLOTS` answer (each range's first node), each once, in
/// the order they first serve a slot.
fn masters_of(slots: Value) -> RedisResult<Vec<(String, u16)>> {
    let ranges: Vec<Vec<Value>> = redis::from_redis_value(slots)?;
    let mut masters: Vec<(String, u16)> = Vec::new();
    for range in ranges {
        let Some(master) = range.into_iter().nth(2) else {
            continue;
        };
        let node: Vec<Value> = redis::from_redis_value(master)?;
        let mut fields = node.into_iter();
        let (Some(host), Some(port)) = (fields.next(), fields.next()) else {
            continue;
        };
        let address = (
            redis::from_redis_value::<String>(host)?,
            redis::from_redis_value::<u16>(port)?,
        );
        if !masters.contains(&address) {
            masters.push(address);
        }
    }
    Ok(masters)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn each_master_is_listed_once() {
        let range = |start, end, master: Value, replica: Value| {
            Value::Array(vec![Value::Int(start), Value::Int(end), master, replica])
        };
        let slots = Value::Array(vec![
            range(0, 99, node("10.0.0.1", 7000), node("10.0.0.9", 7009)),
            range(100, 199, node("10.0.0.2", 7000), node("10.0.0.8", 7008)),
            range(200, 16383, node("10.0.0.1", 7000), node("10.0.0.9", 7009)),
        ]);
        assert_eq!(
            masters_of(slots).unwrap(),
            [
                ("10.0.0.1".to_string(), 7000),
                ("10.0.0.2".to_string(), 7000)
            ]
        );
    }
}
