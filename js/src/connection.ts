/**
 * The one small interface between the lock and the user's Redis client: connections
 * of the lock's own, made from the user's client with its address, credentials, TLS
 * and database (`duplicate()`), that send one command and return its reply.
 *
 * - The command connection (one per `Locks`) carries the short calls: an acquire
 *   that does not wait, a release, an info. Its integers come back as strings
 *   (ioredis' `stringNumbers`, node-redis' type mapping), so a token is exact.
 * - A dedicated connection carries one blocking wait (`LOCK.ACQUIRE … WAIT`, or the
 *   library's `BLPOP`) or one lock's renewals. It has no command timeout, no
 *   automatic reconnect, no offline queue and no resend of unanswered commands: a
 *   driver that re-sent a wait after a reconnect would queue the waiter again at the
 *   back, or hide a lapsed place (docs/PROTOCOL.md). A failure closes it; the next
 *   use opens another.
 *
 * - The guard connection (one per `Locks`, made at the first guarded write) carries
 *   the guarded writes, whose replies are the user's command's: it reads them as the
 *   user's client does (its own integer setting: ioredis' `stringNumbers`, node-redis'
 *   type mapping), and never sends a command again after a reconnect either. On
 *   node-redis it is the command connection, asked without the type mapping.
 *
 * Sockets are unref'ed while no command is out on them, so the lock's connections
 * never keep a process alive on their own; they close when the user's client ends.
 */
import { keySlot } from "./slot.js";

/** A command's word: text, or bytes as they are. */
export type Arg = string | Buffer;

/** One connection of the lock's own. */
export interface Connection {
  /** Sends one command; `key` routes it on a Cluster. */
  send(args: readonly Arg[], key?: string): Promise<unknown>;
  /** Closes at once; a command still out rejects. */
  close(): void;
  readonly closed: boolean;
  /** Where it is connected: a dedicated connection serves one node. */
  readonly node: string;
}

/** Makes the lock's connections from the user's client. */
export interface Driver {
  /** `ioredis` or `node-redis`, and whether it is a Cluster. */
  readonly name: string;
  readonly cluster: boolean;
  /** The shared command connection, made on first use. */
  command(): Promise<Connection>;
  /** The connection of guarded writes: replies as the user's client reads them. */
  guarded(): Promise<Connection>;
  /** A new dedicated connection to the node that serves `key` (any for none). */
  dedicated(key: string | undefined): Promise<Connection>;
  /** A connection to every master (a Cluster's), for loading the library. */
  masters(): Promise<Connection[]>;
  /** Calls `listener` when the user's client ends (quit, disconnect). */
  onEnd(listener: () => void): void;
  /** Closes the command connection. */
  close(): void;
}

/** What every ioredis connection of the lock's own overrides: integers as strings
 * (exact tokens); no `keyPrefix` (ioredis would prefix the keys of FCALL, EVALSHA
 * and BLPOP but not those of the module's commands, which it does not know: lock keys
 * are used as given, on every backend); and a command out when the connection drops
 * fails at once and is never sent again after a reconnect (ioredis would re-send it:
 * a release re-sent later could release a later holding of a reused owner, and
 * answer 0 for the one it released). The client decides what to send again. */
const IOREDIS_OWN = {
  lazyConnect: true,
  stringNumbers: true,
  keyPrefix: "",
  autoResendUnfulfilledCommands: false,
  maxRetriesPerRequest: 0,
} as const;

/** The options a dedicated ioredis connection overrides besides. */
const IOREDIS_DEDICATED = {
  ...IOREDIS_OWN,
  enableOfflineQueue: false,
  retryStrategy: (): null => null,
  reconnectOnError: null,
  commandTimeout: undefined,
  socketTimeout: undefined,
  blockingTimeout: undefined,
  enableAutoPipelining: false,
  autoResubscribe: false,
} as const;

