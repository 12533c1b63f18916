package redislock.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.redisson.Redisson;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * The Redisson side of `make bench-peers` (bench/peers/): N clients in one JVM, each a
 * {@link RedissonClient} of its own on a thread of its own, looping acquire, hold H ms,
 * release on one lock, as Redisson's documentation shows it, with its defaults (the
 * watchdog's 30 s lease renewed every 10 s, waiting on pub/sub).
 *
 * <p>It speaks the protocol of bench/peers/clients.py and bench/src/peer.rs: `ready`
 * once every client is connected, then `go t0 t1 [first]` on stdin; at t1 one JSON line
 * per client, and the JVM ends wherever the clients are. With `first` each client
 * reports at its first grant (the dead-holder cell).
 *
 * <p>Kinds: `rlock` (RLock), `fairlock` (RFairLock), `semaphore` (RSemaphore, 3
 * permits), `rwlock` (RReadWriteLock: the N clients read, `--writers` more write).
 */
public final class RedissonPeer {
  /** What one client measured in [t0, t1]; guarded by its own monitor. */
  static final class Record {
    final String role;
    final List<Double> waitsUs = new ArrayList<>();
    double heldS;
    double waitingSince; // 0: not waiting
    double holdingSince; // 0: not holding
    long errors;

    Record(String role) {
      this.role = role;
    }

    synchronized String report(double t1) {
      // A thread may go on past t1 before the report is printed: what it began after
      // t1 is not in the window.
      double held = heldS + (holdingSince != 0 ? Math.max(0, t1 - holdingSince) : 0);
      StringBuilder out = new StringBuilder("{\"waits_us\":[");
      for (int i = 0; i < waitsUs.size(); i++) {
        out.append(i == 0 ? "" : ",").append(String.format(Locale.ROOT, "%.1f", waitsUs.get(i)));
      }
      out.append("],\"pending_us\":")
          .append(waitingSince != 0 && waitingSince < t1 ? String.format(Locale.ROOT, "%.1f", (t1 - waitingSince) * 1e6) : "null")
          .append(String.format(Locale.ROOT, ",\"held_s\":%.6f,\"errors\":%d", held, errors));
      if (role != null) {
        out.append(",\"role\":\"").append(role).append('"');
      }
      return out.append('}').toString();
    }
  }

  /** One client's way to take and give back the lock (on the calling thread). */
  interface Side {
    void acquire() throws InterruptedException;

    void release();
  }

  static double now() {
    Instant t = Instant.now();
    return t.getEpochSecond() + t.getNano() / 1e9;
  }

  static void sleepUntil(double at) throws InterruptedException {
    long leftNs = (long) ((at - now()) * 1e9);
    if (leftNs > 0) {
      TimeUnit.NANOSECONDS.sleep(leftNs);
    }
  }

  static RedissonClient connect(int port) {
    Config config = new Config();
    // Redisson's defaults, but for the idle connections each client opens at start
    // (24): 34 clients would open over 800 before the run. The pool still grows on
    // demand to its default 64; nothing of the lock's behaviour depends on it.
    config.useSingleServer().setAddress("redis://127.0.0.1:" + port).setConnectionMinimumIdleSize(1);
    return Redisson.create(config);
  }

  static Side side(RedissonClient client, String kind, String key, boolean writer) {
    switch (kind) {
      case "rlock":
        return lockSide(client.getLock(key));
      case "fairlock":
        return lockSide(client.getFairLock(key));
      case "rwlock":
        RReadWriteLock rw = client.getReadWriteLock(key);
        return lockSide(writer ? rw.writeLock() : rw.readLock());
      case "semaphore":
        RSemaphore semaphore = client.getSemaphore(key);
        return new Side() {
          public void acquire() throws InterruptedException {
            semaphore.acquire();
          }

          public void release() {
            semaphore.release();
          }
        };
      default:
        throw new IllegalArgumentException("unknown kind " + kind);
    }
  }

  static Side lockSide(org.redisson.api.RLock lock) {
    return new Side() {
      public void acquire() {
        lock.lock();
      }

      public void release() {
        lock.unlock();
      }
    };
  }

