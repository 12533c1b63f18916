//! The clients in the suite (`conformance/adapters/*.json`), what each says of itself
//! in its hello, and the project's constants it is held to (`protocol.json`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::actor::Actor;

/// The adapter protocol version this harness speaks.
pub const PROTOCOL: u64 = 1;

/// One registered client: how to start its adapter.
#[derive(Debug, Clone, Deserialize)]
pub struct Adapter {
    pub client: String,
    pub command: Vec<String>,
    #[serde(default)]
    pub build: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl Adapter {
    /// The command with `{root}` and `{target}` (Cargo's target directory:
    /// `CARGO_TARGET_DIR`, else `target`) replaced.
    pub fn argv(&self, root: &Path) -> Vec<String> {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        let root = root.display().to_string();
        self.command
            .iter()
            .map(|arg| arg.replace("{root}", &root).replace("{target}", &target))
            .collect()
    }

    /// Why the adapter cannot run here (its program is a relative path that is not
    /// there: not built), if so.
    pub fn missing(&self, root: &Path) -> Option<String> {
        let program = self.argv(root).into_iter().next()?;
        let path = PathBuf::from(&program);
        let missing = if path.is_absolute() {
            !path.exists()
        } else {
            path.components().count() > 1 && !root.join(&path).exists()
        };
        missing.then(|| format!("adapter not built ({program})"))
    }
}

/// Every `conformance/adapters/*.json`, by client name.
pub fn adapters(root: &Path) -> Result<Vec<Adapter>, String> {
    let dir = root.join("conformance").join("adapters");
    let mut found = Vec::new();
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let adapter: Adapter =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        found.push(adapter);
    }
    found.sort_by(|a, b| a.client.cmp(&b.client));
    Ok(found)
}

/// `conformance/protocol.json` without its comment.
pub fn protocol(root: &Path) -> Result<BTreeMap<String, Value>, String> {
    let path = root.join("conformance").join("protocol.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut fields: BTreeMap<String, Value> =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    fields.remove("comment");
    Ok(fields)
}

/// What a client says of itself.
#[derive(Debug, Clone)]
pub struct Hello {
    pub name: String,
    pub version: String,
    pub capabilities: BTreeSet<String>,
    pub constants: BTreeMap<String, Value>,
}

impl Hello {
    pub fn parse(value: &Value) -> Result<Hello, String> {
        let hello = value.get("hello").ok_or("no hello object")?;
        let protocol = hello.get("protocol").and_then(Value::as_u64);
        if protocol != Some(PROTOCOL) {
            return Err(format!(
                "adapter protocol {protocol:?}, this harness speaks {PROTOCOL}"
            ));
        }
        let text = |name: &str| {
            hello
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        };
        let capabilities = hello
            .get("capabilities")
            .and_then(Value::as_array)
            .ok_or("hello without capabilities")?
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        let constants = hello
            .get("constants")
            .and_then(Value::as_object)
            .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        Ok(Hello {
            name: text("client"),
            version: text("version"),
            capabilities,
            constants,
        })
    }

    /// Starts the adapter once to read its hello.
    pub fn probe(adapter: &Adapter, root: &Path, logs: &Path) -> Result<Hello, String> {
        let log = logs.join(&adapter.client).join("hello.log");
        let mut actor = Actor::spawn(adapter, root, "hello", "hello", &log)?;
        let hello = actor.hello(Duration::from_secs(30));
        actor.finish();
        let hello = hello.map_err(|e| format!("{e}; its log: {}", actor.log_tail(10)))?;
        Hello::parse(&hello.value)
    }

    /// The fields where this client disagrees with `protocol`, each saying both
    /// values.
    pub fn disagreements(&self, protocol: &BTreeMap<String, Value>) -> Vec<String> {
        let mut found = Vec::new();
        for (name, expected) in protocol {
            match self.constants.get(name) {
                Some(value) if value == expected => {}
                Some(value) => {
                    found.push(format!("{name} is {value}, the project's is {expected}"))
                }
                None => found.push(format!("{name} missing (the project's is {expected})")),
            }
        }
        found
    }
}
