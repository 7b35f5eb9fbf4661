package agentd_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
)

// bigTurn is a command printing lines*41 bytes or so (`seq … | sed …`, the
// shape of the measurement: 100,000 lines are 4.2 MB), and the
// output it prints.
func bigTurn(turn, lines int) (cmd string, out []byte) {
	suffix := fmt.Sprintf(" turn %02d: the quick brown fox jumps", turn)
	var b bytes.Buffer
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&b, "%d%s\n", i, suffix)
	}
	return fmt.Sprintf("seq 1 %d | sed 's/$/%s/'", lines, suffix), b.Bytes()
}

// procKB reads a field (VmRSS, VmHWM) of /proc/<pid>/status, in KiB.
func procKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// getState GETs the session's state (default page) and returns its body.
func getState(t *testing.T, url, id string) ([]byte, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := http.Get(url + "/api/sessions/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET state: %d %v", resp.StatusCode, err)
	}
	return body, took
}

// TestBoundedSessionMemory is the measurement: a shell session of
// 40 turns of 4.1 MB of output (`seq 1 100000 | sed …`, 164 MB) run by a real
// `agentd serve` process. The server's peak RSS (VmHWM: while it streams
// and while it serves the state) stays under 200 MB, the default GET of
// the state is under 1 MB, and after a restart opening the session and
// reading the artifacts stays as small; every turn's full output is
// byte-identical in its artifact, read whole and by Range over HTTP.
func TestBoundedSessionMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("164 MB of output")
	}
	if agentdtest.RaceEnabled {
		t.Skip("measures memory: not under the race detector, which multiplies it")
	}
	const turns, lines = 40, 100_000
	const rssMax = 200 << 10 // KiB
	data := t.TempDir()
	p := agentdtest.StartProcess(t, nil, "--data-dir", data, "--no-ui")
	ctx := context.Background()
	created, err := p.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	sums := map[string][32]byte{} // tool_use id → output's SHA-256
	outs := map[string][]byte{}
	total := 0
	for i := range turns {
		cmd, out := bigTurn(i, lines)
		total += len(out)
		sent, err := p.Client.Send(ctx, id, cmd)
		if err != nil {
			t.Fatal(err)
		}
		if end := waitTurn(t, p.Client, id, sent.QueryID); end.Type != conversation.TypeQueryCompleted {
			t.Fatalf("turn %d: %s", i, end.Payload)
		}
		sums["shell-"+sent.QueryID] = sha256.Sum256(out)
		if i == 0 || i == turns-1 {
			outs["shell-"+sent.QueryID] = out
		}
	}
	streamed := procKB(t, p.PID(), "VmHWM")

	body, took := getState(t, p.URL, id)
	for range 4 {
		_, d := getState(t, p.URL, id)
		took = min(took, d)
	}
	served := procKB(t, p.PID(), "VmHWM")
	t.Logf("%d turns, %.1f MB of output: peak RSS %.1f MB after streaming, %.1f MB after serving; GET state %d bytes in %v (best of 5)",
		turns, float64(total)/1e6, float64(streamed)/1024, float64(served)/1024, len(body), took)
	if served > rssMax {
		t.Errorf("the server's peak RSS is %d KiB, over %d", served, rssMax)
	}
	if len(body) >= 1<<20 {
		t.Errorf("GET state is %d bytes, want < 1 MiB", len(body))
	}
	var st restapi.SessionState
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.TotalBlocks != 3*turns || st.HasMore != (st.BlockOffset > 0) || len(st.Blocks)+st.BlockOffset != st.TotalBlocks {
		t.Fatalf("page: %d blocks at %d of %d, more %v", len(st.Blocks), st.BlockOffset, st.TotalBlocks, st.HasMore)
	}

	// Every turn's block names its output's artifact; read all pages.
	refs := map[string]conversation.ArtifactRef{}
	for before := ""; ; {
		page, err := p.Client.SessionPage(ctx, id, 0, before)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range page.Blocks {
			if b.Type != conversation.BlockToolResult {
				continue
			}
			sum := sums[b.ToolUseID]
			tr := b.Truncated
			if tr == nil || tr.Artifact == nil || tr.Artifact.SHA256 != hex.EncodeToString(sum[:]) {
				t.Fatalf("block %s: truncated %+v, want the artifact %x", b.ID, tr, sum)
			}
			refs[b.ToolUseID] = *tr.Artifact
		}
		if !page.HasMore {
			break
		}
		before = page.Blocks[0].ID
	}
	if len(refs) != turns {
		t.Fatalf("%d artifacts, want %d", len(refs), turns)
	}

	// After a restart, opening the session stays as small.
	p.Restart()
	start := procKB(t, p.PID(), "VmRSS")
	body2, took2 := getState(t, p.URL, id)
	reopened := procKB(t, p.PID(), "VmHWM")
	t.Logf("after a restart: RSS %.1f MB at start, peak %.1f MB after opening the session (GET %d bytes in %v)",
		float64(start)/1024, float64(reopened)/1024, len(body2), took2)
	if reopened > rssMax || len(body2) >= 1<<20 {
		t.Errorf("after a restart: peak RSS %d KiB, GET state %d bytes", reopened, len(body2))
	}

	// The artifacts hold the outputs byte for byte, whole and by Range
	// (GET /api/sessions/{id}/artifacts/{sha256}), after the restart.
	for tool, out := range outs {
		ref := refs[tool]
		url := p.URL + "/api/sessions/" + id + "/artifacts/" + ref.SHA256
		for _, r := range [][2]int{{0, -1}, {1, 10}, {len(out) / 2, 300_000}, {len(out) - 7, -1}} {
			req, _ := http.NewRequest("GET", url, nil)
			want, status := out[r[0]:], 200
			if r != [2]int{0, -1} {
				status = 206
				if r[1] < 0 {
					req.Header.Set("Range", fmt.Sprintf("bytes=%d-", r[0]))
				} else {
					req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", r[0], r[0]+r[1]-1))
					want = want[:r[1]]
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != status || !bytes.Equal(got, want) {
				t.Fatalf("%s: artifact range %v: %d, %d bytes, want %d, %d bytes (%v)", tool, r, resp.StatusCode, len(got), status, len(want), err)
			}
		}
	}
	if peak := procKB(t, p.PID(), "VmHWM"); peak > rssMax {
		t.Errorf("peak RSS %d KiB after serving the artifacts, over %d", peak, rssMax)
	}
}

// TestExecutorTruncatedTurnSurvivesKill9: a turn whose output is already
// truncated when the server is killed (kill -9) goes on after the restart
// (the executor sandbox keeps the command running): the new server takes
// up the spooled text, the shell re-sends what the log lacks, and the
// artifact holds the whole output, exactly once.
func TestExecutorTruncatedTurnSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers and executors")
	}
	data := t.TempDir()
	p := agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + t.TempDir()},
		"--data-dir", data, "--no-ui", "--sandbox", "executor", "--output-limit", "1KiB")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	created, err := p.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer dcancel()
		p.Client.DeleteSession(dctx, id, true)
	})
	const lines = 300
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line %d of a slow command\n", i)
	}
	sent, err := p.Client.Send(ctx, id, fmt.Sprintf(`for i in $(seq 1 %d); do echo "line $i of a slow command"; sleep 0.01; done`, lines))
	if err != nil {
		t.Fatal(err)
	}
	result := "shell-" + sent.QueryID + "-result"
	truncated := func() *conversation.Truncation {
		st, err := p.Client.Session(ctx, id)
		if err != nil {
			return nil
		}
		for _, b := range st.Blocks {
			if b.ID == result {
				return b.Truncated
			}
		}
		return nil
	}
	waitFor(t, func() bool { return truncated() != nil })
	time.Sleep(300 * time.Millisecond) // more output spooled than the log says
	p.Restart()
	if end := waitTurn(t, p.Client, id, sent.QueryID); end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("turn end: %s", end.Payload)
	}
	tr := truncated()
	sum := sha256.Sum256(want.Bytes())
	if tr == nil || tr.TotalBytes != int64(want.Len()) || tr.Artifact == nil || tr.Artifact.SHA256 != hex.EncodeToString(sum[:]) ||
		!strings.HasSuffix(want.String(), tr.Tail) {
		t.Fatalf("truncated %+v; want %d bytes, artifact %x", tr, want.Len(), sum)
	}
}

