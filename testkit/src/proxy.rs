//! A TCP proxy in front of a test server, for network faults: it can black-hole
//! traffic (sockets stay open, every byte in both directions is dropped, as in a
//! partition where nothing answers and nothing resets), drop only the replies (the
//! server acts on every command and no answer comes back), delay it (each chunk is
//! passed on a fixed time after it arrived), and hold the commands of every
//! connection back to pass them on later in the reverse order of their sending (two
//! commands sent one after the other on two connections reach the server the other
//! way round, as a network that delays one path may do).
//!
//! ```no_run
//! use redis_lock_testkit::{proxy::Proxy, Server};
//!
//! let server = Server::start();
//! let proxy = Proxy::start(server.port);
//! let client = proxy.client(); // reaches the server through the proxy
//! proxy.black_hole();          // from now on, nothing gets through either way
//! proxy.heal();                // traffic passes again, on new connections
//! ```

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// A proxy on a free loopback port, forwarding to `127.0.0.1:upstream`. Stops and
/// closes its connections when dropped.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    black_hole: AtomicBool,
    delay_us: AtomicU64,
    stopped: AtomicBool,
    links: Mutex<Vec<Link>>,
    /// Numbers the links, for the hold.
    next_link: AtomicU64,
    hold: Mutex<Hold>,
    /// Wakes the commands a hold keeps back when it ends.
    held: Condvar,
}

/// Commands kept back on their way to the server.
#[derive(Default)]
struct Hold {
    on: bool,
    /// The links that have commands kept back, in the order their first one came.
    order: Vec<u64>,
    /// When each link's commands may go on, once the hold ended.
    go: HashMap<u64, Instant>,
}

/// One proxied connection: both sockets, whether bytes of it were dropped, and how
/// many of its two directions are still being forwarded.
struct Link {
    client: TcpStream,
    server: TcpStream,
    dropped: Arc<AtomicBool>,
    /// The server's bytes are dropped (its commands still reach it).
    replies_dropped: Arc<AtomicBool>,
    forwarding: Arc<AtomicUsize>,
}

impl Link {
    fn close(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }
}

impl Proxy {
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy port");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared::default());
        let accepting = Arc::clone(&shared);
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                link(&accepting, client, server);
            }
        });
        Proxy { port, shared }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    /// From now on every byte, either way, on every connection (new ones too), is
    /// read and dropped; nothing is closed.
    pub fn black_hole(&self) {
        self.shared.black_hole.store(true, Ordering::SeqCst);
    }

    /// Passes each chunk on `delay` after it arrived (both ways).
    pub fn delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_us.store(us, Ordering::SeqCst);
    }

    /// From now on every byte the server sends on the connections open now is
    /// dropped; what clients send on them still reaches the server, which acts on it
    /// (a lost reply). New connections are not touched, so a client that sends its
    /// command on a new one has nothing lost.
    pub fn drop_replies(&self) {
        let links = self.shared.links.lock().unwrap_or_else(|e| e.into_inner());
        for link in links.iter() {
            link.replies_dropped.store(true, Ordering::SeqCst);
        }
    }

    /// From now on what clients send is kept back, on every connection (new ones
    /// too), until `release_reversed`; replies pass.
    pub fn hold(&self) {
        let mut hold = self.shared.hold();
        hold.on = true;
        hold.order.clear();
        hold.go.clear();
    }

    /// Ends a hold: the connection whose commands were kept back last passes them
    /// on first, the one before it `gap` later, and so on, so the server reads them
    /// in the reverse order of their sending. Returns once all have been passed on,
    /// with the number of connections that had commands kept back.
    pub fn release_reversed(&self, gap: Duration) -> usize {
        let now = Instant::now();
        let mut hold = self.shared.hold();
        hold.on = false;
        let order = std::mem::take(&mut hold.order);
        let mut last = now;
        for (rank, link) in order.iter().rev().enumerate() {
            let go = now + gap * u32::try_from(rank).unwrap_or(u32::MAX);
            hold.go.insert(*link, go);
            last = go;
        }
        drop(hold);
        self.shared.held.notify_all();
        // A moment for the last connection's bytes to be written.
        thread::sleep((last + Duration::from_millis(20)).saturating_duration_since(now));
        order.len()
    }

    /// Ends a black hole, a hold, dropped replies and any delay. Connections that lost
    /// bytes are closed (their streams are broken), so clients see an error and
    /// reconnect.
    pub fn heal(&self) {
        self.shared.delay_us.store(0, Ordering::SeqCst);
        self.shared.black_hole.store(false, Ordering::SeqCst);
        {
            let mut hold = self.shared.hold();
            hold.on = false;
            hold.order.clear();
            hold.go.clear();
        }
        self.shared.held.notify_all();
        let mut links = self.shared.links.lock().unwrap_or_else(|e| e.into_inner());
        links.retain(|link| {
            let broken = link.dropped.load(Ordering::SeqCst);
            if broken {
                link.close();
            }
            !broken
        });
    }
}

