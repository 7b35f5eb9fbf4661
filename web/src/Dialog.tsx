// A modal dialog: takes the focus when it opens (its first field, else its
// first button), keeps Tab inside, closes on Escape and gives the focus
// back to what had it.
import { useEffect, useId, useRef, type ReactNode } from "react";

const FOCUSABLE = 'input:not([disabled]),select:not([disabled]),textarea:not([disabled]),button:not([disabled]),[href],[tabindex]:not([tabindex="-1"])';

export function Dialog({
  title,
  onClose,
  children,
  testId,
  onSubmit,
  wide,
}: {
  title: string;
  onClose: () => void;
  children: ReactNode;
  testId?: string;
  /** When set, the dialog is a form submitted by Enter and its submit button. */
  onSubmit?: () => void;
  wide?: boolean;
}) {
  const ref = useRef<HTMLElement | null>(null);
  const titleId = useId();
  useEffect(() => {
    const before = document.activeElement as HTMLElement | null;
    const el = ref.current;
    const first = el?.querySelector<HTMLElement>("input:not([type=hidden]):not([disabled]),select,textarea") ?? el?.querySelector<HTMLElement>(FOCUSABLE);
    first?.focus();
    return () => before?.focus?.();
  }, []);
  const onKeyDown = (e: React.KeyboardEvent) => {
    if (e.key === "Escape") {
      e.preventDefault();
      e.stopPropagation();
      onClose();
      return;
    }
    if (e.key !== "Tab" || !ref.current) return;
    const items = [...ref.current.querySelectorAll<HTMLElement>(FOCUSABLE)].filter((x) => x.offsetParent !== null);
    if (items.length === 0) return;
    const first = items[0]!;
    const last = items[items.length - 1]!;
    if (e.shiftKey && document.activeElement === first) {
      e.preventDefault();
      last.focus();
    } else if (!e.shiftKey && document.activeElement === last) {
      e.preventDefault();
      first.focus();
    }
  };
  const common = {
    className: `modal${wide ? " wide" : ""}`,
    role: "dialog",
    "aria-modal": true,
    "aria-labelledby": titleId,
    "data-testid": testId,
    onKeyDown,
  } as const;
  const body = (
    <>
      <h2 id={titleId}>{title}</h2>
      {children}
    </>
  );
  return (
    <div className="modal-backdrop" onMouseDown={(e) => e.target === e.currentTarget && onClose()}>
      {onSubmit ? (
        <form
          ref={(x) => {
            ref.current = x;
          }}
          {...common}
          onSubmit={(e) => {
            e.preventDefault();
            onSubmit();
          }}
        >
          {body}
        </form>
      ) : (
        <div
          ref={(x) => {
            ref.current = x;
          }}
          {...common}
        >
          {body}
        </div>
      )}
    </div>
  );
}
