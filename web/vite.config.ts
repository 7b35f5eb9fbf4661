/// <reference types="vitest/config" />
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The client package is compiled from source so the UI never runs a stale
// build of it; `npm run build:client` still builds its dist for publishing.
const clientSrc = fileURLToPath(new URL("../clients/ts/src/index.ts", import.meta.url));

export default defineConfig({
  plugins: [
    react(),
    {
      // dist/ is emptied on build; keep the placeholder that lets `go build`
      // embed dist on a fresh clone without node.
      name: "keep-gitkeep",
      closeBundle() {
        writeFileSync(fileURLToPath(new URL("dist/.gitkeep", import.meta.url)), "");
      },
    },
  ],
  resolve: { alias: { "@agentd/client": clientSrc } },
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false, chunkSizeWarningLimit: 1024 },
  server: {
    proxy: {
      // `AGENTD_URL=http://127.0.0.1:8080 npm run dev` develops against a running server.
      "/api": { target: process.env.AGENTD_URL ?? "http://127.0.0.1:8080", ws: true },
      "/health": process.env.AGENTD_URL ?? "http://127.0.0.1:8080",
    },
  },
  test: { include: ["test/**/*.test.{ts,tsx}"], environment: "node" },
});
