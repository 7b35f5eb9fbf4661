// An error boundary per pane: a view that throws shows what broke and a
// way to retry, and the rest of the app (sidebar, other panes) goes on.
import { Component, type ErrorInfo, type ReactNode } from "react";

interface Props {
  /** What the pane is, for the message ("conversation", "file viewer"…). */
  name: string;
  children: ReactNode;
  /** When this value changes, a failed pane tries again (e.g. the session id). */
  resetKey?: unknown;
  /** A one-line fallback for small parts (a single message) instead of a panel. */
  inline?: boolean;
}

interface State {
  error: Error | null;
  resetKey: unknown;
}

export class ErrorBoundary extends Component<Props, State> {
  override state: State = { error: null, resetKey: this.props.resetKey };

  static getDerivedStateFromError(error: unknown): Partial<State> {
    return { error: error instanceof Error ? error : new Error(String(error)) };
  }

  static getDerivedStateFromProps(props: Props, state: State): Partial<State> | null {
    if (props.resetKey !== state.resetKey) return { resetKey: props.resetKey, error: null };
    return null;
  }

  override componentDidCatch(error: Error, info: ErrorInfo): void {
    console.error(`agentd: the ${this.props.name} failed to render:`, error, info.componentStack);
  }

  override render(): ReactNode {
    const { error } = this.state;
    if (!error) return <FailPoint name={this.props.name}>{this.props.children}</FailPoint>;
    const retry = () => this.setState({ error: null });
    if (this.props.inline)
      return (
        <div className="pane-error inline" role="alert" data-testid="pane-error" data-pane={this.props.name}>
          This {this.props.name} could not be shown ({error.message}).{" "}
          <button type="button" className="linkish" onClick={retry}>
            Retry
          </button>
        </div>
      );
    return (
      <div className="pane-error" role="alert" data-testid="pane-error" data-pane={this.props.name}>
        <strong>The {this.props.name} could not be shown.</strong>
        <p className="small">The rest of agentd still works. {error.message}</p>
        <button type="button" onClick={retry}>
          Try again
        </button>
      </div>
    );
  }
}

/**
 * Throws while the browser tests ask this pane to fail
 * (window.__agentdFail holds pane names), so they can check that one
 * broken pane leaves the others working.
 */
function FailPoint({ name, children }: { name: string; children: ReactNode }): ReactNode {
  const fail = typeof window === "undefined" ? undefined : (window as { __agentdFail?: Set<string> }).__agentdFail;
  if (fail?.has(name)) throw new Error(`test fault in the ${name}`);
  return children;
}
