// A virtualized vertical list with measured, variable item heights. Only the
// items in (or near) the viewport are mounted, so a 5,000-block conversation
// costs as much DOM as a 30-block one. It follows the bottom while the user
// is there (a streaming conversation) and stays put when they scroll up.
// Scrolling re-renders only when the mounted range changes, and an item
// re-renders only when its own data object changes.
//
// While it follows the bottom, the mounted range is computed from the end
// of the list (enough items to fill the viewport), never from scrollTop: the
// scroll position it sets after each render must not feed back into the
// range. (Deriving it from scrollTop there made a loop: the mounted items,
// taller than their estimates, moved scrollHeight, the pin moved scrollTop,
// the range changed and mounted other items, and so on until React gave up
// with "maximum update depth exceeded", blanking the app.) Range updates made
// during layout are also capped per frame, so no layout can loop.
//
// Items put before the first one (an older page of the conversation) keep
// the reader's place: the scroll position moves by their height, as it does
// when the header above the items changes height.
import { memo, useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState, type ReactNode } from "react";
import { ErrorBoundary } from "./ErrorBoundary";

export interface VirtualListProps<T> {
  items: readonly T[];
  itemKey: (item: T) => string;
  /** Must be pure: an item is re-rendered only when its object changes. */
  renderItem: (item: T) => ReactNode;
  /** Height guess for an item never measured. */
  estimate?: (item: T) => number;
  /** Pixels rendered beyond the viewport on each side. */
  overscan?: number;
  className?: string;
  testId?: string;
  /** Rendered after the last item (inside the scroller). */
  footer?: ReactNode;
  /** Rendered before the first item (inside the scroller), e.g. "Show earlier messages". */
  header?: ReactNode;
  label?: string;
  id?: string;
}

const BOTTOM_SLACK = 48;
/** Range updates allowed during layout in one frame before waiting for the next. */
const LAYOUT_SYNCS_PER_FRAME = 4;

