// The OIDC token keeper: when it refreshes, single-flight, retries, the
// fall back to signing in again, and the fetch wrapper's one retry.
import { describe, expect, it } from "vitest";
import { RefreshRefused, TokenKeeper, credentialFrom, refreshDelay, refreshingFetch, type Clock, type Credential } from "../src/lib/auth";

/** A clock whose time moves only when the test says. */
class FakeClock implements Clock {
  t = 1_000_000;
  private timers = new Map<number, { at: number; fn: () => void }>();
  private next = 1;
  rand = 0;
  now() {
    return this.t;
  }
  random() {
    return this.rand;
  }
  setTimeout(fn: () => void, ms: number) {
    const id = this.next++;
    this.timers.set(id, { at: this.t + ms, fn });
    return id;
  }
  clearTimeout(id: unknown) {
    this.timers.delete(id as number);
  }
  pending() {
    return [...this.timers.values()].map((x) => x.at - this.t).sort((a, b) => a - b);
  }
  /** Moves time on by ms, running due timers in order and letting promises settle. */
  async advance(ms: number) {
    const end = this.t + ms;
    for (;;) {
      await flush();
      let first: [number, { at: number; fn: () => void }] | undefined;
      for (const e of this.timers) if (e[1].at <= end && (!first || e[1].at < first[1].at)) first = e;
      if (!first) break;
      this.timers.delete(first[0]);
      this.t = Math.max(this.t, first[1].at);
      first[1].fn();
    }
    this.t = end;
    await flush();
  }
}

