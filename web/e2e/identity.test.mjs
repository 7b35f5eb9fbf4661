// Signing in to the web UI through an OpenID Connect provider: a real
// agentd (AGENTD_BIN) with --oidc-issuer pointing at the zitadel test OP
// (internal/auth/oidctest/testop, its own process on loopback). The browser
// goes to the provider's login form, signs in, comes back with a code
// (authorization code + PKCE) that the server exchanges; the UI shows the
// user, makes a session whose events carry the user's id, signs out, keeps
// a sign-in alive across token expiries when the provider issues refresh
// tokens (offline_access), and asks to sign in again when the provider's
// token expires and cannot be refreshed.
// Run: AGENTD_BIN=/tmp/agentd npm run e2e
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  Agentd,
  TestOP,
  createShellSession,
  duplicateBlocks,
  freePort,
  launch,
  lineCounts,
  outputText,
  screenshot,
  send,
  waitFor,
  waitIdle,
  withPage,
} from "./harness.mjs";

const CLIENT = "agentd-web";
const ERIN = { username: "erin", password: "pw-erin-1", subject: "sub-erin-7", name: "Erin Example" };

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

/** A provider and an agentd that signs in through it; fn(server, op). */
// The scopes that make the provider issue refresh tokens.
const OFFLINE = "openid,profile,email,offline_access";

async function withOIDCServer({ idTokenTTL = "1h", refreshTokenTTL = "0", scopes } = {}, fn) {
  const port = await freePort();
  const op = new TestOP({ clients: { [CLIENT]: `http://127.0.0.1:${port}/auth/callback` }, users: [ERIN], idTokenTTL, refreshTokenTTL });
  await op.start();
  const args = ["--oidc-issuer", op.issuer, "--oidc-client-id", CLIENT];
  if (scopes) args.push("--oidc-scopes", scopes);
  const server = new Agentd({ port, args });
  try {
    await server.start();
    await fn(server, op);
  } finally {
    await server.stop();
    server.cleanup();
    await op.stop();
  }
}

/** From the UI's sign-in form through the provider's login and back. */
async function signIn(page, server, op) {
  await page.goto(server.url + "/");
  await page.getByTestId("api-key-form").waitFor();
  const button = page.getByTestId("oidc-sign-in");
  assert.match(await button.innerText(), new RegExp(`Sign in with ${new URL(op.issuer).host}`));
  await button.click();
  // The provider's own login form, on its own origin.
  await page.waitForURL((u) => u.origin === op.issuer && u.pathname === "/login", { timeout: 20_000 });
  await screenshot(page, "oidc-provider-login");
  await page.locator("#username").fill(ERIN.username);
  await page.locator("#password").fill(ERIN.password);
  await page.locator("#submit").click();
  // Back at agentd: the code is exchanged and the UI is signed in.
  await page.getByTestId("current-user").waitFor({ timeout: 20_000 });
  assert.equal(new URL(page.url()).origin, server.url);
  assert.equal(new URL(page.url()).pathname, "/", "the callback URL is replaced by where the sign-in started");
  assert.equal(new URL(page.url()).search, "", "the code is not left in the address bar");
  return page.evaluate(() => localStorage.getItem("agentd.apiKey"));
}

/** What the UI keeps beside the token: {expiresAt, refreshToken} or null. */
function kept(page) {
  return page.evaluate(() => JSON.parse(localStorage.getItem("agentd.auth") ?? "null"));
}

/** Counts the page's calls to the refresh route. */
function countRefreshes(page) {
  const calls = { n: 0, statuses: [] };
  page.on("response", (r) => {
    if (new URL(r.url()).pathname === "/api/auth/oidc/refresh") {
      calls.n++;
      calls.statuses.push(r.status());
    }
  });
  return calls;
}

async function api(server, token, method, p) {
  const r = await fetch(server.url + p, { method, headers: { Authorization: `Bearer ${token}` } });
  return { status: r.status, body: r.headers.get("content-type")?.includes("json") ? await r.json() : await r.text() };
}