// Structural types of the parts of each Redis client used here, so the package
// imports neither at run time nor in its declarations.
interface Emitter {
  on(event: string, listener: (...args: unknown[]) => void): unknown;
}
interface IoRedis extends Emitter {
  isCluster?: boolean;
  status: string;
  options: Record<string, unknown>;
  stream?: { ref(): void; unref(): void; destroy(): void } | undefined;
  duplicate(override?: Record<string, unknown>): IoRedis;
  connect(): Promise<unknown>;
  call(command: string, args: (string | Buffer | number)[]): Promise<unknown>;
  disconnect(): void;
}
interface IoCluster extends Emitter {
  isCluster: true;
  status: string;
  options: { redisOptions?: Record<string, unknown> } & Record<string, unknown>;
  slots: string[][];
  duplicate(nodes?: unknown, options?: Record<string, unknown>): IoCluster;
  connect(): Promise<unknown>;
  nodes(role?: string): IoRedis[];
  refreshSlotsCache?(callback?: (error?: unknown) => void): void;
  disconnect(): void;
}
interface NodeRedis extends Emitter {
  isOpen: boolean;
  options?: Record<string, unknown> & { socket?: Record<string, unknown> };
  duplicate(overrides?: Record<string, unknown>): NodeRedis;
  connect(): Promise<unknown>;
  sendCommand(args: readonly Arg[], options?: Record<string, unknown>): Promise<unknown>;
  ref?(): void;
  unref?(): void;
  destroy?(): void;
  disconnect?(): Promise<void>;
}
interface NodeCluster extends Emitter {
  duplicate(overrides?: Record<string, unknown>): NodeCluster;
  connect(): Promise<unknown>;
  sendCommand(
    firstKey: string | undefined,
    isReadonly: boolean | undefined,
    args: readonly Arg[],
    options?: Record<string, unknown>,
  ): Promise<unknown>;
  getSlotMaster(slot: number): { host: string; port: number };
  masters: { host: string; port: number }[];
  nodeClient(node: unknown): NodeRedis | Promise<NodeRedis>;
  destroy?(): void;
  disconnect?(): Promise<void>;
}

/** node-redis 5+: integers (RESP type ':') as strings, so tokens stay exact. */
const NODE_REDIS_OPTIONS = { typeMapping: { [58]: String } };

function hasMethod(value: unknown, name: string): boolean {
  return typeof (value as Record<string, unknown> | null)?.[name] === "function";
}

/** The driver for `client`: an ioredis `Redis` or `Cluster`, or a node-redis client
 * or cluster (`createClient`, `createCluster`). */
export function driverFor(client: unknown): Driver {
  if (hasMethod(client, "call") && hasMethod(client, "duplicate")) {
    const io = client as IoRedis | IoCluster;
    return io.isCluster === true ? new IoClusterDriver(io as IoCluster) : new IoRedisDriver(io);
  }
  if (hasMethod(client, "sendCommand") && hasMethod(client, "duplicate")) {
    if (hasMethod(client, "getSentinelNode")) {
      throw new TypeError(
        "node-redis' Sentinel client (createSentinel) is not supported yet: use ioredis with sentinels, or a node-redis client of the master",
      );
    }
    if (hasMethod(client, "getSlotMaster")) return new NodeClusterDriver(client as NodeCluster);
    return new NodeRedisDriver(client as NodeRedis);
  }
  throw new TypeError(
    "Locks needs an ioredis client (new Redis(), new Cluster()) or a node-redis client (createClient(), createCluster())",
  );
}

/** Counts the commands out on a socket: referenced while any is, so a wait keeps the
 * process alive, and an idle connection does not. */
class Refs {
  private out = 0;
  constructor(private readonly set: (on: boolean) => void) {}
  async around<T>(work: () => Promise<T>): Promise<T> {
    if (this.out++ === 0) this.set(true);
    try {
      return await work();
    } finally {
      if (--this.out === 0) this.set(false);
    }
  }
  idle(): void {
    if (this.out === 0) this.set(false);
  }
}

function ignoreErrors(emitter: Emitter): void {
  // A connection's 'error' events (a refused reconnect, a reset) reach the caller
  // as the failed command; an unheard 'error' event would end the process.
  emitter.on("error", () => undefined);
}

class IoConnection implements Connection {
  closed = false;
  private readonly refs: Refs;
  constructor(
    private readonly redis: IoRedis,
    readonly node: string,
  ) {
    this.refs = new Refs((on) => {
      const stream = this.redis.stream;
      if (on) stream?.ref();
      else stream?.unref();
    });
    redis.on("connect", () => this.refs.idle());
    redis.on("end", () => {
      this.closed = true;
    });
  }
  send(args: readonly Arg[]): Promise<unknown> {
    const [name, ...rest] = args;
    return this.refs.around(() => this.redis.call(String(name ?? ""), rest));
  }
  /** Destroys the socket rather than ending it (`disconnect()` alone sends its FIN
   * after what is queued, so a withdrawal sent next on another connection could
   * reach the server first, while a waiter on this one still counts as connected). */
  close(): void {
    this.closed = true;
    this.redis.disconnect();
    this.redis.stream?.destroy();
  }
  idle(): void {
    this.refs.idle();
  }
}