  static void loop(Side side, Record record, double t0, double t1, long holdMs, boolean first, CountDownLatch firsts) {
    try {
      sleepUntil(t0);
      while (true) {
        double asked = now();
        if (asked > t1) {
          return;
        }
        synchronized (record) {
          if (record.waitingSince == 0) {
            record.waitingSince = asked;
          }
        }
        try {
          side.acquire();
        } catch (RuntimeException e) { // a library error: count it and ask again
          synchronized (record) {
            record.errors++;
          }
          Thread.sleep(10);
          continue;
        }
        double granted = now();
        if (granted > t1) {
          // The report (printed a little after t1) counts this wait as open at t1;
          // the release lets the other clients of a warm-up end too.
          side.release();
          return;
        }
        synchronized (record) {
          record.waitsUs.add((granted - record.waitingSince) * 1e6);
          record.waitingSince = 0;
          record.holdingSince = granted;
        }
        if (first) {
          firsts.countDown();
          return;
        }
        if (holdMs > 0) {
          Thread.sleep(holdMs);
        }
        double done = now();
        synchronized (record) {
          record.heldS += Math.min(done, t1) - granted;
          record.holdingSince = 0;
        }
        try {
          side.release();
        } catch (RuntimeException e) {
          synchronized (record) {
            record.errors++;
          }
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * Runs the clients' loop for {@link #WARM_UP_S} before `ready`, so that the run
   * measures Redisson as a service that has been up a while runs it: classes and
   * scripts loaded, the hot paths compiled by the JIT.
   */
  static void warmUp(List<Side> sides, long holdMs) throws InterruptedException {
    double t0 = now();
    double t1 = t0 + WARM_UP_S;
    CountDownLatch unused = new CountDownLatch(0);
    List<Thread> threads = new ArrayList<>();
    for (Side side : sides) {
      Record scratch = new Record(null);
      Thread thread = new Thread(() -> loop(side, scratch, t0, t1, holdMs, false, unused));
      thread.start();
      threads.add(thread);
    }
    for (Thread thread : threads) {
      thread.join();
    }
  }

  static final double WARM_UP_S = 3.0;

  public static void main(String[] args) throws Exception {
    int port = 6379;
    int clients = 1;
    int writers = 0;
    long holdMs = 0;
    String key = "bench:peers";
    String kind = "rlock";
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--port" -> port = Integer.parseInt(args[i + 1]);
        case "--clients" -> clients = Integer.parseInt(args[i + 1]);
        case "--writers" -> writers = Integer.parseInt(args[i + 1]);
        case "--hold-ms" -> holdMs = Long.parseLong(args[i + 1]);
        case "--key" -> key = args[i + 1];
        case "--kind" -> kind = args[i + 1];
        default -> throw new IllegalArgumentException("unknown option " + args[i]);
      }
    }
    PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, StandardCharsets.UTF_8);
    boolean rw = kind.equals("rwlock");
    int total = clients + (rw ? writers : 0);
    List<Side> sides = new ArrayList<>();
    List<Record> records = new ArrayList<>();
    for (int i = 0; i < total; i++) {
      boolean writer = rw && i >= clients;
      RedissonClient client = connect(port);
      if (i == 0 && kind.equals("semaphore")) {
        client.getSemaphore(key).trySetPermits(3);
      }
      sides.add(side(client, kind, key, writer));
      records.add(new Record(rw ? (writer ? "writer" : "reader") : null));
    }
    // The dead-holder cell's holder holds for minutes: its warm-up must not.
    warmUp(sides, Math.min(holdMs, 100));
    out.println("ready");

    String line = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
    String[] fields = line == null ? new String[0] : line.trim().split("\\s+");
    if (fields.length < 3 || !fields[0].equals("go")) {
      System.err.println("expected `go <t0> <t1> [first]`, got " + line);
      Runtime.getRuntime().halt(1);
    }
    double t0 = Double.parseDouble(fields[1]);
    double t1 = Double.parseDouble(fields[2]);
    boolean first = fields.length > 3 && fields[3].equals("first");
    CountDownLatch firsts = new CountDownLatch(total);
    for (int i = 0; i < total; i++) {
      Side side = sides.get(i);
      Record record = records.get(i);
      long hold = holdMs;
      Thread thread = new Thread(() -> loop(side, record, t0, t1, hold, first, firsts), "client-" + i);
      thread.setDaemon(true);
      thread.start();
    }
    long leftNs = (long) ((t1 - now()) * 1e9);
    firsts.await(Math.max(0, leftNs), TimeUnit.NANOSECONDS);
    StringBuilder reports = new StringBuilder();
    for (Record record : records) {
      reports.append(record.report(t1)).append('\n');
    }
    out.print(reports);
    out.flush();
    // Ends the JVM at once, without unlocking or shutting the clients down.
    Runtime.getRuntime().halt(0);
  }
}
