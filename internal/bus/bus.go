// Package bus connects the agentd servers of a fleet over NATS (core NATS:
// subjects, request/reply; no JetStream). It carries bytes and knows
// nothing of what they mean: the event log publishes committed events on
// it (eventlog.Peers), the session manager forwards commands to the server
// holding a session's lease and announces session changes
// (session.Cluster). Nothing on the bus is durable: the store is the
// truth, and every consumer can tell when it may have missed messages (a
// reconnect, messages dropped for a slow consumer) and reads the store
// again.
//
// Subjects, under a prefix (default "agentd", one per fleet sharing a NATS
// server):
//
//	<prefix>.ev.<session>   events committed for a session (eventlog)
//	<prefix>.rq.<session>   commands for the session's lease holder (request/reply)
//	<prefix>.notice         session created, changed, deleted, released
//
// A Bus is safe for concurrent use.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrNoResponder: nobody serves the session's commands (no server holds
// its lease, or the holder died).
var ErrNoResponder = errors.New("bus: no server answers for the session")

// ErrInvalidSubject: a session id that cannot be a NATS subject token.
var ErrInvalidSubject = errors.New("bus: session id cannot be used as a subject")

// Options configure Open.
type Options struct {
	// URL is the NATS server (nats://host:port; several comma-separated).
	URL string
	// Prefix starts every subject (default "agentd"). Fleets sharing a
	// NATS server need one each.
	Prefix string
	// Name names the connection (the node id) in the NATS server's view.
	Name string
	// ConnectTimeout bounds the first connection (default 10s).
	ConnectTimeout time.Duration
	// Registerer receives the bus's metrics when set.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Bus is a NATS connection and what agentd uses it for.
type Bus struct {
	nc     *nats.Conn
	prefix string
	url    string
	log    *slog.Logger
	m      *metrics

	mu      sync.Mutex // guards follows, lastErr
	follows map[*follow]struct{}
	lastErr string
}

// follow is one Follow: its NATS subscription and the function told about
// possible losses.
type follow struct {
	sub  *nats.Subscription
	lost func()
}

// Open connects to NATS. It fails when the server cannot be reached within
// ConnectTimeout; once connected it reconnects by itself for ever, and
// Status says whether it is connected.
func Open(ctx context.Context, opts Options) (*Bus, error) {
	if opts.URL == "" {
		return nil, errors.New("bus: no NATS URL")
	}
	if opts.Prefix == "" {
		opts.Prefix = "agentd"
	}
	for _, tok := range strings.Split(opts.Prefix, ".") {
		if !validToken(tok) {
			return nil, fmt.Errorf("bus: subject prefix %q: want dot-separated tokens of letters, digits, '-' and '_'", opts.Prefix)
		}
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	b := &Bus{prefix: opts.Prefix, url: opts.URL, log: opts.Logger.With("bus", "nats"), m: newMetrics(opts.Registerer), follows: map[*follow]struct{}{}}
	nopts := []nats.Option{
		nats.Name(opts.Name),
		// A server's own events and notices are delivered to it locally.
		nats.NoEcho(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(opts.ConnectTimeout),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // our own Close
			}
			b.m.disconnects.Inc()
			b.setErr(err)
			b.log.Warn("NATS connection lost; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			b.setErr(nil)
			b.log.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted())
			// Whatever was published while we were away is lost to us.
			b.lostAll()
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			b.log.Warn("NATS error", "subject", subject(sub), "err", err)
			if errors.Is(err, nats.ErrSlowConsumer) {
				b.m.dropped.Inc()
				b.lost(sub)
			}
		}),
	}
	type result struct {
		nc  *nats.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(opts.URL, nopts...)
		ch <- result{nc, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("bus: connect to %s: %w", redact(opts.URL), r.err)
		}
		b.nc = r.nc
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("bus: connect to %s: %w", redact(opts.URL), ctx.Err())
	}
	b.log.Info("NATS connected", "url", b.nc.ConnectedUrlRedacted(), "prefix", b.prefix)
	return b, nil
}

// Close closes the connection; every subscription ends.
func (b *Bus) Close() {
	b.nc.Close()
}

// Status describes the connection for /health.
type Status struct {
	Connected bool   `json:"connected"`
	URL       string `json:"url"`
	Error     string `json:"error,omitempty"`
}