export function VirtualList<T>({ items, itemKey, renderItem, estimate, overscan = 600, className, testId, footer, header, label, id }: VirtualListProps<T>) {
  const scroller = useRef<HTMLDivElement>(null);
  const heights = useRef(new Map<string, number>());
  const [, setVersion] = useState(0);
  const [range, setRange] = useState<[number, number]>([Math.max(0, items.length - 30), items.length]);
  const atBottom = useRef(true);
  const [away, setAway] = useState(false);
  const pending = useRef(false);
  const offsetsRef = useRef<Float64Array>(new Float64Array(1));
  const indexRef = useRef(new Map<string, number>());
  const anchorDelta = useRef(0); // height change above the viewport, to keep the reader's place
  const layoutSyncs = useRef(0);
  const headerRef = useRef<HTMLDivElement>(null);
  const headerHeight = useRef(0);
  const firstKey = useRef<string | undefined>(undefined); // items[0]'s key at the last layout
  const placed = useRef<[string, number][]>([]); // the mounted items' keys and tops at the last layout

  const bump = useCallback(() => {
    if (pending.current) return;
    pending.current = true;
    requestAnimationFrame(() => {
      pending.current = false;
      setVersion((v) => v + 1);
    });
  }, []);

  const observer = useMemo(
    () =>
      typeof ResizeObserver === "undefined"
        ? null
        : new ResizeObserver((entries) => {
            let changed = false;
            const el = scroller.current;
            const top = el?.scrollTop ?? 0;
            for (const e of entries) {
              const node = e.target as HTMLElement;
              const key = node.dataset.vkey;
              if (!key) continue;
              const h = Math.ceil(e.borderBoxSize?.[0]?.blockSize ?? node.offsetHeight);
              // 0 means hidden (display: none on a parent), not an empty item:
              // keep the last real measurement.
              if (h === 0) continue;
              const old = heights.current.get(key);
              if (old !== h) {
                const i = indexRef.current.get(key);
                // An item wholly above the viewport changed: the content the
                // reader looks at moves by the difference unless we follow.
                if (i !== undefined && !atBottom.current && offsetsRef.current[i + 1]! <= top) {
                  anchorDelta.current += h - (old ?? offsetsRef.current[i + 1]! - offsetsRef.current[i]!);
                }
                heights.current.set(key, h);
                changed = true;
              }
            }
            if (changed) bump();
          }),
    [bump],
  );
  useEffect(() => () => observer?.disconnect(), [observer]);

  // Prefix sums of item heights: O(items) per render, cheap next to painting.
  const count = items.length;
  const offsets = new Float64Array(count + 1);
  const index = new Map<string, number>();
  for (let i = 0; i < count; i++) {
    const it = items[i]!;
    const k = itemKey(it);
    index.set(k, i);
    offsets[i + 1] = offsets[i]! + (heights.current.get(k) ?? (estimate ? estimate(it) : 64));
  }
  offsetsRef.current = offsets;
  indexRef.current = index;
  const total = offsets[count]!;

  // The mounted range: the tail while following the bottom, else around
  // the scroll position.
  const computeRange = useCallback(
    (el: HTMLDivElement): [number, number] => {
      const offs = offsetsRef.current;
      const n = offs.length - 1;
      const viewport = el.clientHeight || 800;
      const head = headerRef.current?.offsetHeight ?? 0;
      if (atBottom.current) {
        let start = upperBound(offs, Math.max(0, offs[n]! - viewport - overscan)) - 1;
        if (start < 0) start = 0;
        return [start, n];
      }
      const top = Math.max(0, el.scrollTop - head);
      let start = upperBound(offs, Math.max(0, top - overscan)) - 1;
      if (start < 0) start = 0;
      let end = upperBound(offs, top + viewport + overscan);
      if (end > n) end = n;
      return [start, end];
    },
    [overscan],
  );

  const sync = useCallback(() => {
    const el = scroller.current;
    if (!el) return;
    const [s, e] = computeRange(el);
    setRange((r) => (r[0] === s && r[1] === e ? r : [s, e]));
  }, [computeRange]);

  const onScroll = useCallback(() => {
    const el = scroller.current;
    if (!el) return;
    atBottom.current = el.scrollHeight - el.scrollTop - el.clientHeight < BOTTOM_SLACK;
    setAway(!atBottom.current);
    sync();
  }, [sync]);

  const toBottom = useCallback(() => {
    const el = scroller.current;
    if (!el) return;
    atBottom.current = true;
    setAway(false);
    el.scrollTop = el.scrollHeight;
    sync();
  }, [sync]);

  useLayoutEffect(() => {
    const el = scroller.current;
    if (!el || typeof ResizeObserver === "undefined") return;
    const ro = new ResizeObserver(() => {
      if (el.clientHeight === 0) return; // hidden
      // Shown again (the browser reset scrollTop while hidden) or resized.
      if (atBottom.current) el.scrollTop = el.scrollHeight;
      sync();
    });
    ro.observe(el);
    return () => ro.disconnect();
  }, [sync]);

  // After every render: keep the reader's place (pinned to the bottom, or
  // anchored where they scrolled to), and make sure the mounted range
  // matches the (possibly re-measured) layout, a bounded number of times
  // per frame.
  useLayoutEffect(() => {
    const el = scroller.current;
    if (!el) return;
    // Items put before the first one, or a header grown or shrunk, move
    // what the reader looks at: move the scroll position with it.
    const head = headerRef.current?.offsetHeight ?? 0;
    let above = head - headerHeight.current;
    headerHeight.current = head;
    const first = count > 0 ? itemKey(items[0]!) : undefined;
    if (firstKey.current !== undefined && first !== firstKey.current) {
      // The first item mounted before that is still there says how far
      // things moved (the old first item itself may be gone: a tool result
      // shown alone joins its call when the call arrives).
      for (const [k, top] of placed.current) {
        const i = indexRef.current.get(k);
        if (i === undefined) continue;
        above += offsetsRef.current[i]! - top;
        break;
      }
    }
    firstKey.current = first;
    placed.current = [];
    for (let i = start; i < end; i++) placed.current.push([itemKey(items[i]!), offsetsRef.current[i]!]);
    if (above !== 0 && !atBottom.current) anchorDelta.current += above;
    if (atBottom.current) {
      if (el.scrollHeight - el.scrollTop - el.clientHeight > 1) el.scrollTop = el.scrollHeight;
    } else if (anchorDelta.current !== 0) {
      el.scrollTop += anchorDelta.current;
    }
    anchorDelta.current = 0;
    if (layoutSyncs.current >= LAYOUT_SYNCS_PER_FRAME) return;
    if (layoutSyncs.current++ === 0) {
      requestAnimationFrame(() => {
        const again = layoutSyncs.current > LAYOUT_SYNCS_PER_FRAME - 1;
        layoutSyncs.current = 0;
        if (again) sync(); // the cap cut a sequence short: finish it now
      });
    }
    sync();
  });

  const [start, end] = [Math.min(range[0], count), Math.min(range[1], count)];
  const mounted: ReactNode[] = [];
  for (let i = start; i < end; i++) {
    const it = items[i]!;
    const key = itemKey(it);
    mounted.push(<Measured key={key} vkey={key} observer={observer} item={it} render={renderItem as (x: unknown) => ReactNode} />);
  }

  return (
    <div ref={scroller} id={id} className={className} data-testid={testId} onScroll={onScroll} role="log" aria-label={label} aria-live="off" tabIndex={0}>
      {header != null && <div ref={headerRef}>{header}</div>}
      <div style={{ height: total, position: "relative" }}>
        <div style={{ position: "absolute", top: offsets[start], left: 0, right: 0 }}>{mounted}</div>
      </div>
      {footer}
      {away && count > 0 && (
        <button type="button" className="jump-latest" data-testid="jump-latest" onClick={toBottom}>
          ↓ Latest
        </button>
      )}
    </div>
  );
}

const Measured = memo(
  function Measured({ vkey, observer, item, render }: { vkey: string; observer: ResizeObserver | null; item: unknown; render: (x: unknown) => ReactNode }) {
    const ref = useRef<HTMLDivElement>(null);
    useLayoutEffect(() => {
      const el = ref.current;
      if (!el || !observer) return;
      observer.observe(el);
      return () => observer.unobserve(el);
    }, [observer]);
    return (
      <div ref={ref} data-vkey={vkey} className="vitem">
        <ErrorBoundary name="message" inline resetKey={item}>
          {render(item)}
        </ErrorBoundary>
      </div>
    );
  },
  (a, b) => a.item === b.item && a.vkey === b.vkey && a.observer === b.observer,
);

/** The first index i with a[i] > x. */
function upperBound(a: Float64Array, x: number): number {
  let l = 0;
  let r = a.length;
  while (l < r) {
    const m = (l + r) >> 1;
    if (a[m]! <= x) l = m + 1;
    else r = m;
  }
  return l;
}