async function ioConnect(redis: IoRedis, node: string): Promise<Connection> {
  ignoreErrors(redis);
  const connection = new IoConnection(redis, node);
  try {
    await redis.connect();
  } catch (error) {
    connection.close();
    throw error;
  }
  connection.idle(); // connected: the socket exists now
  return connection;
}

/** A host or port from a client's options, as text. */
function word(value: unknown): string {
  return typeof value === "string" || typeof value === "number" ? String(value) : "";
}

function ioNode(redis: IoRedis): string {
  return `${word(redis.options["host"])}:${word(redis.options["port"])}`;
}

/** The integers of a guarded write's reply as the user's ioredis client reads them. */
function userNumbers(options: Record<string, unknown> | undefined): { stringNumbers: boolean } {
  return { stringNumbers: options?.["stringNumbers"] === true };
}

class IoRedisDriver implements Driver {
  readonly name = "ioredis";
  readonly cluster = false;
  private shared: Promise<Connection> | undefined;
  private guard: Promise<Connection> | undefined;
  constructor(private readonly client: IoRedis) {}

  command(): Promise<Connection> {
    if (this.shared === undefined) {
      const made = this.made({});
      this.shared = made;
      made.catch(() => {
        if (this.shared === made) this.shared = undefined;
      });
    }
    return this.shared;
  }

  guarded(): Promise<Connection> {
    if (this.guard === undefined) {
      const made = this.made(userNumbers(this.client.options));
      this.guard = made;
      made.catch(() => {
        if (this.guard === made) this.guard = undefined;
      });
    }
    return this.guard;
  }

  /** A connection of the lock's own, shared by its calls. */
  private made(override: Record<string, unknown>): Promise<Connection> {
    const redis = this.client.duplicate({
      ...IOREDIS_OWN,
      commandTimeout: undefined,
      blockingTimeout: undefined,
      enableAutoPipelining: false,
      ...override,
    });
    return ioConnect(redis, ioNode(this.client));
  }

  dedicated(): Promise<Connection> {
    return ioConnect(this.client.duplicate({ ...IOREDIS_DEDICATED }), ioNode(this.client));
  }

  async masters(): Promise<Connection[]> {
    return [await this.command()];
  }

  onEnd(listener: () => void): void {
    this.client.on("end", listener);
  }

  close(): void {
    for (const shared of [this.shared, this.guard]) void shared?.then((c) => c.close(), () => undefined);
    this.shared = undefined;
    this.guard = undefined;
  }
}

/** On a Cluster, a call goes to the master of its key's slot, on a connection of the
 * lock's own to that node (ioredis routes the module's commands, which it does not
 * know, to a random node and follows the redirect: a round trip more). */
class IoClusterDriver implements Driver {
  readonly name = "ioredis";
  readonly cluster = true;
  private shared: Promise<IoCluster> | undefined;
  private readonly nodes = new Map<string, Promise<Connection>>();
  constructor(private readonly client: IoCluster) {}

  private routed(): Promise<IoCluster> {
    if (this.shared === undefined) {
      // Only for the slot map and the nodes: its integers stay numbers (ioredis reads
      // CLUSTER SLOTS' ranges as numbers); calls go on node connections of their own.
      const cluster = this.client.duplicate(undefined, { lazyConnect: true });
      ignoreErrors(cluster);
      const made = cluster.connect().then(() => cluster);
      this.shared = made;
      made.catch(() => {
        if (this.shared === made) this.shared = undefined;
        cluster.disconnect();
      });
    }
    return this.shared;
  }

  /** The master serving `key`'s slot ("host:port"). */
  private async nodeOf(key: string | undefined): Promise<{ cluster: IoCluster; node: IoRedis }> {
    const cluster = await this.routed();
    const slot = key === undefined ? undefined : keySlot(key);
    if (slot !== undefined && cluster.slots[slot] === undefined) await this.refresh(); // a map read mid-gossip
    const masters = cluster.nodes("master");
    const wanted = slot === undefined ? undefined : cluster.slots[slot]?.[0];
    const node = masters.find((m) => ioNode(m) === wanted) ?? masters[0];
    if (node === undefined) throw new Error("the cluster has no master connected");
    return { cluster, node };
  }

