package wiring

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// The server's artifact store enforces the configured quota and counts
// puts, bytes put, bytes read back, refusals and the bytes stored.
func TestArtifactStoreQuotaAndMetrics(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	if err := st.CreateSession(ctx, store.Session{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	as := artifactStore(st, store.ArtifactQuota{Session: 100}, reg, slog.New(slog.DiscardHandler))
	data := bytes.Repeat([]byte("x"), 60)
	ref, err := as.PutArtifact(ctx, "s1", conversation.ArtifactRef{}, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as.PutArtifact(ctx, "s1", conversation.ArtifactRef{}, bytes.NewReader(bytes.Repeat([]byte("y"), 60))); !errors.Is(err, store.ErrArtifactQuota) {
		t.Fatalf("put over the quota: %v", err)
	}
	rc, err := as.OpenArtifact(ctx, "s1", ref.SHA256, 10, 20)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(rc); err != nil || len(b) != 20 {
		t.Fatalf("read %d bytes, %v", len(b), err)
	}
	rc.Close()
	for name, want := range map[string]float64{
		"agentd_artifact_puts_total":           1,
		"agentd_artifact_put_bytes_total":      60,
		"agentd_artifact_quota_refusals_total": 1,
		"agentd_artifact_served_bytes_total":   20,
		"agentd_artifact_stored_bytes":         60,
	} {
		got, err := gatherOne(reg, name)
		if err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", name, got, err, want)
		}
	}
	// A store without artifacts: none, and nothing registered.
	if as := artifactStore(noArtifacts{st}, store.ArtifactQuota{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler)); as != nil {
		t.Errorf("artifact store of a store without artifacts: %T", as)
	}
}

// noArtifacts hides the store's artifacts.
type noArtifacts struct{ store.Store }

func gatherOne(reg *prometheus.Registry, name string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			return 0, errors.New("not exactly one series")
		}
		m := mf.GetMetric()[0]
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), nil
		case m.Gauge != nil:
			return m.Gauge.GetValue(), nil
		}
	}
	return 0, errors.New("not found")
}
