//! The lease under faults: the holder's path is cut (a black-hole proxy, or the whole
//! server SIGSTOPped) while a rival waits for the lock on the server directly. Every
//! way of holding a lock must report the loss before the rival is granted it, and
//! the work must end within a bound, whatever the network does.
//!
//! `cargo test -p redis-lock-client --test lease -- --nocapture` prints, per
//! scenario, when the loss signal fired and when the rival was granted the lock.

use redis_lock_testkit as common;

#[path = "support/backend.rs"]
mod on_backend;

use std::thread;
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::Server;
use on_backend::{AsyncLockCommands, LockCommands};
use redis::aio::ConnectionLike;
use redis::AsyncConnectionConfig;
use redis_lock_client::{AsyncRenewer, LockClient, Renewer, Request, Wait};

/// Long enough that the 10% margin (200 ms) dwarfs a noisy machine's scheduling.
const TTL: Duration = Duration::from_secs(2);
const KEY: &str = "job";

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The holder's proxy drops every byte; the server runs on.
    BlackHole,
    /// The server is stopped for longer than the TTL, then continued.
    Pause,
}

/// How the holder holds the lock.
#[derive(Debug, Clone, Copy)]
enum Holder {
    /// `AsyncLockCommands::run_locked` on a multiplexed connection without a
    /// response timeout (what waits used to need).
    RunLockedNoTimeout,
    /// The same, with redis-rs's default 500 ms response timeout.
    RunLockedDefaultTimeout,
    /// `AsyncLockCommands::run_locked` on a ConnectionManager.
    RunLockedManager,
    /// `LockClient::run_locked`: renewals on a connection of their own.
    RunLockedClient,
    /// A blocking lock and the blocking `Renewer`, the work in a thread.
    BlockingRenewer,
    /// An async guard with `AsyncRenewer`, on a multiplexed connection.
    GuardRenewerPlain,
    /// An async guard with `AsyncRenewer`, on a ConnectionManager.
    GuardRenewerManager,
    /// A `LockClient` guard with its renewer.
    GuardRenewerClient,
}

/// When things happened, as the holder saw them.
struct Seen {
    lost: Instant,
    ended: Instant,
}

/// Holds the lock as `holder` says through `client`, tells `acquired` once it holds
/// it, and waits for the loss signal; `ended` is when the work's future (or thread)
/// and the lock's wrap-up returned.
async fn hold(
    holder: Holder,
    client: redis::Client,
    acquired: tokio::sync::oneshot::Sender<()>,
) -> Seen {
    let request = Request::new(KEY, TTL);
    let mut acquired = Some(acquired);
    let mut told = move || {
        if let Some(tx) = acquired.take() {
            let _ = tx.send(());
        }
    };
    match holder {
        Holder::RunLockedNoTimeout | Holder::RunLockedDefaultTimeout | Holder::RunLockedManager => {
            let mut con: Box<dyn Held> = match holder {
                Holder::RunLockedNoTimeout => {
                    let config = AsyncConnectionConfig::new().set_response_timeout(None);
                    Box::new(
                        client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await
                            .unwrap(),
                    )
                }
                Holder::RunLockedDefaultTimeout => {
                    Box::new(client.get_multiplexed_async_connection().await.unwrap())
                }
                _ => Box::new(client.get_connection_manager().await.unwrap()),
            };
            con.hold_in_run_locked(request, &mut told).await
        }
        Holder::RunLockedClient => {
            let locks = LockClient::new(client);
            let done = locks
                .run_locked_with(request, |_lock, lost| async move {
                    told();
                    lost.lost().await;
                    Instant::now()
                })
                .await
                .unwrap()
                .expect("free");
            assert!(!done.held_to_end);
            Seen {
                lost: done.value,
                ended: Instant::now(),
            }
        }
        Holder::BlockingRenewer => tokio::task::spawn_blocking(move || {
            let mut con = client.get_connection().unwrap();
            let lock = con.acquire_with(request).unwrap().expect("free");
            let renewer = Renewer::start(client, &lock);
            told();
            let work = thread::spawn(move || {
                while !renewer.is_lost() {
                    thread::sleep(Duration::from_millis(2));
                }
                let lost = Instant::now();
                let stopping = Instant::now();
                renewer.stop();
                let stopped = stopping.elapsed();
                assert!(
                    stopped < Duration::from_millis(400),
                    "stop() took {stopped:?}"
                );
                lost
            });
            let lost = work.join().unwrap();
            Seen {
                lost,
                ended: Instant::now(),
            }
        })
        .await
        .unwrap(),
        Holder::GuardRenewerPlain | Holder::GuardRenewerManager => {
            let mut con: Box<dyn Held> = if matches!(holder, Holder::GuardRenewerPlain) {
                Box::new(client.get_multiplexed_async_connection().await.unwrap())
            } else {
                Box::new(client.get_connection_manager().await.unwrap())
            };
            con.hold_with_guard(request, &mut told).await
        }
        Holder::GuardRenewerClient => {
            let locks = LockClient::new(client);
            let guard = locks.lock_guard_with(request).await.unwrap().expect("free");
            let renewer = locks.renewer(guard.lock());
            told();
            renewer.signal().lost().await;
            let lost = Instant::now();
            renewer.stop();
            drop(guard); // its release is spawned, not awaited
            Seen {
                lost,
                ended: Instant::now(),
            }
        }
    }
}

