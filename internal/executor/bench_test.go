package executor

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/sandbox"
)

// counter is a server side that only counts output and acknowledges it.
type counter struct {
	n      atomic.Int64
	window int64
	acked  int64
	c      *rpc.Client
	exit   chan rpc.ExecExitParams
}

func (h *counter) HandleCall(context.Context, *rpc.Conn, *rpc.Request) (any, error) {
	return nil, rpc.Errorf(rpc.CodeMethodNotFound, "no")
}

func (h *counter) HandleNotify(c *rpc.Conn, method string, params json.RawMessage) {
	if method == rpc.MethodExecExit {
		var p rpc.ExecExitParams
		_ = json.Unmarshal(params, &p)
		h.exit <- p
	}
}

func (h *counter) HandleOutput(c *rpc.Conn, p rpc.ExecOutputParams) {
	n := h.n.Add(int64(len(p.Data)))
	if h.window > 0 && n-h.acked >= h.window/4 {
		h.acked = n
		_ = c.Notify(rpc.MethodExecAck, rpc.ExecAckParams{Tag: p.Tag, Offsets: sandbox.Offsets{Stdout: n}})
	}
}

// BenchmarkPingRPC: ping round trip over the socket, both ends in process.
func BenchmarkPingRPC(b *testing.B) {
	bt := &benchEnv{}
	c := bt.start(b)
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := c.Ping(context.Background()); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	reportPct(b, ds, time.Microsecond, "µs")
}

// BenchmarkExecStartExit: exec.start of `true` → exec.exit, raw protocol.
func BenchmarkExecStartExit(b *testing.B) {
	bt := &benchEnv{}
	c := bt.start(b)
	h := bt.h
	var ds []time.Duration
	i := 0
	for b.Loop() {
		i++
		tag := "t" + strconv.Itoa(i)
		t0 := time.Now()
		if _, err := c.ExecStart(context.Background(), rpc.ExecStartParams{Tag: tag, Argv: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		<-h.exit
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		_ = c.ExecRelease(context.Background(), tag)
		b.StartTimer()
	}
	reportPct(b, ds, time.Microsecond, "µs")
}

// BenchmarkExecLocal: the same `true` → exit on the local sandbox the
// executor wraps, in this process: BenchmarkExecStartExit minus this is
// what the protocol adds.
func BenchmarkExecLocal(b *testing.B) {
	env, err := local.New(local.Options{}).Create(context.Background(), sandbox.Spec{Workspace: filepath.Join(shortTempDir(b), "ws")})
	if err != nil {
		b.Fatal(err)
	}
	defer env.Terminate(context.Background())
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		p, err := env.Exec(context.Background(), sandbox.Cmd{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		for range p.Output() {
		}
		if _, err := p.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	reportPct(b, ds, time.Microsecond, "µs")
}

// BenchmarkOutputRPC: `head -c 500M /dev/zero` through an in-process
// executor and the codec, acknowledging as a server would; output as JSON
// lines (base64) or binary frames.
func BenchmarkOutputRPC(b *testing.B) {
	for _, binary := range []bool{false, true} {
		b.Run(map[bool]string{false: "json", true: "binary"}[binary], func(b *testing.B) {
			benchOutputRPC(b, binary)
		})
	}
}

func benchOutputRPC(b *testing.B, binary bool) {
	bt := &benchEnv{binary: binary}
	c := bt.start(b)
	h := bt.h
	h.window = 8 << 20
	const total = 500 << 20
	b.SetBytes(total)
	i := 0
	for b.Loop() {
		i++
		h.n.Store(0)
		h.acked = 0
		tag := "o" + strconv.Itoa(i)
		if _, err := c.ExecStart(context.Background(), rpc.ExecStartParams{Tag: tag, Argv: []string{"head", "-c", strconv.Itoa(total), "/dev/zero"}, Window: h.window}); err != nil {
			b.Fatal(err)
		}
		x := <-h.exit
		if x.End.Stdout != total || h.n.Load() != total {
			b.Fatalf("exit %+v, got %d", x, h.n.Load())
		}
		_ = c.ExecRelease(context.Background(), tag)
	}
}

type benchEnv struct {
	h      *counter
	binary bool
}

func (be *benchEnv) start(b *testing.B) *rpc.Client {
	te := startExecutor(b, nil)
	be.h = &counter{exit: make(chan rpc.ExecExitParams, 10)}
	c, err := rpc.Dial(context.Background(), te.socket, be.h, rpc.ConnOptions{AcceptBinary: be.binary})
	if err != nil {
		b.Fatal(err)
	}
	if be.binary {
		if r, err := c.SetOptions(context.Background(), rpc.ConnOptionsParams{BinaryOutput: true}); err != nil || !r.BinaryOutput {
			b.Fatal(r, err)
		}
	}
	be.h.c = c
	b.Cleanup(func() { c.Close(); c.Wait() })
	return c
}

func reportPct(b *testing.B, ds []time.Duration, unit time.Duration, name string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	pct := func(p float64) float64 { return float64(ds[int(float64(len(ds)-1)*p)]) / float64(unit) }
	b.ReportMetric(pct(0.5), "p50-"+name)
	b.ReportMetric(pct(0.99), "p99-"+name)
}
