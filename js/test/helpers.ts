/**
 * Real servers for the tests: redis-server on free loopback ports, each in a
 * directory of its own, with the module (REDIS_LOCK_MODULE, else the debug build
 * ../target/debug/libredis_lock.so that `make test` builds), or plain with the
 * library loaded; a 3-master Cluster; a black-hole proxy; a PostgreSQL of the
 * tests' own (tests/postgres/start); and the four Redis clients the package
 * supports (ioredis 6 and 5, node-redis 6 and 4).
 */
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server as NetServer, type Socket, connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";

import { Cluster as IOCluster, Redis as IORedis } from "ioredis";
import { Cluster as IOCluster5, Redis as IORedis5 } from "ioredis5";
import { createClient, createCluster } from "redis";
import { createClient as createClient4, createCluster as createCluster4 } from "redis4";

const here = dirname(fileURLToPath(import.meta.url));
/** The repository root: build/test/ or test/ under js/. */
export const ROOT = [resolve(here, "../.."), resolve(here, "../../..")].find((dir) =>
  existsSync(join(dir, "lua/redislock.lua")),
) as string;
export const LIBRARY_FILE = join(ROOT, "lua/redislock.lua");
/** Redis 6.2 for the scripts path: REDIS62_SERVER, else the build `make deps` makes. */
export const REDIS62 = process.env["REDIS62_SERVER"] ?? join(ROOT, "target/redis-6.2/redis-server");

export function modulePath(): string {
  const path = process.env["REDIS_LOCK_MODULE"] ?? join(ROOT, "target/debug/libredis_lock.so");
  if (!existsSync(path)) {
    throw new Error(`${path} is missing: run cargo build (make test-js builds it) or set REDIS_LOCK_MODULE`);
  }
  return path;
}

export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.unref();
    server.on("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? ok(address.port) : fail(new Error("no port"))));
    });
  });
}

/** A raw RESP call on a socket of its own: for readiness and admin, independent of
 * the clients under test. */
export function raw(port: number, args: string[], timeoutMs = 5000): Promise<string> {
  return new Promise((ok, fail) => {
    const socket = connect(port, "127.0.0.1");
    let data = "";
    const timer = setTimeout(() => {
      socket.destroy();
      fail(new Error(`no reply to ${args[0]} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.on("error", (error) => {
      clearTimeout(timer);
      fail(error);
    });
    socket.on("data", (chunk) => {
      data += chunk.toString();
      if (complete(data)) {
        clearTimeout(timer);
        socket.destroy();
        ok(data);
      }
    });
    socket.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("")}`);
  });
}

/** Whether `data` holds one whole RESP2 reply. */
function complete(data: string): boolean {
  let at = 0;
  const one = (): boolean => {
    const end = data.indexOf("\r\n", at);
    if (end < 0) return false;
    const type = data[at];
    const head = data.slice(at + 1, end);
    at = end + 2;
    if (type === "$") {
      const n = Number(head);
      if (n < 0) return true;
      if (data.length < at + n + 2) return false;
      at += n + 2;
      return true;
    }
    if (type === "*") {
      const n = Number(head);
      for (let i = 0; i < n; i++) if (!one()) return false;
      return true;
    }
    return true;
  };
  return one();
}

export interface ServerOptions {
  module?: boolean;
  binary?: string;
  settings?: string[];
  /** Load the library with FUNCTION LOAD once started (7.0+ servers). */
  library?: boolean;
}

export class Server {
  port = 0;
  private child: ChildProcess | undefined;
  readonly dir = mkdtempSync(join(tmpdir(), "redis-lock-js-"));

  private constructor(private readonly options: ServerOptions) {}

  static async start(options: ServerOptions = {}): Promise<Server> {
    const server = new Server(options);
    for (let tries = 0; ; tries++) {
      server.port = await freePort();
      try {
        await server.spawn();
        break;
      } catch (error) {
        if (tries >= 5) throw error;
      }
    }
    if (options.library === true) await server.loadLibrary();
    return server;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  private async spawn(): Promise<void> {
    const args = [
      "--port", String(this.port), "--bind", "127.0.0.1", "--dir", this.dir,
      "--save", "", "--appendonly", "no", "--logfile", "redis.log",
      ...(this.options.settings ?? []),
    ];
    if (this.options.module !== false) args.push("--loadmodule", modulePath());
    const child = spawn(this.options.binary ?? process.env["REDIS_SERVER"] ?? "redis-server", args, {
      stdio: "ignore",
    });
    this.child = child;
    const deadline = Date.now() + 10_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`redis-server exited: ${this.log().slice(-500)}`);
      try {
        const info = await raw(this.port, ["INFO", "server"], 1000);
        if (info.includes(`process_id:${child.pid}`)) return;
      } catch {
        // not yet
      }
      if (Date.now() > deadline) throw new Error(`redis-server did not start: ${this.log().slice(-500)}`);
      await sleep(20);
    }
  }

  async loadLibrary(): Promise<void> {
    const reply = await raw(this.port, ["FUNCTION", "LOAD", "REPLACE", readFileSync(LIBRARY_FILE, "utf8")]);
    if (!reply.startsWith("$")) throw new Error(`FUNCTION LOAD: ${reply}`);
  }

  log(): string {
    try {
      return readFileSync(join(this.dir, "redis.log"), "utf8");
    } catch {
      return "";
    }
  }

  pause(): void {
    if (this.child?.pid !== undefined) process.kill(this.child.pid, "SIGSTOP");
  }

  resume(): void {
    if (this.child?.pid !== undefined) process.kill(this.child.pid, "SIGCONT");
  }

  async kill(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (child === undefined || child.exitCode !== null) return;
    const exited = new Promise((ok) => child.once("exit", ok));
    child.kill("SIGCONT");
    child.kill("SIGKILL");
    await exited;
  }

  /** Kills the server and starts it again on the same port and directory. */
  async restart(): Promise<void> {
    await this.kill();
    await this.spawn();
  }

  async stop(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }

  call(args: string[]): Promise<string> {
    return raw(this.port, args);
  }
}

export class Cluster {
  private constructor(readonly nodes: Server[]) {}

  static async start(masters: number, options: ServerOptions = {}): Promise<Cluster> {
    const settings = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"];
    const nodes: Server[] = [];
    while (nodes.length < masters) {
      const node = await Server.start({ ...options, library: false, settings: [...(options.settings ?? []), ...settings] });
      if (node.port > 55_000) {
        await node.stop(); // the cluster bus listens on port + 10000
        continue;
      }
      nodes.push(node);
    }
    execFileSync("redis-cli", [
      "--cluster", "create", ...nodes.map((n) => `127.0.0.1:${n.port}`), "--cluster-replicas", "0", "--cluster-yes",
    ], { stdio: "ignore" });
    const deadline = Date.now() + 30_000;
    for (;;) {
      const states = await Promise.all(nodes.map((n) => n.call(["CLUSTER", "INFO"])));
      const known = `cluster_known_nodes:${nodes.length}`;
      if (states.every((s) => s.includes("cluster_state:ok") && s.includes(known))) break;
      if (Date.now() > deadline) throw new Error("the cluster did not come up");
      await sleep(50);
    }
    if (options.library === true) for (const node of nodes) await node.loadLibrary();
    return new Cluster(nodes);
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.stop()));
  }
}

