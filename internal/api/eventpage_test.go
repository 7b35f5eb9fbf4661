package api_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// stallingStore holds the event log's writer after a batch is stored and
// before it is published, when armed.
type stallingStore struct {
	*memstore.Store
	armed   chan struct{} // receives once per batch to hold
	stored  chan struct{}
	release chan struct{}
}

func (s *stallingStore) AppendEvents(ctx context.Context, evs []conversation.Event, fence ...store.Fence) error {
	err := s.Store.AppendEvents(ctx, evs, fence...)
	select {
	case <-s.armed:
		s.stored <- struct{}{}
		<-s.release
	default:
	}
	return err
}

// TestEventPageLastSeqCoversItsEvents: a page read while a batch is stored
// but not yet published carries that batch; its lastSeq must not be below
// the page's last event (the chaos test saw lastSeq 362 with event 363).
func TestEventPageLastSeqCoversItsEvents(t *testing.T) {
	st := &stallingStore{Store: memstore.New(), armed: make(chan struct{}, 1), stored: make(chan struct{}), release: make(chan struct{})}
	e := newEnvOn(t, st, eventlog.Options{}, nil)
	ctx, mgr, lg := context.Background(), e.mgr, e.log
	rec, err := mgr.Create(ctx, session.CreateRequest{Architecture: "shell"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	st.armed <- struct{}{}
	appended := make(chan error, 1)
	go func() {
		_, err := lg.Append(ctx, rec.ID, conversation.NewEvent(conversation.LogEvent{Message: "held"}))
		appended <- err
	}()
	<-st.stored
	var page restapi.EventPage
	_, _ = getJSON(t, e.srv.URL+"/api/sessions/"+rec.ID+"/events", "", &page)
	close(st.release)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	if n := len(page.Events); n == 0 || page.LastSeq < page.Events[n-1].Seq {
		b, _ := json.Marshal(page)
		t.Fatalf("page %s: lastSeq below its last event", b)
	}
}
