// Signing in to the web UI through an OpenID Connect provider: a real
// agentd (AGENTD_BIN) with --oidc-issuer pointing at the zitadel test OP
// (internal/auth/oidctest/testop, its own process on loopback). The browser
// goes to the provider's login form, signs in, comes back with a code
// (authorization code + PKCE) that the server exchanges; the UI shows the
// user, makes a session whose events carry the user's id, signs out, and
// asks to sign in again when the provider's token expires.
// Run: AGENTD_BIN=/tmp/agentd npm run e2e
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Agentd, TestOP, createShellSession, freePort, launch, screenshot, send, waitFor, waitIdle, withPage } from "./harness.mjs";

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
async function withOIDCServer({ idTokenTTL = "1h" } = {}, fn) {
  const port = await freePort();
  const op = new TestOP({ clients: { [CLIENT]: `http://127.0.0.1:${port}/auth/callback` }, users: [ERIN], idTokenTTL });
  await op.start();
  const server = new Agentd({ port, args: ["--oidc-issuer", op.issuer, "--oidc-client-id", CLIENT] });
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
        const token = await signIn(page, server, op);
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