describe("web UI sign-in through an OpenID Connect provider", () => {
  it("signs in at the provider, acts as the user, and signs out", async (t) => {
    await withOIDCServer({}, async (server, op) => {
      await withPage(t, browser, server, {}, async (page) => {
        const token = await signIn(page, server, op);
        assert.ok(token, "the bearer token is kept in the browser");
        const me = await api(server, token, "GET", "/api/me");
        assert.equal(me.status, 200);
        assert.equal(me.body.method, "oidc");
        const userId = me.body.user.id;
        assert.ok(userId.includes(ERIN.subject), `user id ${userId} comes from the subject`);
        const shown = page.getByTestId("current-user");
        assert.equal(await shown.innerText(), ERIN.name);
        assert.equal(await shown.getAttribute("data-user-id"), userId);
        await screenshot(page, "oidc-signed-in");

        // A session made in the UI belongs to the user; every event of it
        // that names an actor names the user.
        const id = await createShellSession(page, server, "oidc");
        await send(page, "echo signed-in-as-erin");
        await waitIdle(page);
        const { status, body } = await api(server, token, "GET", `/api/sessions/${encodeURIComponent(id)}/events?limit=1000`);
        assert.equal(status, 200);
        const actors = body.events.map((e) => e.context.actor).filter((a) => a != null);
        assert.ok(actors.length > 0, "some events name an actor");
        assert.deepEqual([...new Set(actors)], [userId]);
        const listed = await api(server, token, "GET", "/api/sessions");
        assert.equal(listed.body.sessions.find((s) => s.sessionId === id)?.owner, userId, "the session is the user's");
        await screenshot(page, "oidc-session");

        // Sign out: the key is gone and a reload asks to sign in.
        await page.getByTestId("sign-out").click();
        await page.getByTestId("api-key-form").waitFor();
        assert.equal(await page.evaluate(() => localStorage.getItem("agentd.apiKey")), null);
        await page.reload();
        await page.getByTestId("oidc-sign-in").waitFor();
        assert.equal(await page.getByTestId("current-user").count(), 0);
      });
    });
  });

  it("refuses a callback whose state is not this browser's", async (t) => {
    await withOIDCServer({}, async (server) => {
      await withPage(t, browser, server, {}, async (page) => {
        await page.goto(server.url + "/auth/callback?code=forged&state=not-mine");
        await page.getByTestId("api-key-form").waitFor();
        assert.match(await page.getByRole("alert").innerText(), /does not match this browser's request/);
        assert.equal(await page.evaluate(() => localStorage.getItem("agentd.apiKey")), null);
      });
    });
  });

  it("asks to sign in again when the provider's token expires", async (t) => {
    await withOIDCServer({ idTokenTTL: "15s" }, async (server, op) => {
      await withPage(t, browser, server, {}, async (page) => {
        const refreshes = countRefreshes(page);
        const token = await signIn(page, server, op);
        assert.equal((await kept(page))?.refreshToken, undefined, "without offline_access the provider gives no refresh token");
        const me = await api(server, token, "GET", "/api/me");
        assert.equal(me.status, 200);
        const expires = Date.parse(me.body.expiresAt);
        assert.ok(expires - Date.now() < 16_000, `the token lives 15 s (expires ${me.body.expiresAt})`);
        // At expiry the UI drops the token and asks to sign in again, with
        // the reason, instead of failing request by request.
        await page.getByTestId("api-key-form").waitFor({ timeout: expires - Date.now() + 15_000 });
        assert.ok(Date.now() >= expires - 1000, "asked to sign in only once the token expired");
        assert.match(await page.getByRole("alert").innerText(), /expired/i);
        assert.equal(await page.evaluate(() => localStorage.getItem("agentd.apiKey")), null);
        assert.equal(refreshes.n, 0, "nothing to refresh with: no refresh is tried");
        await page.getByTestId("oidc-sign-in").waitFor();
        await screenshot(page, "oidc-expired");
        // The server refuses the token too.
        await waitFor(async () => (await api(server, token, "GET", "/api/me")).status === 401, { timeout: 5_000, what: "the expired token to be refused" });
        // And signing in again works.
        await signIn(page, server, op);
        assert.equal(await page.getByTestId("current-user").innerText(), ERIN.name);
      });
    });
  });

  it("stays signed in across token expiries by refreshing, streaming every line once", async (t) => {
    // ID tokens live 8 s: the UI refreshes at about half of that (less
    // jitter), so a 24 s command streams through several expiries.
    await withOIDCServer({ idTokenTTL: "8s", scopes: OFFLINE }, async (server, op) => {
      await withPage(t, browser, server, {}, async (page) => {
        const refreshes = countRefreshes(page);
        const first = await signIn(page, server, op);
        const k = await kept(page);
        assert.ok(k?.refreshToken, "the provider's refresh token is kept");
        assert.ok(k.expiresAt - Date.now() < 9_000, "with the token's expiry");
        const firstMe = await api(server, first, "GET", "/api/me");
        assert.equal(firstMe.status, 200);
        const firstExpiry = Date.parse(firstMe.body.expiresAt);

        await createShellSession(page, server, "refresh");
        await waitFor(async () => (await page.getByTestId("connection-state").getAttribute("data-state")) === "connected", { what: "the socket to connect" });
        const connectsBefore = await page.evaluate(() => window.__agentd.connects());
        const n = 48;
        await send(page, `for i in $(seq 1 ${n}); do echo line $i; sleep 0.5; done`);
        await waitFor(async () => /line 3$/m.test(await outputText(page)), { what: "line 3 while streaming" });
        assert.equal(lineCounts(await outputText(page), n)[n], 0, "the output streams (not all there at once)");
        await waitFor(async () => new RegExp(`line ${n}$`, "m").test(await outputText(page)), { timeout: 60_000, what: `line ${n}` });
        await waitIdle(page);

        // Two expiries and more went by, and the UI is still signed in.
        assert.ok(Date.now() > firstExpiry + 8_000, "the command outlived two token lifetimes");
        // The server checks open connections every 10 s: past the first
        // token's expiry and a check, the socket is still the first one.
        assert.equal(await page.getByTestId("api-key-form").count(), 0, "never asked to sign in");
        assert.equal(await page.getByTestId("current-user").innerText(), ERIN.name);
        assert.ok(refreshes.n >= 3, `refreshed at least three times (${refreshes.n})`);
        assert.deepEqual([...new Set(refreshes.statuses)], [200], "every refresh succeeded");
        // Each new token went over the open socket ({"op":"auth"}): no
        // reconnect, no replay.
        assert.equal(await page.evaluate(() => window.__agentd.connects()), connectsBefore, "the socket took the new tokens without reconnecting");
        // No gap, no repeat across the reconnects.
        assert.deepEqual(lineCounts(await outputText(page), n).slice(1), new Array(n).fill(1), "every line exactly once");
        assert.deepEqual(await duplicateBlocks(page), []);

        // The first token has expired for the server; the one in use has not.
        assert.equal((await api(server, first, "GET", "/api/me")).status, 401, "the first token is expired");
        const now = await page.evaluate(() => localStorage.getItem("agentd.apiKey"));
        assert.notEqual(now, first);
        assert.equal((await api(server, now, "GET", "/api/me")).status, 200);

        // REST actions still work: a new turn, sent with the refreshed token.
        await send(page, "echo after-refresh");
        await waitFor(async () => /^after-refresh$/m.test(await outputText(page)), { what: "the output of a command sent after the refreshes" });
        await waitIdle(page);
        await screenshot(page, "oidc-refreshed");

        // A reload keeps the sign-in (refreshing first if it expired).
        await page.reload();
        await page.getByTestId("current-user").waitFor();
        await waitFor(async () => /^after-refresh$/m.test(await outputText(page)), { what: "the session after a reload" });

        // Sign-out forgets the refresh token too.
        await page.getByTestId("sign-out").click();
        await page.getByTestId("api-key-form").waitFor();
        assert.equal(await kept(page), null);
        assert.equal(await page.evaluate(() => localStorage.getItem("agentd.apiKey")), null);
      });
    });
  });

  it("keeps the terminal open across token expiries", async (t) => {
    // The terminal cannot resume like an event stream: the UI hands it each
    // refreshed token over the connection ({"type":"auth"}), so the server
    // does not close it (4001) when the token it was opened with expires.
    // The server checks open connections every 10 s.
    await withOIDCServer({ idTokenTTL: "6s", scopes: OFFLINE }, async (server, op) => {
      await withPage(t, browser, server, {}, async (page) => {
        const refreshes = countRefreshes(page);
        const first = await signIn(page, server, op);
        const firstExpiry = Date.parse((await api(server, first, "GET", "/api/me")).body.expiresAt);
        await createShellSession(page, server, "pty-refresh");
        await page.getByTestId("tab-terminal").click();
        await waitFor(async () => (await page.getByTestId("terminal-status").innerText()) === "connected", { what: "pty connected" });
        const xterm = () => page.evaluate(() => document.querySelector(".xterm-rows")?.textContent ?? "");
        await page.locator(".xterm").click();
        await page.keyboard.type("echo before-$((6*7))\n");
        await waitFor(async () => (await xterm()).includes("before-42"), { what: "the shell's output before the expiry" });
        // Past the first token's expiry and a connection check after it.
        await waitFor(async () => Date.now() > firstExpiry + 12_000, { timeout: 30_000, what: "the first token's expiry and a recheck" });
        assert.equal((await api(server, first, "GET", "/api/me")).status, 401, "the token the terminal was opened with has expired");
        assert.ok(refreshes.n >= 1, `refreshed (${refreshes.n})`);
        assert.equal(await page.getByTestId("terminal-status").innerText(), "connected", "the terminal is still open");
        await page.locator(".xterm").click();
        await page.keyboard.type("echo after-$((6*7))\n");
        await waitFor(async () => (await xterm()).includes("after-42"), { what: "the shell's output after the expiry" });
      });
    });
  });

  it("refreshes when the server closes the socket of an expired token (a frozen tab)", async (t) => {
    // The refresh timers are held, as in a tab the browser froze: the token
    // expires, the server closes the socket with 4001, and the UI refreshes
    // then, makes a new socket and resumes the session.
    await withOIDCServer({ idTokenTTL: "6s", scopes: OFFLINE }, async (server, op) => {
      await withPage(t, browser, server, {}, async (page) => {
        const refreshes = countRefreshes(page);
        const first = await signIn(page, server, op);
        const expires = Date.parse((await api(server, first, "GET", "/api/me")).body.expiresAt);
        await createShellSession(page, server, "frozen");
        await page.evaluate(() => window.__agentd.holdRefreshTimers(true));
        const n = 24;
        await send(page, `for i in $(seq 1 ${n}); do echo line $i; sleep 0.5; done`);
        await waitFor(async () => new RegExp(`line ${n}$`, "m").test(await outputText(page)), { timeout: 60_000, what: `line ${n}` });
        await waitIdle(page);
        assert.ok(Date.now() > expires, "the command outlived the first token");
        assert.ok(refreshes.n >= 1, "refreshed after the token expired");
        assert.deepEqual([...new Set(refreshes.statuses)], [200]);
        assert.equal(await page.getByTestId("api-key-form").count(), 0, "never asked to sign in");
        assert.deepEqual(lineCounts(await outputText(page), n).slice(1), new Array(n).fill(1), "every line exactly once");
        assert.deepEqual(await duplicateBlocks(page), []);
        // A REST action after that works (with a 401 answered by a refresh
        // and one retry, or with the token the 4001 close brought).
        await send(page, "echo still-here");
        await waitFor(async () => /^still-here$/m.test(await outputText(page)), { what: "a command sent after the expiry" });
        await waitIdle(page);
      });
    });
  });

  it("two tabs share the refreshes and sign out together", async (t) => {
    await withOIDCServer({ idTokenTTL: "8s", scopes: OFFLINE }, async (server, op) => {
      await withPage(t, browser, server, {}, async (page) => {
        const refreshes = countRefreshes(page);
        await signIn(page, server, op);
        const other = await page.context().newPage();
        const otherRefreshes = countRefreshes(other);
        await other.goto(server.url + "/");
        await other.getByTestId("current-user").waitFor();
        const start = Date.now();
        // Three token lifetimes; each tab alone would refresh about six times.
        await new Promise((r) => setTimeout(r, 24_000));
        const calls = refreshes.n + otherRefreshes.n;
        // An 8 s token (7 to 8 s left as measured, in whole seconds) is
        // refreshed after 3.15 s at the soonest; two tabs refreshing each
        // on its own would make about twice this.
        const periods = Math.ceil((Date.now() - start) / 3_150);
        t.diagnostic(`refresh calls: ${refreshes.n} + ${otherRefreshes.n} in ${periods} periods`);
        assert.ok(calls >= 3, `refreshed (${refreshes.n} + ${otherRefreshes.n})`);
        assert.ok(calls <= periods + 1, `one refresh per period for both tabs, not one each (${refreshes.n} + ${otherRefreshes.n} in ${periods} periods)`);
        assert.deepEqual([...new Set([...refreshes.statuses, ...otherRefreshes.statuses])], [200]);
        for (const p of [page, other]) assert.equal(await p.getByTestId("current-user").innerText(), ERIN.name);
        // Both use the newest token (the one stored), within a refresh.
        await waitFor(
          async () => {
            const [a, b] = await Promise.all([page, other].map((p) => p.evaluate(() => localStorage.getItem("agentd.apiKey"))));
            return a === b && (await api(server, a, "GET", "/api/me")).status === 200;
          },
          { what: "both tabs to hold a valid token" },
        );
        // Sign out in one tab: the other is signed out too.
        await page.getByTestId("sign-out").click();
        await other.getByTestId("api-key-form").waitFor({ timeout: 5_000 });
        assert.match(await other.getByRole("alert").innerText(), /signed out in another tab/);
        assert.equal(await kept(other), null);
      });
    });
  });

  it("asks to sign in again, once, when the provider refuses the refresh", async (t) => {
    // Refresh tokens that expire (2 s) before the UI uses them (about 5 s
    // into a 10 s token): the refresh is refused, the token is used until
    // it expires, then the UI asks to sign in again.
    await withOIDCServer({ idTokenTTL: "10s", refreshTokenTTL: "2s", scopes: OFFLINE }, async (server, op) => {
      await withPage(t, browser, server, {}, async (page) => {
        const refreshes = countRefreshes(page);
        const token = await signIn(page, server, op);
        assert.ok((await kept(page))?.refreshToken, "a refresh token was issued");
        const expires = Date.parse((await api(server, token, "GET", "/api/me")).body.expiresAt);
        await waitFor(async () => refreshes.n > 0, { timeout: 10_000, what: "the refresh" });
        assert.equal(refreshes.statuses[0], 401, "the provider refused it");
        // Still signed in while the token lives.
        assert.equal(await page.getByTestId("api-key-form").count(), 0);
        await page.getByTestId("api-key-form").waitFor({ timeout: expires - Date.now() + 15_000 });
        assert.ok(Date.now() >= expires - 1000, "asked to sign in only once the token expired");
        assert.match(await page.getByRole("alert").innerText(), /expired/i);
        assert.equal(await kept(page), null, "the refused refresh token is forgotten");
        // No loop: one refused refresh, and nothing more after.
        await new Promise((r) => setTimeout(r, 3_000));
        assert.equal(refreshes.n, 1, `refresh calls: ${refreshes.statuses}`);
        assert.equal(await page.getByTestId("api-key-form").count(), 1);
      });
    });
  });

  it("asks to sign in again when its API token is revoked (the socket is closed with 4001)", async (t) => {
    const server = new Agentd({ args: ["--api-key", "root-key"] });
    await server.start();
    try {
      const root = { Authorization: "Bearer root-key" };
      await server.api("POST", "/api/users", { id: "dana", name: "Dana", tenant: "team" }, root);
      const tok = await server.api("POST", "/api/tokens", { userId: "dana" }, root);
      await withPage(t, browser, server, {}, async (page) => {
        await page.goto(server.url + "/");
        await page.getByTestId("api-key-input").fill(tok.token);
        await page.getByTestId("api-key-submit").click();
        await page.getByTestId("current-user").waitFor();
        assert.equal(await page.getByTestId("current-user").innerText(), "Dana");
        await waitFor(async () => (await page.getByTestId("connection-state").getAttribute("data-state")) === "connected", { what: "the socket to connect" });
        await server.api("DELETE", `/api/tokens/${tok.id}`, undefined, root);
        await page.getByTestId("api-key-form").waitFor({ timeout: 15_000 });
        assert.match(await page.getByRole("alert").innerText(), /no longer accepts this sign-in/);
        assert.equal(await page.evaluate(() => localStorage.getItem("agentd.apiKey")), null);
      });
    } finally {
      await server.stop();
      server.cleanup();
    }
  });
});
