package api_test

import (
	"os"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/api"
)

// TestAPIDocIsCurrent keeps docs/api.md's generated sections (the route
// table, the bodies, the event payloads, the block fields) identical to
// what the route table and the Go types say, so the reference and the
// server cannot drift apart. Regenerate with:
// go test ./internal/api -run APIDoc -update
func TestAPIDocIsCurrent(t *testing.T) {
	const path = "../../docs/api.md"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for name, body := range api.APIDoc() {
		begin, end := "<!-- generated: "+name+" -->\n", "<!-- end: "+name+" -->"
		i := strings.Index(doc, begin)
		if i < 0 {
			t.Fatalf("docs/api.md has no %q", strings.TrimSpace(begin))
		}
		j := strings.Index(doc[i:], end)
		if j < 0 {
			t.Fatalf("docs/api.md has no %q", end)
		}
		from, to := i+len(begin), i+j
		if doc[from:to] == body {
			continue
		}
		if !*update {
			t.Errorf("docs/api.md's %s section differs from the code: run go test ./internal/api -run APIDoc -update", name)
			continue
		}
		doc = doc[:from] + body + doc[to:]
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Every route of the table is in the reference.
	for _, r := range api.Routes() {
		if !strings.Contains(doc, "`"+r.Method+" "+strings.ReplaceAll(r.Pattern, "...}", "…}")+"`") {
			t.Errorf("docs/api.md does not list %s %s", r.Method, r.Pattern)
		}
	}
}