/// The async holders that differ only in their connection.
trait Held: Send {
    fn hold_in_run_locked<'a>(
        &'a mut self,
        request: Request,
        told: &'a mut (dyn FnMut() + Send),
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Seen> + Send + 'a>>;

    fn hold_with_guard<'a>(
        &'a mut self,
        request: Request,
        told: &'a mut (dyn FnMut() + Send),
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Seen> + Send + 'a>>;
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Held for C {
    fn hold_in_run_locked<'a>(
        &'a mut self,
        request: Request,
        told: &'a mut (dyn FnMut() + Send),
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Seen> + Send + 'a>> {
        Box::pin(async move {
            let done = self
                .run_locked_with(request, |_lock, lost| async move {
                    told();
                    lost.lost().await;
                    Instant::now()
                })
                .await
                .unwrap()
                .expect("free");
            assert!(!done.held_to_end);
            Seen {
                lost: done.value,
                ended: Instant::now(),
            }
        })
    }

    fn hold_with_guard<'a>(
        &'a mut self,
        request: Request,
        told: &'a mut (dyn FnMut() + Send),
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Seen> + Send + 'a>> {
        Box::pin(async move {
            let guard = self.lock_guard_with(request).await.unwrap().expect("free");
            let renewer = AsyncRenewer::start(self.clone(), guard.lock());
            told();
            guard.signal().lost().await;
            let lost = Instant::now();
            assert!(renewer.stop());
            drop(guard);
            Seen {
                lost,
                ended: Instant::now(),
            }
        })
    }
}

/// Continues a stopped server when dropped, also when the test fails.
struct Resume<'a>(&'a Server);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.resume();
    }
}

/// A rival on its own direct connection, waiting for the lock (`LOCK.ACQUIRE … WAIT`,
/// or the library's waiting protocol), and when it was granted.
fn rival(server: &Server) -> thread::JoinHandle<Instant> {
    let mut con = server.connection();
    thread::spawn(move || {
        let request = Request::new(KEY, Duration::from_secs(60))
            .owner("rival")
            .wait(Duration::from_secs(20));
        let token = con.acquire_with(request).expect("the rival's wait");
        assert!(
            token.is_some(),
            "the rival was granted the lock within 20 s"
        );
        Instant::now()
    })
}

fn waiters(server: &Server) -> u64 {
    server
        .connection()
        .lock_info(KEY)
        .unwrap()
        .map_or(0, |info| info.waiters)
}

fn scenario(holder: Holder, fault: Fault) {
    let server = common::lock_server();
    let proxy = Proxy::start(server.port);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (acquired, is_acquired) = tokio::sync::oneshot::channel();
    let held = runtime.spawn(hold(holder, proxy.client(), acquired));
    runtime
        .block_on(is_acquired)
        .expect("the holder acquired the lock");
    let rival = rival(&server);
    common::wait_until(Duration::from_secs(5), || waiters(&server) == 1);
    // Let a renewal or two go through before the cut.
    thread::sleep(TTL / 2);
    let cut = Instant::now();
    let _resume = match fault {
        Fault::BlackHole => {
            proxy.black_hole();
            None
        }
        Fault::Pause => {
            server.pause();
            Some(Resume(&server))
        }
    };
    if let Fault::Pause = fault {
        thread::sleep(TTL + Duration::from_millis(500));
        drop(_resume);
    }
    let bound = TTL * 2;
    let seen = runtime
        .block_on(async { tokio::time::timeout(cut + bound - Instant::now(), held).await })
        .unwrap_or_else(|_| {
            panic!("{holder:?} / {fault:?}: the work did not end within {bound:?} of the cut")
        })
        .unwrap();
    let granted = rival.join().unwrap();
    println!(
        "{holder:?} / {fault:?}: loss signal {:?} after the cut, rival granted {:?} after it: \
         the holder knew {:?} before the rival could write",
        seen.lost - cut,
        granted - cut,
        granted.saturating_duration_since(seen.lost)
    );
    assert!(
        seen.lost < granted,
        "{holder:?} / {fault:?}: the rival was granted the lock {:?} before the holder's loss signal",
        seen.lost - granted
    );
    assert!(seen.ended - cut < bound);
}