async function flush() {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

function deferred<T>() {
  let resolve!: (v: T) => void, reject!: (e: unknown) => void;
  const promise = new Promise<T>((a, b) => ((resolve = a), (reject = b)));
  return { promise, resolve, reject };
}

/** A keeper over a fake clock and a scripted /refresh. */
function setup(initial: Partial<Credential> & { ttl?: number }, answer?: (rt: string, n: number) => Promise<Credential>) {
  const clock = new FakeClock();
  const calls: string[] = [];
  const tokens: string[] = [];
  let expired = 0;
  const cred: Credential = { token: initial.token ?? "t0", expiresAt: clock.t + (initial.ttl ?? 60_000), refreshToken: "refreshToken" in initial ? initial.refreshToken : "r0" };
  const k = new TokenKeeper(cred, {
    clock,
    refresh: (rt) => {
      calls.push(rt);
      const n = calls.length;
      return answer ? answer(rt, n) : Promise.resolve({ token: `t${n}`, expiresAt: clock.t + (initial.ttl ?? 60_000), refreshToken: `r${n}` });
    },
    onToken: (c) => tokens.push(c.token),
    onExpired: () => expired++,
  });
  k.start();
  return { k, clock, calls, tokens, expired: () => expired };
}

describe("refreshDelay", () => {
  it("refreshes at 80% of a long lifetime, a minute before for a few minutes, at half for seconds", () => {
    expect(refreshDelay(3_600_000, 0)).toBe(2_880_000);
    expect(refreshDelay(180_000, 0)).toBe(120_000);
    expect(refreshDelay(120_000, 0)).toBe(60_000);
    expect(refreshDelay(10_000, 0)).toBe(5_000);
    expect(refreshDelay(0, 0)).toBe(0);
    expect(refreshDelay(-5, 0)).toBe(0);
  });
  it("jitters only earlier, by at most 10%", () => {
    expect(refreshDelay(3_600_000, 1)).toBe(2_592_000);
    for (const r of [0, 0.3, 0.99]) {
      const d = refreshDelay(100_000, r);
      expect(d).toBeLessThanOrEqual(50_000);
      expect(d).toBeGreaterThanOrEqual(45_000);
    }
  });
});

describe("TokenKeeper", () => {
  it("refreshes before each expiry and keeps going", async () => {
    const { k, clock, calls, tokens, expired } = setup({ ttl: 10_000 });
    expect(clock.pending()).toEqual([5_000, 10_000]);
    await clock.advance(4_999);
    expect(calls).toEqual([]);
    await clock.advance(1);
    expect(calls).toEqual(["r0"]);
    expect(tokens).toEqual(["t1"]);
    expect(k.token).toBe("t1");
    // Three more lifetimes: always refreshed, with the newest refresh token.
    await clock.advance(30_000);
    expect(calls).toEqual(["r0", "r1", "r2", "r3", "r4", "r5", "r6"]);
    expect(expired()).toBe(0);
    expect(k.refreshes).toBe(7);
  });

  it("shares one refresh among concurrent callers", async () => {
    const d = deferred<Credential>();
    const { k, calls } = setup({}, () => d.promise);
    const all = Promise.all([k.afterUnauthorized("t0"), k.afterUnauthorized("t0"), k.refreshNow(), k.afterUnauthorized("t0")]);
    await flush();
    expect(calls).toHaveLength(1);
    d.resolve({ token: "t1", expiresAt: Date.now() + 60_000 });
    expect(await all).toEqual(["t1", "t1", true, "t1"]);
    // A 401 for the old token after that retries with the new one, no refresh.
    expect(await k.afterUnauthorized("t0")).toBe("t1");
    expect(calls).toHaveLength(1);
    // The provider sent no new refresh token: the old one is kept.
    expect(k.credential.refreshToken).toBe("r0");
  });

  it("asks to sign in at expiry when there is no refresh token, and does not loop", async () => {
    const { k, clock, calls, expired } = setup({ refreshToken: undefined, ttl: 10_000 });
    expect(k.canRefresh).toBe(false);
    expect(clock.pending()).toEqual([10_000]);
    expect(await k.afterUnauthorized("t0")).toBeNull();
    await clock.advance(9_999);
    expect(expired()).toBe(0);
    await clock.advance(1);
    expect(expired()).toBe(1);
    await clock.advance(100_000);
    expect(expired()).toBe(1);
    expect(calls).toEqual([]);
    expect(clock.pending()).toEqual([]);
  });

  it("stops refreshing once refused, and asks to sign in at expiry", async () => {
    const { k, clock, calls, expired } = setup({ ttl: 10_000 }, () => Promise.reject(new RefreshRefused(401)));
    await clock.advance(5_000);
    expect(calls).toHaveLength(1);
    expect(k.canRefresh).toBe(false);
    expect(await k.afterUnauthorized("t0")).toBeNull();
    expect(calls).toHaveLength(1);
    expect(k.token).toBe("t0"); // still used while it lasts
    await clock.advance(5_000);
    expect(expired()).toBe(1);
    await clock.advance(60_000);
    expect(calls).toHaveLength(1);
    expect(expired()).toBe(1);
  });

  it("retries a failed refresh with backoff until expiry", async () => {
    const { k, clock, calls, expired } = setup({ ttl: 10_000 }, (_rt, n) =>
      n < 3 ? Promise.reject(new Error("refresh failed (502)")) : Promise.resolve({ token: "t3", expiresAt: clock.t + 10_000, refreshToken: "r3" }),
    );
    await clock.advance(5_000);
    expect(calls).toHaveLength(1);
    await clock.advance(2_000); // first retry after 2 s
    expect(calls).toHaveLength(2);
    await clock.advance(3_999); // the second after 4 s more; expiry came first
    expect(calls).toHaveLength(3);
    expect(k.token).toBe("t3");
    expect(expired()).toBe(0);
  });

  it("gives up at expiry when the server stays down", async () => {
    const { clock, calls, expired } = setup({ ttl: 10_000 }, () => Promise.reject(new TypeError("Failed to fetch")));
    await clock.advance(10_000);
    expect(expired()).toBe(1);
    const n = calls.length;
    await clock.advance(120_000);
    expect(calls).toHaveLength(n);
  });

  it("takes a newer token another tab refreshed instead of refreshing", async () => {
    const clock = new FakeClock();
    let stored: Credential | null = null;
    const calls: string[] = [];
    const k = new TokenKeeper(
      { token: "t0", expiresAt: clock.t + 10_000, refreshToken: "r0" },
      {
        clock,
        refresh: (rt) => (calls.push(rt), Promise.resolve({ token: "mine", expiresAt: clock.t + 10_000 })),
        onToken: () => {},
        onExpired: () => {},
        stored: () => stored,
        lock: (fn) => fn(),
      },
    );
    k.start();
    stored = { token: "other", expiresAt: clock.t + 20_000, refreshToken: "r9" };
    expect(await k.refreshNow()).toBe(true);
    expect(calls).toEqual([]);
    expect(k.credential).toEqual(stored);
    // adopt: an older or equal credential is ignored.
    k.adopt({ token: "old", expiresAt: clock.t + 1_000 });
    expect(k.token).toBe("other");
  });

  it("with its timers held (a frozen tab), refreshes only when a 401 asks", async () => {
    const { k, clock, calls, expired } = setup({ ttl: 10_000 });
    k.timersHeld = true;
    await clock.advance(20_000);
    expect(calls).toEqual([]);
    expect(expired()).toBe(0);
    expect(await k.afterUnauthorized("t0")).toBe("t1");
    expect(calls).toEqual(["r0"]);
  });

  it("does nothing for a token without expiry", async () => {
    const clock = new FakeClock();
    const k = new TokenKeeper({ token: "agd_x" }, { clock, refresh: () => Promise.reject(new Error("no")), onToken: () => {}, onExpired: () => {} });
    k.start();
    expect(clock.pending()).toEqual([]);
    expect(await k.afterUnauthorized("agd_x")).toBeNull();
  });
});

describe("refreshingFetch", () => {
  function server(valid: Set<string>) {
    const seen: string[] = [];
    const f = async (_input: string, init?: RequestInit) => {
      const auth = new Headers(init?.headers).get("Authorization") ?? "";
      seen.push(auth);
      return new Response(init?.body ?? "{}", { status: valid.has(auth.replace("Bearer ", "")) ? 200 : 401 });
    };
    return { f, seen };
  }

  it("refreshes once on 401 and retries once with the new token, body included", async () => {
    const { k } = setup({});
    const { f, seen } = server(new Set(["t1"]));
    const wrapped = refreshingFetch(() => k, f);
    const res = await wrapped("/api/x", { method: "POST", headers: { Authorization: "Bearer t0", "Content-Type": "application/json" }, body: '{"a":1}' });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('{"a":1}');
    expect(seen).toEqual(["Bearer t0", "Bearer t1"]);
  });

  it("shares one refresh among requests failing at once", async () => {
    const d = deferred<Credential>();
    const { k, calls } = setup({}, () => d.promise);
    const { f, seen } = server(new Set(["t1"]));
    const wrapped = refreshingFetch(() => k, f);
    const all = Promise.all([1, 2, 3, 4, 5].map(() => wrapped("/api/x", { headers: { Authorization: "Bearer t0" } })));
    await flush();
    d.resolve({ token: "t1", expiresAt: Date.now() + 60_000 });
    expect((await all).map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(calls).toHaveLength(1);
    expect(seen.filter((s) => s === "Bearer t1")).toHaveLength(5);
  });

  it("returns the 401 when no refresh helps, and retries only once", async () => {
    const { k } = setup({});
    const { f, seen } = server(new Set());
    const res = await refreshingFetch(() => k, f)("/api/x", { headers: { Authorization: "Bearer t0" } });
    expect(res.status).toBe(401);
    expect(seen).toEqual(["Bearer t0", "Bearer t1"]);
    const none = server(new Set());
    expect((await refreshingFetch(() => null, none.f)("/api/x", { headers: { Authorization: "Bearer t0" } })).status).toBe(401);
    expect(none.seen).toHaveLength(1);
  });
});

describe("credentialFrom", () => {
  it("measures the time left on the server's clock", () => {
    const now = Date.parse("2026-11-26T05:00:00Z");
    // The browser's clock is 10 minutes behind the server's.
    const c = credentialFrom({ token: "t", expiresAt: "2026-11-26T05:11:00Z", refreshToken: "r" }, "Thu, 26 Nov 2026 05:10:00 GMT", now);
    expect(c).toEqual({ token: "t", expiresAt: now + 60_000, refreshToken: "r" });
    expect(credentialFrom({ token: "t", expiresAt: "2026-11-26T05:11:00Z" }, null, now)).toEqual({ token: "t", expiresAt: Date.parse("2026-11-26T05:11:00Z") });
    expect(credentialFrom({ token: "t" }, null, now)).toEqual({ token: "t" });
  });
});