/**
 * A TCP proxy to a server that can be cut: `cut()` keeps every connection open but
 * passes nothing either way (a black hole, as a partition looks to a client), and new
 * connections are accepted and then hear nothing. `delay(ms)` passes each chunk on
 * that long after it came (a slow network); `dropReplies()` drops what the server
 * sends on the connections open now (the server acts on each command, no answer
 * comes back) until `heal()`, which closes the connections that lost bytes.
 */
export class BlackHole {
  private constructor(
    private readonly server: NetServer,
    private readonly sockets: Set<Socket>,
    private readonly links: Set<Link>,
    private readonly state: { cutOff: boolean; delayMs: number },
    readonly port: number,
  ) {}

  static async start(target: number): Promise<BlackHole> {
    const sockets = new Set<Socket>();
    const links = new Set<Link>();
    const state = { cutOff: false, delayMs: 0 };
    const server = createServer((client) => {
      const upstream = connect(target, "127.0.0.1");
      const link: Link = { client, upstream, repliesDropped: false, lost: false };
      links.add(link);
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on("error", () => undefined);
        s.on("close", () => sockets.delete(s));
      }
      const pass = (to: Socket, d: Buffer, drop: () => boolean): void => {
        const go = (): void => {
          if (state.cutOff || drop()) link.lost = true;
          else if (!to.destroyed) to.write(d);
        };
        if (state.delayMs > 0) setTimeout(go, state.delayMs);
        else go();
      };
      client.on("data", (d: Buffer) => pass(upstream, d, () => false));
      upstream.on("data", (d: Buffer) => pass(client, d, () => link.repliesDropped));
      client.on("close", () => {
        upstream.destroy();
        links.delete(link);
      });
      upstream.on("close", () => client.destroy());
    });
    await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
    const address = server.address();
    if (typeof address !== "object" || address === null) throw new Error("no proxy port");
    return new BlackHole(server, sockets, links, state, address.port);
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  cut(): void {
    this.state.cutOff = true;
  }

  delay(ms: number): void {
    this.state.delayMs = ms;
  }

  dropReplies(): void {
    for (const link of this.links) link.repliesDropped = true;
  }

  /** Whether bytes were dropped (a black hole, dropped replies) since the last heal. */
  dropped(): boolean {
    return [...this.links].some((link) => link.lost);
  }