macro_rules! scenarios {
    ($($name:ident: $holder:ident, $fault:ident;)*) => {
        $(
            #[test]
            fn $name() {
                scenario(Holder::$holder, Fault::$fault);
            }
        )*
    };
}

scenarios! {
    run_locked_without_response_timeout_black_hole: RunLockedNoTimeout, BlackHole;
    run_locked_without_response_timeout_paused_server: RunLockedNoTimeout, Pause;
    run_locked_with_default_timeout_black_hole: RunLockedDefaultTimeout, BlackHole;
    run_locked_on_a_connection_manager_black_hole: RunLockedManager, BlackHole;
    run_locked_on_a_connection_manager_paused_server: RunLockedManager, Pause;
    run_locked_of_a_lock_client_black_hole: RunLockedClient, BlackHole;
    run_locked_of_a_lock_client_paused_server: RunLockedClient, Pause;
    blocking_renewer_black_hole: BlockingRenewer, BlackHole;
    blocking_renewer_paused_server: BlockingRenewer, Pause;
    guard_with_renewer_on_a_plain_connection_black_hole: GuardRenewerPlain, BlackHole;
    guard_with_renewer_on_a_plain_connection_paused_server: GuardRenewerPlain, Pause;
    guard_with_renewer_on_a_connection_manager_black_hole: GuardRenewerManager, BlackHole;
    guard_with_renewer_on_a_connection_manager_paused_server: GuardRenewerManager, Pause;
    guard_with_renewer_of_a_lock_client_black_hole: GuardRenewerClient, BlackHole;
}

/// A delay shorter than a renewal period costs nothing; one longer than the lease
/// makes the holder give up before the rival gets the lock (the late extends and
/// the release still reach the server, later).
#[test]
fn a_delayed_path_keeps_the_lock_or_loses_it_before_the_rival() {
    let server = common::lock_server();
    let proxy = Proxy::start(server.port);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    proxy.delay(Duration::from_millis(100));
    let locks = LockClient::new(proxy.client());
    let done = runtime
        .block_on(
            locks.run_locked(KEY, TTL, Wait::No, |_lock, lost| async move {
                tokio::time::sleep(TTL * 3 / 2).await;
                lost.is_lost()
            }),
        )
        .unwrap()
        .unwrap();
    assert!(
        !done.value && done.held_to_end,
        "renewed through a 200 ms round trip"
    );
    proxy.delay(Duration::ZERO);

    let (acquired, is_acquired) = tokio::sync::oneshot::channel();
    let client = proxy.client();
    let held = runtime.spawn(async move {
        let locks = LockClient::new(client);
        locks
            .run_locked(KEY, TTL, Wait::No, |_lock, lost| async move {
                let _ = acquired.send(());
                lost.lost().await;
                Instant::now()
            })
            .await
            .unwrap()
            .unwrap()
    });
    runtime.block_on(is_acquired).unwrap();
    let rival = rival(&server);
    common::wait_until(Duration::from_secs(5), || waiters(&server) == 1);
    let cut = Instant::now();
    proxy.delay(Duration::from_millis(1_500)); // a round trip of 3 s, past the lease
    let done = runtime.block_on(held).unwrap();
    let granted = rival.join().unwrap();
    println!(
        "delay 1.5 s each way: loss signal {:?} after the delay began, rival granted {:?} after it",
        done.value - cut,
        granted - cut
    );
    assert!(done.value < granted);
    assert!(!done.held_to_end);
}

/// What the server holds for `KEY` now: the holder's owner and the TTL left.
fn held_by(server: &Server) -> Option<(String, Duration)> {
    let info = server.connection().lock_info(KEY).unwrap()?;
    let owner = info.owner.as_str().unwrap_or_default().to_string();
    Some((owner, info.ttl.unwrap_or_default()))
}