// TestKilledServerSettlesTruncatedText: a turn whose output is truncated
// when the server is killed (local sandbox: the command dies with it) is
// failed at the restart, and its block completed: the text as far as the
// log had it is stored from the spool as an artifact, and the spool is
// removed.
func TestKilledServerSettlesTruncatedText(t *testing.T) {
	data := t.TempDir()
	p := agentdtest.StartProcess(t, nil, "--data-dir", data, "--no-ui", "--output-limit", "1KiB")
	ctx := context.Background()
	created, err := p.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	var want bytes.Buffer
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&want, "line %d of a slow command\n", i)
	}
	sent, err := p.Client.Send(ctx, id, `for i in $(seq 1 1000); do echo "line $i of a slow command"; sleep 0.02; done`)
	if err != nil {
		t.Fatal(err)
	}
	result := "shell-" + sent.QueryID + "-result"
	block := func() conversation.Block {
		st, err := p.Client.Session(ctx, id)
		if err == nil {
			for _, b := range st.Blocks {
				if b.ID == result {
					return b
				}
			}
		}
		return conversation.Block{}
	}
	waitFor(t, func() bool { return block().Truncated != nil })
	p.Restart()
	if end := waitTurn(t, p.Client, id, sent.QueryID); end.Type != conversation.TypeQueryFailed {
		t.Fatalf("turn end: %s", end.Payload)
	}
	b := block()
	tr := b.Truncated
	if tr == nil || tr.Artifact == nil || tr.TotalBytes < 1024 || tr.Artifact.Size != tr.TotalBytes {
		t.Fatalf("truncated %+v", tr)
	}
	got, err := p.Client.Artifact(ctx, id, tr.Artifact.SHA256)
	if err != nil || !bytes.HasPrefix(want.Bytes(), got) || int64(len(got)) != tr.TotalBytes ||
		!strings.HasPrefix(string(got), b.Output) || !strings.HasSuffix(string(got), tr.Tail) {
		t.Fatalf("artifact of %d bytes (%v): not the output's first %d", len(got), err, tr.TotalBytes)
	}
	if _, err := os.Stat(filepath.Join(data, "spool", id)); !os.IsNotExist(err) {
		t.Fatalf("the spool is left: %v", err)
	}
}
