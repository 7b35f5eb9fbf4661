// Images in the conversation, end to end: the real `agentd serve` runs the
// pinned Claude Code CLI against `agentd mock-llm` (e2e/scripts/images.yaml).
// An image a tool returned (Claude Code's Read of a PNG) renders inline in
// the tool call, fetched from the artifact store; an image the user attaches
// in the composer reaches the model and shows in the user's message.
import assert from "node:assert/strict";
import path from "node:path";
import zlib from "node:zlib";
import { after, before, describe, it } from "node:test";
import { Agentd, MockLLM, agentPath, architectures, createSession, here, launch, send, waitFor, waitIdle, withPage } from "./harness.mjs";

let browser;
let server;
let mock;
let archs;

/** A w×h PNG of one colour (RGB, no filter), made here so the test needs no file. */
function png(w, h, [r, g, b]) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buf) => {
    let c = 0xffffffff;
    for (const x of buf) c = crcTable[(c ^ x) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type, "ascii"), data]);
    const c = Buffer.alloc(4);
    c.writeUInt32BE(crc(td));
    return Buffer.concat([len, td, c]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  const row = Buffer.alloc(1 + 3 * w);
  for (let x = 0; x < w; x++) row.set([r, g, b], 1 + 3 * x);
  const raw = Buffer.concat(Array.from({ length: h }, () => row));
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk("IHDR", ihdr), chunk("IDAT", zlib.deflateSync(raw)), chunk("IEND", Buffer.alloc(0))]);
}

before(async () => {
  [mock, browser] = await Promise.all([new MockLLM(path.join(here, "scripts/images.yaml")).start(), launch()]);
  server = new Agentd({
    args: ["--profiles", path.join(here, "profiles")],
    env: { PATH: agentPath(), ANTHROPIC_BASE_URL: mock.url, ANTHROPIC_API_KEY: "mock-key" },
  });
  server.mock = mock;
  await server.start();
  archs = await architectures(server);
});
after(async () => {
  await browser?.close();
  await server?.stop();
  server?.cleanup();
  mock?.stop();
});

function missing() {
  const a = archs.get("claude-code");
  if (a?.available) return "";
  const why = `claude-code unavailable on this server (${a?.problem ?? "not listed"}): install the pinned agent CLIs with scripts/setup.sh`;
  if (process.env.AGENTD_REQUIRE_AGENTS) throw new Error(why);
  return why;
}

/** The natural size of the image element, once it has loaded. */
async function loadedSize(img) {
  await img.waitFor({ timeout: 30_000 });
  return waitFor(
    () => img.evaluate((el) => (el.complete && el.naturalWidth > 0 ? { w: el.naturalWidth, h: el.naturalHeight, src: el.src } : null)),
    { what: "the image to load" },
  );
}

describe("images (claude-code + mock-llm)", () => {
  it("renders an image a tool returned inline", async (t) => {
    const why = missing();
    if (why) return t.skip(why);
    await withPage(t, browser, server, { width: 1280, height: 1000 }, async (page) => {
      const id = await createSession(page, server, { profile: "render", architecture: "claude-code", name: "tool image" });
      // Uploaded with PUT …/files/{path} (the environment is not up yet).
      const put = await fetch(`${server.url}/api/sessions/${id}/files/pics/pic.png`, {
        method: "PUT",
        headers: { "Content-Type": "application/octet-stream" },
        body: png(24, 16, [20, 160, 90]),
      });
      assert.equal(put.status, 200, await put.clone().text());
      assert.equal((await put.json()).path, "pics/pic.png");
      const pic = path.join(server.dataDir, "workspaces", id, "pics", "pic.png");
      await send(page, `read the picture ${pic}`);
      await page.getByTestId("conversation").getByText("The picture: image image/png").waitFor({ timeout: 60_000 });
      await waitIdle(page);
      const call = page.locator('[data-testid="block-tool_use"][data-tool="Read"]');
      const img = call.getByTestId("attachment-image");
      const size = await loadedSize(img);
      assert.deepEqual([size.w, size.h], [24, 16], "the tool's image renders at its size");
      assert.match(size.src, /^blob:/, "fetched with the client's credentials, shown from a blob");
      // What the block references is what the artifact endpoint serves.
      const { blocks } = await server.api("GET", `/api/sessions/${id}`);
      const result = blocks.find((b) => b.type === "tool_result");
      assert.equal(result.attachments?.length, 1);
      assert.equal(await img.getAttribute("data-sha256"), result.attachments[0].sha256);
      // The picture in the workspace view shows as an image too.
      await page.getByTestId("tab-workspace").click();
      const tree = page.getByTestId("file-tree");
      await tree.locator('[data-path="pics"]').waitFor();
      // Folders may start open: open this one only when its file is not shown.
      if ((await tree.locator('[data-path="pics/pic.png"]').count()) === 0) await tree.locator('[data-path="pics"]').click();
      await tree.locator('[data-path="pics/pic.png"]').click();
      const file = await loadedSize(page.getByTestId("file-viewer").getByTestId("file-image"));
      assert.deepEqual([file.w, file.h], [24, 16]);
    });
  });

  it("sends an image attached in the composer and shows it in the message", async (t) => {
    const why = missing();
    if (why) return t.skip(why);
    await withPage(t, browser, server, { width: 1280, height: 1000 }, async (page) => {
      const id = await createSession(page, server, { profile: "render", architecture: "claude-code", name: "user image" });
      const image = png(10, 30, [200, 30, 30]);
      await page.getByTestId("composer-file").setInputFiles({ name: "red.png", mimeType: "image/png", buffer: image });
      await page.getByTestId("composer-attachment").waitFor();
      await send(page, "please describe this");
      await page.getByTestId("conversation").getByText(`I see image image/png ${image.length} bytes`).waitFor({ timeout: 60_000 });
      await waitIdle(page);
      const user = page.getByTestId("block-user_message");
      assert.equal(await user.locator(".bubble").innerText(), "please describe this");
      const size = await loadedSize(user.getByTestId("attachment-image"));
      assert.deepEqual([size.w, size.h], [10, 30]);
      assert.equal(await page.getByTestId("composer-attachment").count(), 0, "the composer is cleared after sending");
      const reqs = await mock.requests();
      assert.ok(
        reqs.some((r) => (r.images ?? []).some((im) => im.mediaType === "image/png" && im.size === image.length && !im.inToolResult)),
        "a model request carried the user's image",
      );
      const { blocks } = await server.api("GET", `/api/sessions/${id}`);
      assert.equal(blocks[0].attachments?.[0]?.size, image.length);
    });
  });
});