// Status reports whether the bus is connected.
func (b *Bus) Status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Status{Connected: b.nc.IsConnected(), URL: redact(b.url)}
	if !st.Connected {
		st.Error = b.lastErr
		if st.Error == "" {
			st.Error = b.nc.Status().String()
		}
	}
	return st
}

func (b *Bus) setErr(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastErr = ""
	if err != nil {
		b.lastErr = err.Error()
	}
}

// ---- events (eventlog.Peers) ----

// Publish sends msg to the servers following session. It does not wait
// for them (NATS buffers, in order).
func (b *Bus) Publish(session string, msg []byte) error {
	subj, err := b.subject("ev", session)
	if err != nil {
		return err
	}
	if err := b.nc.Publish(subj, msg); err != nil {
		return fmt.Errorf("bus: publish: %w", err)
	}
	b.m.published.Inc()
	b.m.publishedBytes.Add(float64(len(msg)))
	return nil
}

// Follow calls deliver with every message published for session by other
// servers, in their publication order, from one goroutine, until stop; and
// with nil when messages may have been lost (the connection was re-made,
// or messages were dropped because deliver fell behind). It returns once
// the NATS server knows of the subscription, so every message published
// after it returns is delivered (or reported lost).
func (b *Bus) Follow(session string, deliver func(msg []byte)) (stop func(), err error) {
	subj, err := b.subject("ev", session)
	if err != nil {
		return nil, err
	}
	f := &follow{lost: func() { deliver(nil) }}
	sub, err := b.nc.Subscribe(subj, func(m *nats.Msg) {
		b.m.received.Inc()
		deliver(m.Data)
	})
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe: %w", err)
	}
	f.sub = sub
	b.mu.Lock()
	b.follows[f] = struct{}{}
	b.mu.Unlock()
	// A round trip: the server has the subscription once the PONG is back.
	if err := b.nc.FlushTimeout(5 * time.Second); err != nil {
		// Not fatal: the subscription is kept and NATS registers it when it
		// can; until then we may miss messages, which a later gap shows.
		b.log.Warn("NATS flush after subscribe", "subject", subj, "err", err)
	}
	return func() {
		b.mu.Lock()
		delete(b.follows, f)
		b.mu.Unlock()
		_ = sub.Unsubscribe()
	}, nil
}

// lostAll tells every follower that messages may have been lost.
func (b *Bus) lostAll() {
	b.mu.Lock()
	fs := make([]*follow, 0, len(b.follows))
	for f := range b.follows {
		fs = append(fs, f)
	}
	b.mu.Unlock()
	for _, f := range fs {
		go f.lost()
	}
}

// lost tells sub's follower that messages were dropped.
func (b *Bus) lost(sub *nats.Subscription) {
	b.mu.Lock()
	var found *follow
	for f := range b.follows {
		if f.sub == sub {
			found = f
		}
	}
	b.mu.Unlock()
	if found != nil {
		go found.lost()
	}
}

// ---- commands (request/reply) ----

// Request sends req to the server serving session's commands and returns
// its reply. ErrNoResponder: nobody serves them.
func (b *Bus) Request(ctx context.Context, session string, req []byte) ([]byte, error) {
	subj, err := b.subject("rq", session)
	if err != nil {
		return nil, err
	}
	b.m.requests.Inc()
	if _, ok := ctx.Deadline(); !ok {
		// A request the server routed to a subscription being removed
		// gets no reply: never wait for ever.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultRequestTimeout)
		defer cancel()
	}
	m, err := b.nc.RequestWithContext(ctx, subj, req)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, ErrNoResponder
	}
	if err != nil {
		return nil, fmt.Errorf("bus: request: %w", err)
	}
	return m.Data, nil
}

