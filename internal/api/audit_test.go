package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

type fixedUsage struct{}

func (fixedUsage) SessionUsage(ctx context.Context, id string) (conversation.Usage, int64) {
	return conversation.Usage{InputTokens: 7, OutputTokens: 3}, 500
}

func newAuditServer(t *testing.T, key string) (*httptest.Server, *memstore.Store, string) {
	t.Helper()
	st := memstore.New()
	e := newEnvOn(t, st, eventlog.Options{}, func(c *api.Config) { c.APIKey, c.Audit, c.ModelUsage = key, st, fixedUsage{} })
	rec, err := e.mgr.Create(context.Background(), session.CreateRequest{Architecture: "shell"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	var batch []store.AuditRecord
	for i := range 5 {
		batch = append(batch, store.AuditRecord{SessionID: rec.ID, Kind: store.AuditExecutor, Method: "exec.start", Outcome: store.AuditOK, BytesIn: int64(i)})
	}
	if err := st.AppendAudit(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	return e.srv, st, rec.ID
}

func getJSON(t *testing.T, url, key string, v any) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	if v != nil {
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, m
}

func TestAuditRoute(t *testing.T) {
	srv, _, id := newAuditServer(t, "")
	base := srv.URL + "/api/sessions/" + id + "/audit"

	var page api.AuditPage
	if code, _ := getJSON(t, base, "", &page); code != 200 || len(page.Records) != 5 || page.Last != page.Records[4].ID {
		t.Fatalf("all records: %d %+v", code, page)
	}
	if page.ModelUsage == nil || page.ModelUsage.InputTokens != 7 || page.TokenBudget != 500 {
		t.Fatalf("model usage %+v budget %d", page.ModelUsage, page.TokenBudget)
	}
	first := page.Records[0].ID
	var p2 api.AuditPage
	getJSON(t, base+"?after="+strconv.FormatInt(first, 10)+"&limit=2", "", &p2)
	if len(p2.Records) != 2 || p2.Records[0].ID != page.Records[1].ID || p2.Last != page.Records[2].ID {
		t.Fatalf("page after %d limit 2: %+v", first, p2)
	}
	var end api.AuditPage
	_, raw := getJSON(t, base+"?after="+strconv.FormatInt(page.Last, 10), "", &end)
	if len(end.Records) != 0 || end.Last != page.Last {
		t.Fatalf("past the end: %+v", end)
	}
	if recs, ok := raw["records"].([]any); !ok || len(recs) != 0 {
		t.Fatalf("an empty page must have records: [] (got %v)", raw["records"])
	}

	for _, bad := range []string{"?after=-1", "?after=x", "?limit=0", "?limit=many", "?after=1.5"} {
		if code, body := getJSON(t, base+bad, "", nil); code != 400 || body["code"] != "INVALID_CURSOR" {
			t.Errorf("%s: %d %v, want 400 INVALID_CURSOR", bad, code, body)
		}
	}
	if code, body := getJSON(t, srv.URL+"/api/sessions/nope/audit", "", nil); code != 404 || body["code"] != "SESSION_NOT_FOUND" {
		t.Fatalf("unknown session: %d %v", code, body)
	}
}

func TestAuditRouteNeedsTheKey(t *testing.T) {
	srv, _, id := newAuditServer(t, "k")
	if code, body := getJSON(t, srv.URL+"/api/sessions/"+id+"/audit", "", nil); code != 401 || body["code"] != "UNAUTHORIZED" {
		t.Fatalf("without the key: %d %v", code, body)
	}
	if code, _ := getJSON(t, srv.URL+"/api/sessions/"+id+"/audit", "k", nil); code != 200 {
		t.Fatalf("with the key: %d", code)
	}
}
