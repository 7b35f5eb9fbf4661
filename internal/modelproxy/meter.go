package modelproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

type stateKey struct{}

// reqState is one proxied request, from its arrival to the end of its
// answer's body.
type reqState struct {
	session string
	prov    Provider
	rest    string // the upstream path
	method  string
	start   time.Time
	in      *countingReader
	done    sync.Once
	// owner and tenant are the session's (Config.Owners), key the owner's
	// own provider key when it has one.
	owner, tenant, key string
}

func stateOf(ctx context.Context) *reqState {
	st, _ := ctx.Value(stateKey{}).(*reqState)
	if st == nil {
		return &reqState{} // not reached: ServeHTTP always sets it
	}
	return st
}

// finish records the request once: usage into the session's account and
// the metrics, one audit record.
func (st *reqState) finish(p *Proxy, status int, outcome store.AuditOutcome, errMsg string, usage *conversation.Usage, model string) {
	st.finishOut(p, status, outcome, errMsg, usage, model, 0)
}

func (st *reqState) finishOut(p *Proxy, status int, outcome store.AuditOutcome, errMsg string, usage *conversation.Usage, model string, out int64) {
	st.done.Do(func() {
		if usage != nil {
			p.account(context.Background(), st.session).add(*usage)
			p.cfg.Metrics.tokens(st.prov, *usage)
			p.charge(st, model, *usage)
		}
		p.cfg.Metrics.request(st.prov, status)
		p.cfg.Metrics.duration(st.prov, time.Since(st.start))
		if p.cfg.Audit == nil {
			return
		}
		var in int64
		if st.in != nil {
			in = st.in.n.Load()
		}
		rec := store.AuditRecord{
			SessionID: st.session, Time: st.start, Kind: store.AuditModel, Method: st.method, Path: st.rest,
			Provider: string(st.prov), Model: model, Outcome: outcome, Status: status, Error: errMsg,
			BytesIn: in, BytesOut: out, DurationMs: time.Since(st.start).Milliseconds(), Usage: usage,
		}
		if p.cfg.Actor != nil {
			rec.Actor = p.cfg.Actor(st.session)
		}
		if rec.Actor == "" {
			rec.Actor = st.owner
		}
		p.cfg.Audit.Record(rec)
	})
}

// countingReader counts the request body bytes sent upstream. Once a body
// of known length (size >= 0) has been read whole, it answers io.EOF
// without reading the server's body again. The transport copying it
// upstream reads once more after the last byte to check for EOF, and by
// then Go's server may have closed the body: it does so when the answer
// starts (here, as soon as the upstream answers). That read would fail
// with "invalid Read on closed Body", the transport would close the
// upstream connection, and the proxy would reset the client (Claude
// Code's subagent saw ECONNRESET once in the web e2e test).
type countingReader struct {
	rc   io.ReadCloser
	size int64 // the request's Content-Length; -1 when unknown
	n    atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	if c.size >= 0 && c.n.Load() >= c.size {
		return 0, io.EOF
	}
	n, err := c.rc.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingReader) Close() error { return c.rc.Close() }

// meterResponse wraps the answer's body so its bytes are counted and its
// usage read as they pass, and the request is recorded when the body is
// closed (the reverse proxy closes it after copying, also when the client
// went away).
func (p *Proxy) meterResponse(resp *http.Response) error {
	st := stateOf(resp.Request.Context())
	resp.Body = &meter{
		rc: resp.Body, p: p, st: st, status: resp.StatusCode, length: resp.ContentLength,
		parser: newUsageParser(st.prov, resp.Header.Get("Content-Type")),
	}
	return nil
}

// meter reads the upstream body for the reverse proxy. Read and Close are
// called from the proxy's copying goroutine only.
type meter struct {
	rc     io.ReadCloser
	p      *Proxy
	st     *reqState
	status int
	parser *usageParser
	length int64 // Content-Length, -1 when unknown
	n      int64
	eof    bool
	err    error
}

func (m *meter) Read(b []byte) (int, error) {
	n, err := m.rc.Read(b)
	if n > 0 {
		m.n += int64(n)
		_, _ = m.parser.Write(b[:n])
	}
	if errors.Is(err, io.EOF) {
		m.eof = true
	} else if err != nil {
		m.err = err
	}
	if m.length >= 0 && m.n >= m.length && m.err == nil {
		// A client that knows the length has the whole answer as soon as
		// these bytes reach it, possibly before the proxy reads EOF and
		// closes the body: record the request first, so usage read after
		// the answer always includes it.
		m.eof = true
		m.record()
	}
	return n, err
}

func (m *meter) Close() error {
	err := m.rc.Close()
	m.record()
	return err
}

// record finishes the request (once: reqState.finishOut) from what was read.
func (m *meter) record() {
	u, model, ok := m.parser.Result()
	var usage *conversation.Usage
	if ok {
		usage = &u
	}
	outcome, msg := store.AuditOK, ""
	switch {
	case m.status >= 400:
		outcome = store.AuditError
		msg = http.StatusText(m.status)
	case !m.eof:
		outcome = store.AuditAborted
		msg = "the answer was cut off"
		if m.err != nil {
			msg += ": " + m.err.Error()
		}
	}
	m.st.finishOut(m.p, m.status, outcome, msg, usage, model, m.n)
}
