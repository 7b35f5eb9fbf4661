import { createContext, useContext, useEffect, useState, useSyncExternalStore } from "react";
import type { AgentdClient, ConnectionState, Conversation, EventSocket } from "@agentd/client";

export interface App {
  client: AgentdClient;
  socket: EventSocket;
  /** Called when the server answers 401: ask for the key again. */
  unauthorized: () => void;
}

export const AppContext = createContext<App | null>(null);

export function useApp(): App {
  const a = useContext(AppContext);
  if (!a) throw new Error("useApp outside AppContext");
  return a;
}

export function useConnectionState(socket: EventSocket): ConnectionState {
  return useSyncExternalStore(
    (cb) => socket.onStateChange(cb),
    () => socket.state,
  );
}

/** Re-renders every `ms` with the current time (for countdowns and "2 min ago"). */
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}

/**
 * Runs cb once on the next animation frame, or after 250 ms if frames are
 * not being drawn (a background tab), so queued events never pile up.
 */
export function frameScheduler(cb: () => void): void {
  let done = false;
  const run = () => {
    if (done) return;
    done = true;
    cb();
  };
  requestAnimationFrame(run);
  setTimeout(run, 250);
}

/** Counters the browser tests read through window.__agentd. */
export const stats = {
  /** Renders of each block view, by block id. */
  blockRenders: new Map<string, number>(),
  /** Conversation state commits (one per animation frame at most). */
  commits: 0,
  /** Events received from the socket, and how many of them were block:delta. */
  events: 0,
  deltas: 0,
};

export interface TestHooks {
  dropConnection: () => void;
  socket: EventSocket;
  conversation: Conversation | null;
  stats: typeof stats;
  connects: () => number;
  /** Token refreshes done by this page (OIDC sign-ins). */
  refreshes: () => number;
  /** Stops (true) or restarts the refresh timers, as a frozen tab would. */
  holdRefreshTimers: (held: boolean) => void;
}

declare global {
  interface Window {
    __agentd?: TestHooks;
  }
}

export function relTime(iso: string | undefined, now: number): string {
  if (!iso) return "";
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "";
  const s = Math.round((now - t) / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(t).toLocaleDateString();
}