impl Shared {
    fn hold(&self) -> MutexGuard<'_, Hold> {
        self.hold.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks a command of `link` while a hold keeps it back, then until its turn.
    fn wait_for_turn(&self, link: u64) {
        let mut hold = self.hold();
        if hold.on && !hold.go.contains_key(&link) {
            if !hold.order.contains(&link) {
                hold.order.push(link);
            }
            while hold.on && !hold.go.contains_key(&link) && !self.stopped.load(Ordering::SeqCst) {
                hold = self
                    .held
                    .wait_timeout(hold, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        let go = hold.go.get(&link).copied();
        drop(hold);
        if let Some(go) = go {
            thread::sleep(go.saturating_duration_since(Instant::now()));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.held.notify_all();
        let links = self.shared.links.lock().unwrap_or_else(|e| e.into_inner());
        for link in links.iter() {
            link.close();
        }
        // Wakes the accepting thread, which then sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn link(shared: &Arc<Shared>, client: TcpStream, server: TcpStream) {
    // As Redis does on its own sockets: without it, Nagle's algorithm holds a small
    // write back until the previous one is acknowledged, and delayed ACKs make that
    // up to 40 ms per round trip (a replica's acknowledgement for WAIT, say).
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let dropped = Arc::new(AtomicBool::new(false));
    let replies_dropped = Arc::new(AtomicBool::new(false));
    let forwarding = Arc::new(AtomicUsize::new(2));
    let (Ok(client_in), Ok(server_in), Ok(client_out), Ok(server_out)) = (
        client.try_clone(),
        server.try_clone(),
        client.try_clone(),
        server.try_clone(),
    ) else {
        return;
    };
    let id = shared.next_link.fetch_add(1, Ordering::SeqCst);
    forward(
        shared,
        client_in,
        server_out,
        Way::ToServer(id),
        &dropped,
        &forwarding,
    );
    let to_client = Way::ToClient(Arc::clone(&replies_dropped));
    forward(
        shared,
        server_in,
        client_out,
        to_client,
        &dropped,
        &forwarding,
    );
    let mut links = shared.links.lock().unwrap_or_else(|e| e.into_inner());
    // Connections both of whose directions ended hold nothing but their sockets:
    // keeping them would use up the process's file descriptors in a long run.
    links.retain(|link| link.forwarding.load(Ordering::SeqCst) > 0);
    links.push(Link {
        client,
        server,
        dropped,
        replies_dropped,
        forwarding,
    });
}

/// Which way a copy goes: commands, on the link numbered so, or replies, with the
/// link's flag that drops them.
enum Way {
    ToServer(u64),
    ToClient(Arc<AtomicBool>),
}

/// Copies `from` to `to` in two threads: one reads and stamps each chunk, the other
/// holds it for the delay (and a hold) and then writes it, or drops it in a black
/// hole.
fn forward(
    shared: &Arc<Shared>,
    mut from: TcpStream,
    mut to: TcpStream,
    way: Way,
    dropped: &Arc<AtomicBool>,
    forwarding: &Arc<AtomicUsize>,
) {
    let (chunks, queued) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf) {
            if chunks.send((Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    let shared = Arc::clone(shared);
    let (dropped, forwarding) = (Arc::clone(dropped), Arc::clone(forwarding));
    thread::spawn(move || {
        for (arrived, bytes) in queued {
            let delay = Duration::from_micros(shared.delay_us.load(Ordering::SeqCst));
            let due = arrived + delay;
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
            let dropping = match &way {
                Way::ToServer(link) => {
                    shared.wait_for_turn(*link);
                    false
                }
                Way::ToClient(replies_dropped) => replies_dropped.load(Ordering::SeqCst),
            };
            if dropping || shared.black_hole.load(Ordering::SeqCst) {
                dropped.store(true, Ordering::SeqCst);
                continue;
            }
            if to.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
        forwarding.fetch_sub(1, Ordering::SeqCst);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server: what the proxy forwards comes back.
    fn echo() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                thread::spawn(move || {
                    let mut out = stream.try_clone().unwrap();
                    let mut stream = stream;
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = stream.read(&mut buf) {
                        let _ = out.write_all(&buf[..n]);
                    }
                });
            }
        });
        port
    }

    fn round_trip(con: &mut TcpStream) -> std::io::Result<Duration> {
        let started = Instant::now();
        con.write_all(b"ping")?;
        let mut buf = [0u8; 4];
        con.read_exact(&mut buf)?;
        assert_eq!(&buf, b"ping");
        Ok(started.elapsed())
    }

    #[test]
    fn a_black_hole_drops_bytes_but_keeps_the_socket_open() {
        let proxy = Proxy::start(echo());
        let mut con = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        con.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        round_trip(&mut con).unwrap();
        proxy.black_hole();
        let error = round_trip(&mut con).unwrap_err();
        assert!(
            matches!(
                error.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "no reply, and no reset: {error:?}"
        );
        proxy.heal();
        let mut fresh = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        fresh
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        round_trip(&mut fresh).unwrap();
    }

    #[test]
    fn a_delay_holds_each_chunk_back() {
        let proxy = Proxy::start(echo());
        proxy.delay(Duration::from_millis(100));
        let mut con = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let took = round_trip(&mut con).unwrap();
        assert!(took >= Duration::from_millis(200), "{took:?}: both ways");
    }

    #[test]
    fn dropped_replies_let_commands_through() {
        let proxy = Proxy::start(echo());
        let mut con = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        con.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        round_trip(&mut con).unwrap();
        proxy.drop_replies();
        round_trip(&mut con).unwrap_err();
        let mut fresh = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        fresh
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        round_trip(&mut fresh).expect("a new connection is not touched");
        proxy.heal();
        let mut buf = [0u8; 4];
        let closed = con.read(&mut buf);
        assert!(
            matches!(closed, Ok(0) | Err(_)),
            "a connection that lost a reply is closed by heal: {closed:?}"
        );
    }

    /// A server that records which connection each byte came on, in arrival order.
    fn recorder() -> (u16, Arc<Mutex<Vec<u8>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let record = Arc::clone(&record);
                thread::spawn(move || {
                    let mut stream = stream;
                    let mut buf = [0u8; 64];
                    while let Ok(n @ 1..) = stream.read(&mut buf) {
                        record.lock().unwrap().extend_from_slice(&buf[..n]);
                    }
                });
            }
        });
        (port, seen)
    }

    #[test]
    fn a_hold_passes_commands_on_in_the_reverse_order_of_their_sending() {
        let (port, seen) = recorder();
        let proxy = Proxy::start(port);
        let mut first = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        let mut second = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        proxy.hold();
        first.write_all(b"a").unwrap();
        thread::sleep(Duration::from_millis(50));
        second.write_all(b"b").unwrap();
        thread::sleep(Duration::from_millis(100));
        assert!(seen.lock().unwrap().is_empty(), "nothing passes while held");
        assert_eq!(proxy.release_reversed(Duration::from_millis(50)), 2);
        thread::sleep(Duration::from_millis(50));
        assert_eq!(&*seen.lock().unwrap(), b"ba");
        first.write_all(b"c").unwrap();
        thread::sleep(Duration::from_millis(100));
        assert_eq!(&*seen.lock().unwrap(), b"bac", "after the hold, bytes pass");
    }

    #[test]
    fn connections_that_ended_are_let_go() {
        let proxy = Proxy::start(echo());
        for _ in 0..200 {
            let mut con = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
            con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            round_trip(&mut con).unwrap();
        }
        thread::sleep(Duration::from_millis(200));
        let mut last = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        last.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        round_trip(&mut last).unwrap();
        let kept = proxy.shared.links.lock().unwrap().len();
        assert!(kept < 10, "{kept} links kept for 1 open connection");
    }
}
