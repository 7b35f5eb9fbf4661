package session

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/store/memstore"
)

// The state cache holds at most max reducers and evicts the least recently
// read; what it returns is the log's state whatever was evicted.
func TestStateCacheEvictsTheLeastRecentlyRead(t *testing.T) {
	lg := eventlog.New(memstore.New(), eventlog.Options{})
	defer lg.Close()
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		if _, err := lg.Append(ctx, id, conversation.Upsert(conversation.Block{ID: id + "-0", Type: conversation.BlockAssistantText, Content: id})); err != nil {
			t.Fatal(err)
		}
	}
	c := newStateCache(lg, 2)
	get := func(id string) {
		t.Helper()
		st, err := c.get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Blocks) != 1 || st.Blocks[0].Content != id {
			t.Fatalf("state of %s: %+v", id, st.Blocks)
		}
	}
	cached := func() []string {
		c.mu.Lock()
		defer c.mu.Unlock()
		return slices.Sorted(maps.Keys(c.entries))
	}
	get("a")
	get("b")
	if got := cached(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("cached %v, want [a b]", got)
	}
	get("a") // b is now the least recently read
	get("c")
	if got := cached(); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("cached %v after reading a again and then c, want [a c]", got)
	}
	get("b")
	if got := cached(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("cached %v, want [b c]", got)
	}
}
