package main

import (
	"testing"

	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
	"github.com/agentd/agentd/store/storetest"
)

// The custom store passes the same conformance suite as agentd's own.
func TestCountingStoreConforms(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return &countingStore{Store: memstore.New()} })
}

func TestExampleRuns(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