  command(): Promise<Connection> {
    return Promise.resolve(new IoClusterCommands(this, false));
  }

  guarded(): Promise<Connection> {
    return Promise.resolve(new IoClusterCommands(this, true));
  }

  /** The connection of the lock's own to the master of `key`'s slot: the command
   * connection's, or (`guard`) the guard connection's, which reads integers as the
   * user's client does. */
  async connectionFor(key: string | undefined, guard: boolean): Promise<Connection> {
    const { node } = await this.nodeOf(key);
    const address = ioNode(node);
    const name = guard ? `guard ${address}` : address;
    let connection = this.nodes.get(name);
    if (connection === undefined) {
      const numbers = guard ? userNumbers(node.options) : {};
      connection = ioConnect(node.duplicate({ ...IOREDIS_OWN, ...numbers }), address);
      this.nodes.set(name, connection);
    }
    const made = await connection.catch((error: unknown) => {
      this.nodes.delete(name);
      throw error;
    });
    if (made.closed) {
      this.nodes.delete(name);
      return this.connectionFor(key, guard);
    }
    return made;
  }

  refresh(): Promise<void> {
    return new Promise((resolve) => {
      void this.routed().then(
        (cluster) => (cluster.refreshSlotsCache ? cluster.refreshSlotsCache(() => resolve()) : resolve()),
        () => resolve(),
      );
    });
  }

  async dedicated(key: string | undefined): Promise<Connection> {
    const { node } = await this.nodeOf(key);
    return ioConnect(node.duplicate({ ...IOREDIS_DEDICATED }), ioNode(node));
  }

  async masters(): Promise<Connection[]> {
    const cluster = await this.routed();
    return Promise.all(
      cluster.nodes("master").map((node) => ioConnect(node.duplicate({ ...IOREDIS_OWN }), ioNode(node))),
    );
  }

  onEnd(listener: () => void): void {
    this.client.on("end", listener);
  }

  close(): void {
    const shared = this.shared;
    this.shared = undefined;
    void shared?.then((c) => c.disconnect(), () => undefined);
    for (const connection of this.nodes.values()) void connection.then((c) => c.close(), () => undefined);
    this.nodes.clear();
  }
}

/** The command (or guard) connection of an ioredis Cluster: each call on its node's
 * connection, again once after a redirect (a slot moved: the slot map is read anew;
 * the call did not run). */
class IoClusterCommands implements Connection {
  readonly closed = false;
  readonly node = "cluster";
  constructor(
    private readonly driver: IoClusterDriver,
    private readonly guard: boolean,
  ) {}
  async send(args: readonly Arg[], key?: string): Promise<unknown> {
    const connection = await this.driver.connectionFor(key, this.guard);
    try {
      return await connection.send(args);
    } catch (error) {
      if (!isRedirect(error)) throw error;
      await this.driver.refresh();
      return (await this.driver.connectionFor(key, this.guard)).send(args);
    }
  }
  close(): void {}
}

export function isRedirect(error: unknown): boolean {
  return error instanceof Error && /^(MOVED|ASK) /.test(error.message);
}

class NodeConnection implements Connection {
  closed = false;
  private readonly refs: Refs;
  constructor(
    private readonly client: NodeRedis,
    readonly node: string,
  ) {
    this.refs = new Refs((on) => (on ? client.ref?.() : client.unref?.()));
    client.on("end", () => {
      this.closed = true;
    });
  }
  /** `native`: the reply read with the client's own type mapping (a guarded write's). */
  send(args: readonly Arg[], _key?: string, native = false): Promise<unknown> {
    return this.refs.around(() => this.client.sendCommand(args, native ? undefined : NODE_REDIS_OPTIONS));
  }
  close(): void {
    this.closed = true;
    closeNodeRedis(this.client);
  }
  idle(): void {
    this.refs.idle();
  }
}

/** A node-redis connection whose replies are read with the client's own type mapping. */
class NativeReplies implements Connection {
  constructor(private readonly connection: NodeConnection) {}
  get closed(): boolean {
    return this.connection.closed;
  }
  get node(): string {
    return this.connection.node;
  }
  send(args: readonly Arg[]): Promise<unknown> {
    return this.connection.send(args, undefined, true);
  }
  close(): void {
    this.connection.close();
  }
}

function closeNodeRedis(client: NodeRedis | NodeCluster): void {
  try {
    if (client.destroy) client.destroy();
    else void client.disconnect?.().catch(() => undefined);
  } catch {
    // already closed
  }
}

