import { useEffect, useRef, useState } from "react";
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";
import { openPty, type PtyConnection } from "@agentd/client";
import { useApp } from "./app-context";

/** A shell on a PTY in the session's sandbox, over GET /api/sessions/{id}/pty. */
export default function TerminalTab({ sessionId, visible }: { sessionId: string; visible: boolean }) {
  const { client } = useApp();
  const host = useRef<HTMLDivElement>(null);
  const fitRef = useRef<FitAddon | null>(null);
  const [status, setStatus] = useState<"connecting" | "open" | "exited" | "closed">("connecting");
  const [gen, setGen] = useState(0);
  const ptyRef = useRef<PtyConnection | null>(null);
  // The token the terminal was opened (or last renewed) with: when the app
  // refreshes its token, the open terminal is given the new one, else the
  // server closes it (4001) as the old one expires.
  const tokenRef = useRef<string | undefined>(undefined);
  const token = client.apiKey;

  useEffect(() => {
    const el = host.current;
    if (!el) return;
    const term = new Terminal({
      convertEol: false,
      cursorBlink: true,
      fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
      fontSize: 13,
      scrollback: 5000,
    });
    const fit = new FitAddon();
    fitRef.current = fit;
    term.loadAddon(fit);
    term.open(el);
    try {
      fit.fit();
    } catch {
      // not laid out yet; refit when visible
    }
    setStatus("connecting");
    let pty: PtyConnection | null = null;
    tokenRef.current = client.apiKey;
    pty = openPty(client, sessionId, {
      rows: term.rows,
      cols: term.cols,
      onOpen: () => {
        setStatus("open");
        term.focus();
      },
      onData: (bytes) => term.write(bytes),
      onExit: (code) => {
        setStatus("exited");
        term.write(`\r\n[process exited with code ${code}]\r\n`);
      },
      onClose: () => setStatus((s) => (s === "exited" ? s : "closed")),
      onAuth: (r) => {
        if (!r.ok) console.warn(`agentd terminal: the refreshed token was refused: ${r.code ?? ""} ${r.error ?? ""}`);
      },
    });
    ptyRef.current = pty;
    const d1 = term.onData((d) => pty?.write(d));
    const d2 = term.onBinary((d) => pty?.write(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff)));
    const d3 = term.onResize(({ rows, cols }) => pty?.resize(rows, cols));
    const ro = new ResizeObserver(() => {
      if (el.offsetParent === null) return; // hidden
      try {
        fit.fit();
      } catch {
        // ignore
      }
    });
    ro.observe(el);
    return () => {
      ro.disconnect();
      d1.dispose();
      d2.dispose();
      d3.dispose();
      pty?.close();
      ptyRef.current = null;
      term.dispose();
      fitRef.current = null;
    };
  }, [client, sessionId, gen]);

  useEffect(() => {
    if (token === undefined || token === tokenRef.current || !ptyRef.current) return;
    tokenRef.current = token;
    ptyRef.current.reauth(token);
  }, [token]);

  useEffect(() => {
    if (!visible) return;
    try {
      fitRef.current?.fit();
    } catch {
      // ignore
    }
  }, [visible]);

  return (
    <div className="terminal-tab">
      <div className="terminal-bar small">
        <span data-testid="terminal-status">{status === "open" ? "connected" : status}</span>
        {(status === "exited" || status === "closed") && (
          <button type="button" onClick={() => setGen((g) => g + 1)}>
            New shell
          </button>
        )}
      </div>
      <div ref={host} className="xterm-host" data-testid="terminal" />
    </div>
  );
}
