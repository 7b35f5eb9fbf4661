// A virtualized vertical list with measured, variable item heights. Only the
// items in (or near) the viewport are mounted, so a 5,000-block conversation
// costs as much DOM as a 30-block one. It follows the bottom while the user
// is there (a streaming conversation) and stays put when they scroll up.
import { memo, useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState, type ReactNode } from "react";

export interface VirtualListProps {
  count: number;
  itemKey: (index: number) => string;
  renderItem: (index: number) => ReactNode;
  /** Height guess for an item never measured. */
  estimate?: (index: number) => number;
  /** Pixels rendered beyond the viewport on each side. */
  overscan?: number;
  className?: string;
  testId?: string;
  /** Rendered after the last item (inside the scroller). */
  footer?: ReactNode;
  label?: string;
}

const BOTTOM_SLACK = 48;

export function VirtualList({ count, itemKey, renderItem, estimate, overscan = 800, className, testId, footer, label }: VirtualListProps) {
  const scroller = useRef<HTMLDivElement>(null);
  const heights = useRef(new Map<string, number>());
  const [, setVersion] = useState(0);
  const [scrollTop, setScrollTop] = useState(0);
  const [viewport, setViewport] = useState(800);
  const atBottom = useRef(true);
  const pending = useRef(false);

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
            for (const e of entries) {
              const el = e.target as HTMLElement;
              const key = el.dataset.vkey;
              if (!key) continue;
              const h = Math.ceil(e.borderBoxSize?.[0]?.blockSize ?? el.offsetHeight);
              // 0 means hidden (display: none on a parent), not an empty item:
              // keep the last real measurement.
              if (h === 0) continue;
              if (heights.current.get(key) !== h) {
                heights.current.set(key, h);
                changed = true;
              }
            }
            if (changed) bump();
          }),
    [bump],
  );
  useEffect(() => () => observer?.disconnect(), [observer]);

  // Prefix sums of item heights: O(count) per render, cheap next to painting.
  const est = estimate ?? (() => 64);
  const offsets = new Float64Array(count + 1);
  for (let i = 0; i < count; i++) offsets[i + 1] = offsets[i]! + (heights.current.get(itemKey(i)) ?? est(i));
  const total = offsets[count]!;

  const lo = Math.max(0, scrollTop - overscan);
  const hi = scrollTop + viewport + overscan;
  let start = upperBound(offsets, lo) - 1;
  if (start < 0) start = 0;
  let end = upperBound(offsets, hi);
  if (end > count) end = count;

  const onScroll = useCallback(() => {
    const el = scroller.current;
    if (!el) return;
    atBottom.current = el.scrollHeight - el.scrollTop - el.clientHeight < BOTTOM_SLACK;
    setScrollTop(el.scrollTop);
  }, []);

  useLayoutEffect(() => {
    const el = scroller.current;
    if (!el) return;
    const ro =
      typeof ResizeObserver === "undefined"
        ? null
        : new ResizeObserver(() => {
            if (el.clientHeight === 0) return; // hidden
            setViewport(el.clientHeight);
            // Shown again: the browser reset scrollTop while hidden.
            if (atBottom.current) el.scrollTop = el.scrollHeight;
            setScrollTop(el.scrollTop);
          });
    ro?.observe(el);
    setViewport(el.clientHeight);
    return () => ro?.disconnect();
  }, []);

  // Follow the output: after every render, stay pinned to the bottom if we were there.
  useLayoutEffect(() => {
    const el = scroller.current;
    if (el && atBottom.current && el.scrollHeight - el.scrollTop - el.clientHeight > 1) {
      el.scrollTop = el.scrollHeight;
      if (el.scrollTop !== scrollTop) setScrollTop(el.scrollTop);
    }
  });

  const items: ReactNode[] = [];
  for (let i = start; i < end; i++) {
    const key = itemKey(i);
    items.push(
      <Measured key={key} vkey={key} observer={observer}>
        {renderItem(i)}
      </Measured>,
    );
  }

  return (
    <div ref={scroller} className={className} data-testid={testId} onScroll={onScroll} role="log" aria-label={label} aria-live="off">
      <div style={{ height: total, position: "relative" }}>
        <div style={{ position: "absolute", top: 0, left: 0, right: 0, transform: `translateY(${offsets[start]}px)` }}>{items}</div>
      </div>
      {footer}
    </div>
  );
}

const Measured = memo(function Measured({ vkey, observer, children }: { vkey: string; observer: ResizeObserver | null; children: ReactNode }) {
  const ref = useRef<HTMLDivElement>(null);
  useLayoutEffect(() => {
    const el = ref.current;
    if (!el || !observer) return;
    observer.observe(el);
    return () => observer.unobserve(el);
  }, [observer]);
  return (
    <div ref={ref} data-vkey={vkey} className="vitem">
      {children}
    </div>
  );
});

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
