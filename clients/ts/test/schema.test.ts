// The schema check has two halves: tsc proves src/types.ts agrees with the
// types generated from the server's OpenAPI document (test/schema-compat.ts,
// compiled by `npm test`), and this file makes sure those generated types
// are the current server's: the committed snapshot must match
// internal/api/openapi.json when the repository has it, or the live
// GET /api/openapi.json of AGENTD_BIN when that is set.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
// @ts-expect-error -- a plain .mjs script without type declarations
import { generate } from "../scripts/gen-schema-types.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const snapshotPath = path.join(here, "generated/openapi.json");
const generatedPath = path.join(here, "generated/openapi.ts");
const repoSchema = path.resolve(here, "../../../internal/api/openapi.json");
const gen = generate as (doc: unknown) => string;

const snapshot = JSON.parse(readFileSync(snapshotPath, "utf8")) as { components: { schemas: Record<string, unknown> } };

describe("OpenAPI schema", () => {
  it("generated types are what the generator makes from the committed snapshot", () => {
    expect(readFileSync(generatedPath, "utf8")).toBe(gen(snapshot));
  });

  it("generates refs, enums, nullable types, maps and arrays", () => {
    const ts = gen({
      components: {
        schemas: {
          A: {
            type: "object",
            required: ["id", "kind"],
            properties: {
              id: { type: "string" },
              kind: { enum: ["x", "y"] },
              n: { type: ["integer", "null"] },
              b: { $ref: "#/components/schemas/B" },
              tags: { type: "array", items: { type: "string" } },
              meta: { type: "object", additionalProperties: {} },
              any: {},
            },
          },
          B: { oneOf: [{ type: "string" }, { type: "boolean" }] },
        },
      },
    });
    expect(ts).toContain('export interface A {\n  any?: Json;\n  b?: B;\n  id: string;\n  kind: "x" | "y";\n  meta?: {\n    [key: string]: Json;\n  };\n  n?: number | null;\n  tags?: string[];\n}');
    expect(ts).toContain("export type B = string | boolean;");
    expect(() => gen({})).toThrow(/components.schemas/);
    expect(() => gen({ components: { schemas: { X: { $ref: "http://elsewhere" } } } })).toThrow(/unsupported/);
  });

  it.skipIf(!existsSync(repoSchema))("snapshot matches internal/api/openapi.json", () => {
    const repo = JSON.parse(readFileSync(repoSchema, "utf8")) as typeof snapshot;
    expect(snapshot.components.schemas, "schema changed: run `npm run gen:schema` in clients/ts and fix the type errors").toEqual(repo.components.schemas);
  });

  it.skipIf(!process.env.AGENTD_BIN)("snapshot matches the live server's /api/openapi.json", { timeout: 60_000 }, async () => {
    const port = await new Promise<number>((resolve) => {
      const s = createServer();
      s.listen(0, "127.0.0.1", () => {
        const a = s.address() as { port: number };
        s.close(() => resolve(a.port));
      });
    });
    const proc = spawn(process.env.AGENTD_BIN!, ["serve", "--addr", `127.0.0.1:${port}`, "--data-dir", mkdtempSync(path.join(tmpdir(), "agentd-schema-"))], { stdio: "ignore" });
    try {
      let live: typeof snapshot | null = null;
      for (let i = 0; i < 100 && !live; i++) {
        try {
          const r = await fetch(`http://127.0.0.1:${port}/api/openapi.json`);
          if (r.ok) live = (await r.json()) as typeof snapshot;
        } catch {
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      expect(live, "server did not serve /api/openapi.json").not.toBeNull();
      expect(snapshot.components.schemas, "schema changed: run `npm run gen:schema -- http://HOST/api/openapi.json` and fix the type errors").toEqual(live!.components.schemas);
    } finally {
      proc.kill("SIGKILL");
    }
  });
});