/// A background renewal with the old TTL (3 s), held back in the network, reaches
/// the server after the holder's own extend to 30 s (sent on a connection of its
/// own, answered first), and sets the lock's TTL last. The lease may not outlast
/// what the server then keeps: when the path is cut, the holder is told before the
/// rival waiting in the server is granted the lock.
///
/// The hold starts after the first renewal, so that what it keeps back is a renewal
/// on the renewer's open connection. (Held earlier, it would keep back that
/// connection's set-up, redis-rs's `CLIENT SETINFO`, and the renewal would only be
/// written after the extend: the server would apply them in the order sent.)
#[test]
fn a_renewal_applied_after_a_longer_extend_bounds_the_lease() {
    let server = common::lock_server();
    let proxy = Proxy::start(server.port);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let locks = LockClient::new(proxy.client());
    let ttl = Duration::from_millis(3_000);
    let asked = Instant::now();
    let lock = runtime
        .block_on(locks.acquire(KEY, ttl, Wait::No))
        .unwrap()
        .expect("free");
    let _renewer = runtime.block_on(async { locks.renewer(&lock) });
    let rival = rival(&server);
    common::wait_until(Duration::from_secs(5), || waiters(&server) == 1);
    thread::sleep((asked + ttl * 13 / 30).saturating_duration_since(Instant::now()));
    proxy.hold(); // the renewal due at 2 s is kept back
    thread::sleep((asked + ttl * 22 / 30).saturating_duration_since(Instant::now()));
    let extend = {
        let (locks, lock) = (locks.clone(), lock.clone());
        runtime.spawn(async move { locks.extend(&lock, Duration::from_secs(30)).await })
    };
    thread::sleep(Duration::from_millis(100));
    assert_eq!(
        proxy.release_reversed(Duration::from_millis(100)),
        2,
        "the renewal's and the extend's connections had commands held back"
    );
    assert!(runtime.block_on(extend).unwrap().unwrap(), "extended");
    let (owner, left) = held_by(&server).expect("held");
    assert_eq!(owner, lock.owner());
    assert!(
        left <= ttl,
        "the renewal reached the server last and set its TTL: {left:?} left"
    );
    assert!(
        lock.valid_until() <= Instant::now() + left,
        "the lease ({:?} left) outlasts what the server keeps ({left:?})",
        lock.remaining()
    );
    let cut = Instant::now();
    proxy.black_hole();
    let lost = runtime.block_on(async {
        let lost = tokio::time::timeout(Duration::from_secs(10), lock.signal().lost()).await;
        lost.map(|()| Instant::now())
    });
    let granted = rival.join().unwrap();
    let lost = lost.unwrap_or_else(|_| {
        panic!(
            "no loss signal within 10 s of the cut; the rival was granted {:?} after it",
            granted - cut
        )
    });
    println!(
        "reordered renewal: loss signal {:?} after the cut, rival granted {:?} after it",
        lost - cut,
        granted - cut
    );
    assert!(lost < granted, "the rival was granted the lock first");
}

/// How a holder renews, for the extend to a shorter TTL.
#[derive(Debug, Clone, Copy)]
enum Renewing {
    LockClient,
    AsyncRenewer,
    BlockingRenewer,
}

/// After an extend from 30 s to 1.2 s the holding is renewed at a third of 1.2 s:
/// a healthy holder keeps it, whoever renews it.
fn extend_to_a_shorter_ttl(renewing: Renewing) {
    let server = common::lock_server();
    let long = Duration::from_secs(30);
    let short = Duration::from_millis(1_200);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let lock = match renewing {
        Renewing::LockClient => runtime.block_on(async {
            let locks = LockClient::new(server.client());
            let lock = locks.acquire(KEY, long, Wait::No).await.unwrap().unwrap();
            let renewer = locks.renewer(&lock);
            assert!(locks.extend(&lock, short).await.unwrap());
            (lock, Box::new(renewer) as Box<dyn std::any::Any>)
        }),
        Renewing::AsyncRenewer => runtime.block_on(async {
            let mut con = server
                .client()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let lock = AsyncLockCommands::try_acquire(&mut con, KEY, long)
                .await
                .unwrap()
                .unwrap();
            let renewer = AsyncRenewer::start(con.clone(), &lock);
            assert!(AsyncLockCommands::extend(&mut con, &lock, short)
                .await
                .unwrap());
            (lock, Box::new(renewer) as Box<dyn std::any::Any>)
        }),
        Renewing::BlockingRenewer => {
            let mut con = server.connection();
            let lock = LockCommands::try_acquire(&mut con, KEY, long)
                .unwrap()
                .unwrap();
            let renewer = Renewer::start(server.client(), &lock);
            assert!(LockCommands::extend(&mut con, &lock, short).unwrap());
            (lock, Box::new(renewer) as Box<dyn std::any::Any>)
        }
    };
    let (lock, _renewer) = lock;
    assert_eq!(lock.ttl(), short);
    thread::sleep(short * 3);
    assert!(
        !lock.is_lost(),
        "{renewing:?}: lost after an extend to {short:?}: {:?}",
        lock.cause()
    );
    let (owner, left) = held_by(&server).expect("still held in the server");
    assert_eq!(owner, lock.owner());
    assert!(
        left <= short,
        "renewed with the TTL asked for last: {left:?}"
    );
}

#[test]
fn an_extend_to_a_shorter_ttl_renews_at_a_third_of_it_lock_client() {
    extend_to_a_shorter_ttl(Renewing::LockClient);
}

#[test]
fn an_extend_to_a_shorter_ttl_renews_at_a_third_of_it_async_renewer() {
    extend_to_a_shorter_ttl(Renewing::AsyncRenewer);
}

#[test]
fn an_extend_to_a_shorter_ttl_renews_at_a_third_of_it_blocking_renewer() {
    extend_to_a_shorter_ttl(Renewing::BlockingRenewer);
}
