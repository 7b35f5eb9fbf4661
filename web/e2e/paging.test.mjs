// A conversation longer than one page of GET /api/sessions/{id} (200
// blocks): the UI opens on its last page, "Show earlier messages" loads the
// pages before it, keeping the reader's place, until the first turn is
// there, every block once.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Agentd, duplicateBlocks, fatalErrors, launch, sleep, waitFor, withPage } from "./harness.mjs";

let browser;
let server;
let longId = ""; // the session the first test makes
const TURNS = 140; // a shell turn is 3 blocks: 420, over two pages

before(async () => {
  browser = await launch();
  server = new Agentd({});
  await server.start();
});
after(async () => {
  await browser?.close();
  await server?.stop();
  server?.cleanup();
});

async function runTurn(id, content, n) {
  await server.api("POST", `/api/sessions/${id}/messages`, { content });
  await waitFor(async () => {
    const s = await server.api("GET", `/api/sessions/${id}?limit=1`);
    return s.turns.length >= n && s.turns.at(-1).status !== "running" && !s.activeQueryId;
  }, { timeout: 60_000, interval: 20, what: `turn ${n}` });
}

/** The conversation state the UI holds. */
function held(page) {
  return page.evaluate(() => {
    const st = window.__agentd.conversation.state;
    return { ids: st.blocks.map((b) => b.id), offset: st.blockOffset ?? 0, first: JSON.stringify(st.blocks.slice(0, 3)) };
  });
}

describe("paging back", () => {
  it("shows earlier messages page by page, in place, each block once", async (t) => {
    const { sessionId: id } = await server.api("POST", "/api/sessions", { architecture: "shell", name: "long" });
    for (let i = 0; i < TURNS; i++) await runTurn(id, i === 0 ? "echo first-turn-zzz" : `echo turn-${i}`, i + 1);
    longId = id;
    const all = await server.api("GET", `/api/sessions/${id}?limit=1000`);
    assert.ok(all.totalBlocks > 400, `blocks: ${all.totalBlocks}`);
    assert.equal(all.blocks.length, all.totalBlocks);
    const allIds = all.blocks.map((b) => b.id);

    await withPage(t, browser, server, { width: 1280, height: 900 }, async (page) => {
      await page.goto(`${server.url}/s/${id}`);
      await page.getByTestId("conversation").waitFor({ timeout: 15_000 });
      await page.getByText(`turn-${TURNS - 1}`).first().waitFor({ timeout: 15_000 });
      let h = await held(page);
      assert.equal(h.ids.length, 200);
      assert.equal(h.offset, all.totalBlocks - 200);
      assert.deepEqual(h.ids, allIds.slice(-200));
      assert.ok(!h.first.includes("first-turn-zzz"));
      const button = page.getByTestId("show-earlier");
      assert.equal(await button.innerText(), `Show earlier messages (${all.totalBlocks - 200} more)`);

      let clicks = 0;
      while ((await button.count()) > 0) {
        // At the top, as a reader who wants older messages is.
        await page.evaluate(() => (document.querySelector('[data-testid="conversation"]').scrollTop = 0));
        await sleep(200);
        const firstId = (await held(page)).ids[0];
        // The first message on screen (a tool result held without its call
        // joins it when the page brings the call: its element goes).
        const anchorId = await page.locator('[data-testid="block-user_message"]').first().getAttribute("data-block-id");
        const anchor = page.locator(`[data-block-id="${anchorId}"]`).first();
        await anchor.waitFor();
        const y0 = (await anchor.boundingBox()).y;
        await button.click();
        clicks++;
        await waitFor(async () => (await held(page)).ids[0] !== firstId, { what: `page ${clicks} loaded` });
        await sleep(300); // a few frames: measure, anchor
        const y1 = (await anchor.count()) > 0 ? (await anchor.boundingBox({ timeout: 2000 }))?.y : undefined; // unmounted: scrolled away
        assert.ok(y1 !== undefined && Math.abs(y1 - y0) < 40, `page ${clicks}: the block the reader saw moved from ${y0} to ${y1}`);
        assert.ok(clicks < 5, "too many pages");
      }
      assert.equal(clicks, Math.ceil((all.totalBlocks - 200) / 200));
      h = await held(page);
      assert.equal(h.offset, 0);
      assert.deepEqual(h.ids, allIds, "every block once, in order");
      // The first turn is on screen at the top.
      await waitFor(async () => {
        await page.evaluate(() => (document.querySelector('[data-testid="conversation"]').scrollTop = 0));
        return (await page.getByText("first-turn-zzz").count()) > 0;
      }, { what: "the first turn shown", timeout: 10_000 });
      assert.deepEqual(await duplicateBlocks(page), []);
      assert.deepEqual(fatalErrors(page), []);
    });
  });

  it("shows a failed page's error and keeps what it holds", async (t) => {
    if (!longId) return t.skip("the first test made no session");
    await withPage(t, browser, server, { width: 1280, height: 900 }, async (page) => {
      await page.route("**/api/sessions/*?*before=*", (r) => r.fulfill({ status: 500, contentType: "application/json", body: '{"error":"page store down","code":"INTERNAL"}' }));
      await page.goto(`${server.url}/s/${longId}`);
      await page.getByTestId("show-earlier").click();
      const err = page.getByTestId("earlier-error");
      await err.waitFor();
      assert.match(await err.innerText(), /Could not load earlier messages: .*page store down/);
      const h = await held(page);
      assert.equal(h.ids.length, 200);
      assert.ok(await page.getByTestId("show-earlier").isEnabled(), "the button can be tried again");
      assert.deepEqual(fatalErrors(page), []);
    });
  });
});
