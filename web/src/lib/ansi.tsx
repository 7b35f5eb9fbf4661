// ANSI escape sequences in command output: colours and styles become
// styled spans (anser parses them); plain-text views strip them.
import Anser from "anser";
import type { ReactNode } from "react";

// CSI sequences (colours, cursor moves, erases), OSC sequences (titles,
// links) and the lone ESC forms: everything a plain-text view drops.
// eslint-disable-next-line no-control-regex
const ANSI_RE = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g;

/** text without escape sequences. */
export function stripAnsi(text: string): string {
  return text.includes("\x1b") ? text.replace(ANSI_RE, "") : text;
}

// Only colour and style (SGR) sequences are rendered; the rest is dropped
// before anser sees it, as a terminal would act on it rather than show it.
// eslint-disable-next-line no-control-regex
const NON_SGR_RE = /\x1b\[[0-?]*[ -/]*[@-ln-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g;

const NAMED = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"];

/** A colour of anser's class mode as [class, inline colour]. */
function colour(name: string | null, truecolor: string | undefined): [string, string] {
  if (!name) return ["", ""];
  if (name === "ansi-truecolor") return ["", truecolor ? `rgb(${truecolor})` : ""];
  const pal = /^ansi-palette-(\d+)$/.exec(name);
  if (pal) {
    const n = Number(pal[1]);
    if (n < 8) return [`ansi-${NAMED[n]}`, ""];
    if (n < 16) return [`ansi-bright-${NAMED[n - 8]}`, ""];
    if (n < 232) {
      const v = (x: number) => (x === 0 ? 0 : 55 + x * 40);
      const i = n - 16;
      return ["", `rgb(${v(Math.floor(i / 36))}, ${v(Math.floor(i / 6) % 6)}, ${v(i % 6)})`];
    }
    const g = 8 + (n - 232) * 10;
    return ["", `rgb(${g}, ${g}, ${g})`];
  }
  return [name, ""];
}

/** text as React nodes: coloured spans where escape sequences set colours. */
export function ansiNodes(text: string): ReactNode {
  if (!text.includes("\x1b")) return text;
  const entries = Anser.ansiToJson(text.replace(NON_SGR_RE, ""), { json: true, remove_empty: true, use_classes: true });
  return entries.map((e, i) => {
    const [fgClass, fg] = colour(e.fg, e.fg_truecolor);
    const [bgClass, bg] = colour(e.bg, e.bg_truecolor);
    const cls = [fgClass && `${fgClass}-fg`, bgClass && `${bgClass}-bg`, ...(e.decorations ?? []).map((d) => `ansi-${d}`)].filter(Boolean);
    const style: Record<string, string> = {};
    if (fg) style.color = fg;
    if (bg) style.backgroundColor = bg;
    if (cls.length === 0 && !fg && !bg) return e.content;
    return (
      <span key={i} className={cls.join(" ") || undefined} style={fg || bg ? style : undefined}>
        {e.content}
      </span>
    );
  });
}
