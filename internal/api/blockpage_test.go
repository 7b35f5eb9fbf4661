package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"slices"
	"testing"

	"github.com/agentd/agentd/restapi"
)

// getState GETs the session's state with query q.
func (e *env) getState(id, q string) (restapi.SessionState, int) {
	e.t.Helper()
	resp := e.request("GET", "/api/sessions/"+id+q, "")
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		e.t.Fatalf("GET state%s: %d %s", q, resp.StatusCode, data)
	}
	var st restapi.SessionState
	if err := json.Unmarshal(data, &st); err != nil {
		e.t.Fatal(err)
	}
	return st, len(data)
}

// TestSessionStatePages: GET /api/sessions/{id} returns the last blocks,
// and ?limit/?before page back through all of them, with blockOffset,
// totalBlocks and hasMore saying where the page is; long outputs keep the
// default page under its byte bound; bad parameters are 400.
func TestSessionStatePages(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	for i := range 6 {
		cmd := fmt.Sprintf("echo turn %d", i)
		if i%2 == 1 {
			cmd = "head -c 300000 /dev/zero | tr '\\0' a" // longer than the output limit
		}
		code, out := e.do("POST", "/api/sessions/"+id+"/messages", fmt.Sprintf(`{"content":%q}`, cmd))
		if code != 202 {
			t.Fatalf("message: %d %v", code, out)
		}
		e.waitTurn(id, out["queryId"].(string))
	}
	all, _ := e.getState(id, "?limit=1000")
	if len(all.Blocks) != 18 || all.TotalBlocks != 18 || all.BlockOffset != 0 || all.HasMore {
		t.Fatalf("all: %d blocks, total %d, offset %d, more %v", len(all.Blocks), all.TotalBlocks, all.BlockOffset, all.HasMore)
	}
	for _, b := range all.Blocks {
		if len(b.Output) > 32<<10 {
			t.Fatalf("block %s keeps %d bytes of output", b.ID, len(b.Output))
		}
	}
	def, _ := e.getState(id, "")
	if !reflect.DeepEqual(def.Blocks, all.Blocks) {
		t.Fatal("the default page is not every block of a short session")
	}
	var paged [][]string
	q := "?limit=4"
	for {
		st, _ := e.getState(id, q)
		if st.TotalBlocks != 18 || st.HasMore != (st.BlockOffset > 0) || len(st.Blocks) == 0 || len(st.Blocks) > 4 {
			t.Fatalf("page %s: %d blocks at %d of %d, more %v", q, len(st.Blocks), st.BlockOffset, st.TotalBlocks, st.HasMore)
		}
		var ids []string
		for i, b := range st.Blocks {
			if b.ID != all.Blocks[st.BlockOffset+i].ID {
				t.Fatalf("page %s: block %d is %s, want %s", q, i, b.ID, all.Blocks[st.BlockOffset+i].ID)
			}
			ids = append(ids, b.ID)
		}
		paged = append([][]string{ids}, paged...)
		if !st.HasMore {
			break
		}
		q = "?limit=4&before=" + url.QueryEscape(st.Blocks[0].ID)
	}
	if n := len(slices.Concat(paged...)); n != 18 {
		t.Fatalf("the pages hold %d blocks, want 18", n)
	}
	for _, bad := range []string{"?limit=0", "?limit=x", "?limit=1001", "?before=", "?before=nope"} {
		expectCode(t, e.request("GET", "/api/sessions/"+id+bad, ""), 400, "BAD_REQUEST")
	}
}
