// A released lock never keeps the process alive: once the user's own client quits,
// the process exits, the lock's connections closed and its timers unref'ed; so does
// one that stopped at a wait's end (busy) and one holding a lock with renewal due.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { ROOT, Server } from "./helpers.js";

const INDEX = join(ROOT, "js/build/src/index.js");

/** Runs `body` (ESM, with `Locks`, `Redis` and `createClient` in scope) in a Node
 * process of its own; resolves its exit code and how long it ran, or rejects after
 * `limitMs`. */
function run(port: number, body: string, limitMs = 10_000): Promise<{ code: number | null; ms: number }> {
  const source = `
    import { Locks } from ${JSON.stringify(INDEX)};
    import { Redis } from "ioredis";
    import { createClient } from "redis";
    const port = ${port};
    ${body}
  `;
  return new Promise((ok, fail) => {
    const started = Date.now();
    const child = spawn(process.execPath, ["--input-type=module", "-e", source], {
      cwd: join(ROOT, "js"),
      stdio: ["ignore", "inherit", "inherit"],
    });
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      fail(new Error(`the process did not exit within ${limitMs} ms`));
    }, limitMs);
    child.on("exit", (code) => {
      clearTimeout(timer);
      ok({ code, ms: Date.now() - started });
    });
  });
}

describe("the process exits when the user's client is done", () => {
  let server: Server;
  before(async () => {
    server = await Server.start();
  });
  after(async () => server.stop());

  it("after a release, with ioredis and node-redis", async () => {
    const { code } = await run(
      server.port,
      `
      const io = new Redis(port);
      const a = new Locks(io);
      const lock = await a.acquire("exit:1", { ttl: 60_000 });
      await lock.release();
      const busy = await a.tryAcquire("exit:0", { ttl: 60_000 });
      await busy.release();
      await io.quit();
      const nr = await createClient({ url: "redis://127.0.0.1:" + port }).connect();
      const b = new Locks(nr);
      const other = await b.acquire("exit:2", { ttl: 60_000 });
      await other.release();
      await nr.close();
      `,
    );
    assert.equal(code, 0);
  });

  it("while a lock is held with its renewal due, and after a wait ran out", async () => {
    const holder = await run(
      server.port,
      `
      const io = new Redis(port);
      const locks = new Locks(io);
      await locks.acquire("exit:3", { ttl: 60_000 });
      const second = await locks.acquire("exit:3", { ttl: 60_000, wait: 100 });
      if (second !== null) process.exit(2);
      await io.quit();
      `,
    );
    assert.equal(holder.code, 0);
  });
});