  /** Passes everything again, at once; the connections that lost bytes are closed. */
  heal(): void {
    this.state.cutOff = false;
    this.state.delayMs = 0;
    for (const link of this.links) {
      link.repliesDropped = false;
      if (link.lost) link.client.destroy();
    }
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((ok) => this.server.close(ok));
  }
}

interface Link {
  client: Socket;
  upstream: Socket;
  repliesDropped: boolean;
  lost: boolean;
}

/** One of the Redis clients the package supports, connected to `port`. */
export interface Client {
  name: string;
  redis: unknown;
  close(): Promise<void>;
}

export type ClientName = "ioredis" | "ioredis5" | "node-redis" | "node-redis4";
export const CLIENTS: ClientName[] = ["ioredis", "node-redis", "ioredis5", "node-redis4"];

export async function client(name: ClientName, port: number): Promise<Client> {
  const url = `redis://127.0.0.1:${port}`;
  switch (name) {
    case "ioredis": {
      const redis = new IORedis(port, "127.0.0.1", { lazyConnect: true });
      await redis.connect();
      return { name, redis, close: async () => void (await redis.quit().catch(() => redis.disconnect())) };
    }
    case "ioredis5": {
      const redis = new IORedis5(port, "127.0.0.1", { lazyConnect: true });
      await redis.connect();
      return { name, redis, close: async () => void (await redis.quit().catch(() => redis.disconnect())) };
    }
    case "node-redis": {
      const redis = createClient({ url });
      redis.on("error", () => undefined);
      await redis.connect();
      return { name, redis, close: async () => void (await redis.close().catch(() => redis.destroy())) };
    }
    case "node-redis4": {
      const redis = createClient4({ url });
      redis.on("error", () => undefined);
      await redis.connect();
      return { name, redis, close: async () => void (await redis.quit().catch(() => redis.disconnect())) };
    }
  }
}

export async function clusterClient(name: ClientName, ports: number[]): Promise<Client> {
  const nodes = ports.map((port) => ({ host: "127.0.0.1", port }));
  switch (name) {
    case "ioredis":
    case "ioredis5": {
      const Made = name === "ioredis" ? IOCluster : IOCluster5;
      const redis = new Made(nodes, { lazyConnect: true });
      await redis.connect();
      return { name, redis, close: async () => void (await redis.quit().catch(() => redis.disconnect())) };
    }
    case "node-redis": {
      const redis = createCluster({ rootNodes: ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })) });
      redis.on("error", () => undefined);
      await redis.connect();
      return { name, redis, close: async () => void (await redis.close().catch(() => redis.destroy())) };
    }
    case "node-redis4": {
      const redis = createCluster4({ rootNodes: ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })) });
      redis.on("error", () => undefined);
      await redis.connect();
      return { name, redis, close: async () => void (await redis.quit().catch(() => redis.disconnect())) };
    }
  }
}

/**
 * A PostgreSQL server of the tests' own: tests/postgres/start in a directory of its
 * own (initdb and pg_ctl as an unprivileged user, a free port), stopped and removed
 * by {@link Postgres.stop}. {@link Postgres.start} resolves the reason instead when
 * the machine has no PostgreSQL (`make deps` installs it), so that a suite can skip,
 * saying so; any other failure to start is an error.
 */
export class Postgres {
  private constructor(
    readonly url: string,
    private readonly dir: string,
  ) {}

  static async start(): Promise<Postgres | { missing: string }> {
    const dir = join(mkdtempSync(join(tmpdir(), "redis-lock-js-pg-")), "postgres");
    try {
      const url = await run(join(ROOT, "tests/postgres/start"), [dir], 120_000);
      return new Postgres(url.trim(), dir);
    } catch (error) {
      const stderr = (error as { stderr?: string }).stderr ?? "";
      rmSync(dirname(dir), { recursive: true, force: true });
      if (stderr.includes("no PostgreSQL server found")) return { missing: stderr.trim() };
      throw new Error(`tests/postgres/start failed: ${stderr || String(error)}`);
    }
  }

  async stop(): Promise<void> {
    await run(join(ROOT, "tests/postgres/stop"), [this.dir], 60_000).catch(() => "");
    rmSync(dirname(this.dir), { recursive: true, force: true });
  }
}

/** Runs `file`: its stdout, or its error with `stderr` beside it. */
function run(file: string, args: string[], timeout: number): Promise<string> {
  return new Promise((ok, fail) => {
    execFile(file, args, { timeout }, (error, stdout, stderr) => {
      if (error === null) ok(stdout);
      else fail(Object.assign(new Error(error.message), { stderr }));
    });
  });
}

/** Resolves once `condition` holds, checking every 10 ms; throws after `limitMs`. */
export async function eventually(condition: () => boolean | Promise<boolean>, limitMs = 5000, what = "condition"): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`${what} did not hold within ${limitMs} ms`);
    await sleep(10);
  }
}
