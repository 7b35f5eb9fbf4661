package wiring

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// artifactStore returns st's artifact store with the configured quota,
// metered into reg, or nil when st keeps no artifacts. It is the one
// artifact store of the server: the session manager holds it
// (session.Manager.Artifacts) and the API reaches it there.
func artifactStore(st store.Store, q store.ArtifactQuota, reg prometheus.Registerer, log *slog.Logger) store.ArtifactStore {
	as, ok := st.(store.ArtifactStore)
	if !ok {
		log.Warn("the store keeps no artifacts: large outputs are cut without a full copy, and uploads are refused")
		return nil
	}
	if qs, ok := st.(store.ArtifactQuotaSetter); ok {
		qs.SetArtifactQuota(q)
	} else if q != (store.ArtifactQuota{}) {
		log.Warn("the store's artifact quota cannot be set: the configured quota is not enforced", "session", q.Session, "total", q.Total)
	}
	return newMeteredArtifacts(as, reg)
}

// meteredArtifacts counts what goes through an ArtifactStore: puts, the
// bytes put, quota refusals, and the bytes read back (served); a gauge
// reports the bytes the store holds (distinct content, the whole fleet's).
type meteredArtifacts struct {
	store.ArtifactStore
	puts, putBytes, refusals, served prometheus.Counter
}

// usageTimeout bounds the store query behind the stored-bytes gauge.
const usageTimeout = 5 * time.Second

func newMeteredArtifacts(as store.ArtifactStore, reg prometheus.Registerer) *meteredArtifacts {
	m := &meteredArtifacts{
		ArtifactStore: as,
		puts: prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_artifact_puts_total",
			Help: "Artifacts stored (a put of content a session already holds counts too)."}),
		putBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_artifact_put_bytes_total",
			Help: "Bytes of the artifacts stored by this server, before deduplication."}),
		refusals: prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_artifact_quota_refusals_total",
			Help: "Artifact puts refused for a session's or the store's quota."}),
		served: prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_artifact_served_bytes_total",
			Help: "Bytes of artifacts read back by this server (downloads, and the server's own reads)."}),
	}
	stored := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentd_artifact_stored_bytes",
		Help: "Bytes of distinct artifact content in the store (shared by a fleet); -1 when the store did not answer."},
		func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), usageTimeout)
			defer cancel()
			n, err := as.ArtifactUsage(ctx, "")
			if err != nil {
				return -1
			}
			return float64(n)
		})
	if reg != nil {
		reg.MustRegister(m.puts, m.putBytes, m.refusals, m.served, stored)
	}
	return m
}

func (m *meteredArtifacts) PutArtifact(ctx context.Context, sessionID string, meta conversation.ArtifactRef, r io.Reader) (conversation.ArtifactRef, error) {
	ref, err := m.ArtifactStore.PutArtifact(ctx, sessionID, meta, r)
	switch {
	case err == nil:
		m.puts.Inc()
		m.putBytes.Add(float64(ref.Size))
	case errors.Is(err, store.ErrArtifactQuota):
		m.refusals.Inc()
	}
	return ref, err
}

func (m *meteredArtifacts) OpenArtifact(ctx context.Context, sessionID, sha256 string, off, n int64) (io.ReadCloser, error) {
	rc, err := m.ArtifactStore.OpenArtifact(ctx, sessionID, sha256, off, n)
	if err != nil {
		return nil, err
	}
	return &countingReader{ReadCloser: rc, c: m.served}, nil
}

type countingReader struct {
	io.ReadCloser
	c prometheus.Counter
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if n > 0 {
		r.c.Add(float64(n))
	}
	return n, err
}