// Serve answers session's commands with handle until stop. Commands are
// handled one at a time, in arrival order; handle's context ends at stop.
// Serve returns once the NATS server knows of the subscription. Every
// command the NATS server routed here before stop is handled and answered,
// even after stop returns (with handle's context ended); stop does not
// wait for them, so it may be called from a goroutine that handle waits on.
func (b *Bus) Serve(session string, handle func(ctx context.Context, req []byte) []byte) (stop func(), err error) {
	subj, err := b.subject("rq", session)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	sub, err := b.nc.Subscribe(subj, func(m *nats.Msg) {
		b.m.served.Inc()
		reply := handle(ctx, m.Data)
		if err := m.Respond(reply); err != nil {
			b.log.Warn("NATS reply", "subject", subj, "err", err)
		}
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("bus: subscribe: %w", err)
	}
	if err := b.nc.FlushTimeout(5 * time.Second); err != nil {
		b.log.Warn("NATS flush after subscribe", "subject", subj, "err", err)
	}
	return func() {
		cancel()
		// Drained, not dropped: a request the NATS server delivered
		// before it had the unsubscription is still handled and answered
		// (its sender would otherwise wait out its whole timeout for a
		// reply that never comes). Drain returns at once; the pending
		// requests are handled in the background.
		if err := sub.Drain(); err != nil {
			_ = sub.Unsubscribe()
		}
		// Once the server has the unsubscription, requests get "no
		// responders" at once instead of going unanswered.
		_ = b.nc.FlushTimeout(time.Second)
	}, nil
}

// DefaultRequestTimeout bounds a Request whose context has no deadline.
const DefaultRequestTimeout = 30 * time.Second

// ---- notices ----

// Announce sends a notice to every other server of the fleet.
func (b *Bus) Announce(msg []byte) error {
	if err := b.nc.Publish(b.prefix+".notice", msg); err != nil {
		return fmt.Errorf("bus: announce: %w", err)
	}
	return nil
}

// Notices calls deliver with every notice of the other servers, from one
// goroutine, until stop; with nil when notices may have been lost.
func (b *Bus) Notices(deliver func(msg []byte)) (stop func(), err error) {
	f := &follow{lost: func() { deliver(nil) }}
	sub, err := b.nc.Subscribe(b.prefix+".notice", func(m *nats.Msg) { deliver(m.Data) })
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe: %w", err)
	}
	f.sub = sub
	b.mu.Lock()
	b.follows[f] = struct{}{}
	b.mu.Unlock()
	if err := b.nc.FlushTimeout(5 * time.Second); err != nil {
		b.log.Warn("NATS flush after subscribe", "subject", sub.Subject, "err", err)
	}
	return func() {
		b.mu.Lock()
		delete(b.follows, f)
		b.mu.Unlock()
		_ = sub.Unsubscribe()
	}, nil
}

// ---- helpers ----

func (b *Bus) subject(kind, session string) (string, error) {
	if !validToken(session) {
		return "", fmt.Errorf("%w: %q", ErrInvalidSubject, session)
	}
	return b.prefix + "." + kind + "." + session, nil
}

// validToken: a non-empty subject token of letters, digits, '-' and '_'
// (session ids are UUIDs; anything else a client sends must not reach
// NATS as wildcards or extra tokens).
func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func subject(sub *nats.Subscription) string {
	if sub == nil {
		return ""
	}
	return sub.Subject
}

// redact drops the user information of each URL.
func redact(url string) string {
	parts := strings.Split(url, ",")
	for i, p := range parts {
		if scheme, rest, ok := strings.Cut(p, "://"); ok {
			if at := strings.LastIndex(rest, "@"); at >= 0 {
				parts[i] = scheme + "://***@" + rest[at+1:]
			}
		}
	}
	return strings.Join(parts, ",")
}

type metrics struct {
	published, publishedBytes, received, requests, served, dropped, disconnects prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &metrics{
		published:      c("agentd_bus_event_messages_published_total", "Event messages this server published on the bus."),
		publishedBytes: c("agentd_bus_event_bytes_published_total", "Bytes of event messages this server published on the bus."),
		received:       c("agentd_bus_event_messages_received_total", "Event messages received from other servers."),
		requests:       c("agentd_bus_requests_total", "Commands this server forwarded to a session's lease holder."),
		served:         c("agentd_bus_requests_served_total", "Commands other servers forwarded to this server."),
		dropped:        c("agentd_bus_slow_consumer_total", "Times the NATS client dropped messages for a slow handler (the store fills the gap)."),
		disconnects:    c("agentd_bus_disconnects_total", "Times the NATS connection was lost."),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.publishedBytes, m.received, m.requests, m.served, m.dropped, m.disconnects)
	}
	return m
}
