//! The tracing events a holder can follow its lock by: acquired, renewal failed,
//! lost, released. A test binary of its own, so that no other test's thread
//! registers the crate's event callsites while no subscriber listens.

use redis_lock_testkit as common;

#[path = "support/backend.rs"]
mod on_backend;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::proxy::Proxy;
use redis_lock_client::{LockClient, Request, Wait};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Every event's level and message, as a `tracing` subscriber sees them.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

impl Captured {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Captured {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if !event.metadata().target().starts_with("redis_lock_client") {
            return;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        let line = format!("{} {}", event.metadata().level(), message.0);
        self.0.lock().unwrap().push(line);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn acquire_renewal_failure_loss_and_release_are_traced() {
    let server = common::lock_server();
    let proxy = Proxy::start(server.port);
    let captured = Captured::default();
    let _default = tracing::subscriber::set_default(captured.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let locks = LockClient::new(proxy.client());
        let ttl = Duration::from_millis(600);
        let lock = locks
            .acquire_with(Request::new("job", ttl))
            .await
            .unwrap()
            .unwrap();
        let renewer = locks.renewer(&lock);
        proxy.black_hole();
        renewer.signal().lost().await;
        // The renewer logs the failed attempt and the loss as the lease ends.
        let logged = |lines: Vec<String>| lines.iter().any(|l| l.starts_with("WARN lock lost"));
        for _ in 0..200 {
            if logged(captured.lines()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        renewer.stop();
        proxy.heal();
        let other = locks
            .acquire("other", ttl, Wait::No)
            .await
            .unwrap()
            .unwrap();
        assert!(locks.release(&other).await.unwrap());
    });
    let lines = captured.lines();
    let has = |prefix: &str| lines.iter().any(|l| l.starts_with(prefix));
    assert!(has("DEBUG lock acquired"), "{lines:#?}");
    assert!(has("WARN lock renewal failed"), "{lines:#?}");
    assert!(has("WARN lock lost"), "{lines:#?}");
    assert!(has("DEBUG lock released"), "{lines:#?}");
}
