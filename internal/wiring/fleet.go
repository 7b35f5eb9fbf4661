package wiring

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/bus"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/postgres"
	"github.com/agentd/agentd/store/sqlite"
)

// busCluster is the bus as the session manager's Cluster.
type busCluster struct{ *bus.Bus }

func (c busCluster) Request(ctx context.Context, sessionID string, req []byte) ([]byte, error) {
	rep, err := c.Bus.Request(ctx, sessionID, req)
	if errors.Is(err, bus.ErrNoResponder) {
		return nil, fmt.Errorf("%w: %v", session.ErrNoHolder, err)
	}
	return rep, err
}

// health answers GET /health: this node, its store, its artifacts and
// its bus. The status is "degraded" when the store or the artifacts'
// object store does not answer or the bus (in a fleet) is disconnected.
func (s *Server) health(ctx context.Context) restapi.Health {
	h := restapi.Health{Status: "ok", Version: s.cfg.Version, Node: s.node}
	st := &restapi.ComponentHealth{Kind: storeKind(s.store), Status: "ok"}
	if p, ok := s.store.(store.Pinger); ok {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := p.Ping(pctx); err != nil {
			st.Status, st.Error = "error", err.Error()
			h.Status = "degraded"
		}
		cancel()
	}
	h.Store = st
	h.Artifacts = s.artifactsHealth(ctx)
	if h.Artifacts.Status == "error" {
		h.Status = "degraded"
	}
	if s.bus == nil {
		h.Bus = &restapi.ComponentHealth{Kind: "none", Status: "off"}
		return h
	}
	bs := s.bus.Status()
	h.Bus = &restapi.ComponentHealth{Kind: "nats", Status: "ok", URL: bs.URL}
	if !bs.Connected {
		h.Bus.Status, h.Bus.Error = "disconnected", bs.Error
		h.Status = "degraded"
	}
	return h
}

// artifactsHealth reports where artifact content is kept, and whether
// the object store (if any) answers.
func (s *Server) artifactsHealth(ctx context.Context) *restapi.ComponentHealth {
	if s.blobs != nil {
		h := &restapi.ComponentHealth{Kind: "s3", Status: "ok", URL: s.blobs.String()}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := s.blobs.Ping(pctx); err != nil {
			h.Status, h.Error = "error", err.Error()
		}
		return h
	}
	if _, ok := s.store.(store.ArtifactStore); ok {
		return &restapi.ComponentHealth{Kind: "store", Status: "ok"}
	}
	return &restapi.ComponentHealth{Kind: "none", Status: "off"}
}

func storeKind(st store.Store) string {
	switch st.(type) {
	case *postgres.Store:
		return "postgres"
	case *sqlite.Store:
		return "sqlite"
	}
	return "custom"
}