async function nodeConnect(client: NodeRedis, node: string): Promise<NodeConnection> {
  ignoreErrors(client);
  const connection = new NodeConnection(client, node);
  try {
    await client.connect();
  } catch (error) {
    connection.close();
    throw error;
  }
  connection.idle();
  return connection;
}

function nodeRedisNode(client: NodeRedis): string {
  const socket = client.options?.socket ?? {};
  const url = client.options?.["url"];
  return typeof url === "string" ? url : `${word(socket["host"])}:${word(socket["port"])}`;
}

/** node-redis' options for a dedicated connection: no reconnect (so nothing is sent
 * again on a new socket) and no offline queue. node-redis never re-sends a command
 * already written to a socket that dropped. */
function nodeDedicated(client: NodeRedis): Record<string, unknown> {
  const socket: Record<string, unknown> = { ...(client.options?.socket ?? {}), reconnectStrategy: false };
  delete socket["socketTimeout"];
  return { socket, disableOfflineQueue: true, pingInterval: undefined, keyPrefix: undefined };
}

class NodeRedisDriver implements Driver {
  readonly name = "node-redis";
  readonly cluster = false;
  private shared: Promise<NodeConnection> | undefined;
  constructor(private readonly client: NodeRedis) {}

  command(): Promise<Connection> {
    return this.commandConnection();
  }

  async guarded(): Promise<Connection> {
    return new NativeReplies(await this.commandConnection());
  }

  private commandConnection(): Promise<NodeConnection> {
    if (this.shared === undefined) {
      const made = nodeConnect(this.client.duplicate({ keyPrefix: undefined }), nodeRedisNode(this.client));
      this.shared = made;
      made.catch(() => {
        if (this.shared === made) this.shared = undefined;
      });
    }
    return this.shared;
  }

  dedicated(): Promise<Connection> {
    return nodeConnect(this.client.duplicate(nodeDedicated(this.client)), nodeRedisNode(this.client));
  }

  async masters(): Promise<Connection[]> {
    return [await this.command()];
  }

  onEnd(listener: () => void): void {
    this.client.on("end", listener);
  }

  close(): void {
    const shared = this.shared;
    this.shared = undefined;
    void shared?.then((c) => c.close(), () => undefined);
  }
}

class NodeClusterDriver implements Driver {
  readonly name = "node-redis";
  readonly cluster = true;
  private shared: Promise<NodeCluster> | undefined;
  constructor(private readonly client: NodeCluster) {}

  private routed(): Promise<NodeCluster> {
    if (this.shared === undefined) {
      const cluster = this.client.duplicate();
      ignoreErrors(cluster);
      const made = cluster.connect().then(() => cluster);
      this.shared = made;
      made.catch(() => {
        if (this.shared === made) this.shared = undefined;
      });
    }
    return this.shared;
  }

  async command(): Promise<Connection> {
    const cluster = await this.routed();
    return {
      closed: false,
      node: "cluster",
      send: (args, key) => cluster.sendCommand(key, false, args, NODE_REDIS_OPTIONS),
      close: () => undefined,
    };
  }

  async guarded(): Promise<Connection> {
    const cluster = await this.routed();
    return {
      closed: false,
      node: "cluster",
      send: (args, key) => cluster.sendCommand(key, false, args),
      close: () => undefined,
    };
  }

  private async nodeClient(master: { host: string; port: number }): Promise<NodeRedis> {
    const cluster = await this.routed();
    return cluster.nodeClient(master);
  }

  async dedicated(key: string | undefined): Promise<Connection> {
    const cluster = await this.routed();
    const master = key === undefined ? cluster.masters[0] : cluster.getSlotMaster(keySlot(key));
    if (master === undefined) throw new Error("the cluster has no master");
    const client = await this.nodeClient(master);
    return nodeConnect(client.duplicate(nodeDedicated(client)), `${master.host}:${master.port}`);
  }

  async masters(): Promise<Connection[]> {
    const cluster = await this.routed();
    return Promise.all(
      cluster.masters.map(async (master) => {
        const client = await this.nodeClient(master);
        return nodeConnect(client.duplicate(), `${master.host}:${master.port}`);
      }),
    );
  }

  onEnd(listener: () => void): void {
    this.client.on("end", listener);
  }

  close(): void {
    const shared = this.shared;
    this.shared = undefined;
    void shared?.then((c) => closeNodeRedis(c), () => undefined);
  }
}
