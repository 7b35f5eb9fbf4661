package memstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
	"github.com/agentd/agentd/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memstore.New() })
}

func TestArtifactQuota(t *testing.T) {
	storetest.RunArtifactQuota(t, func(t *testing.T, q store.ArtifactQuota) store.Store {
		s := memstore.New()
		s.SetArtifactQuota(q)
		return s
	})
}
