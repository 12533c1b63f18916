//! A TCP proxy in front of a test server, for network faults: it can black-hole
//! traffic (sockets stay open, every byte in both directions is dropped, as in a
//! partition where nothing answers and nothing resets) and delay it (each chunk is
//! passed on a fixed time after it arrived).
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

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
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
}

/// One proxied connection: both sockets, whether bytes of it were dropped, and how
/// many of its two directions are still being forwarded.
struct Link {
    client: TcpStream,
    server: TcpStream,
    dropped: Arc<AtomicBool>,
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

    /// Ends a black hole and any delay. Connections that lost bytes are closed
    /// (their streams are broken), so clients see an error and reconnect.
    pub fn heal(&self) {
        self.shared.delay_us.store(0, Ordering::SeqCst);
        self.shared.black_hole.store(false, Ordering::SeqCst);
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

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
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
    let forwarding = Arc::new(AtomicUsize::new(2));
    let (Ok(client_in), Ok(server_in), Ok(client_out), Ok(server_out)) = (
        client.try_clone(),
        server.try_clone(),
        client.try_clone(),
        server.try_clone(),
    ) else {
        return;
    };
    forward(shared, client_in, server_out, &dropped, &forwarding);
    forward(shared, server_in, client_out, &dropped, &forwarding);
    let mut links = shared.links.lock().unwrap_or_else(|e| e.into_inner());
    // Connections both of whose directions ended hold nothing but their sockets:
    // keeping them would use up the process's file descriptors in a long run.
    links.retain(|link| link.forwarding.load(Ordering::SeqCst) > 0);
    links.push(Link {
        client,
        server,
        dropped,
        forwarding,
    });
}

/// Copies `from` to `to` in two threads: one reads and stamps each chunk, the other
/// holds it for the delay and then writes it, or drops it in a black hole.
fn forward(
    shared: &Arc<Shared>,
    mut from: TcpStream,
    mut to: TcpStream,
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
            if shared.black_hole.load(Ordering::SeqCst) {
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
