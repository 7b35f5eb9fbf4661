package bench

import (
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/store/postgres/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(stampLinesEnv) != "" {
		// Run as the latency benchmark's stamper, not as tests.
		os.Exit(runStamper(os.Stdout))
	}
	if os.Getenv(clientURLEnv) != "" {
		// Run as the latency benchmark's client process.
		os.Exit(runClientProc(os.Stdin, os.Stdout))
	}
	if os.Getenv(fanoutURLEnv) != "" {
		// Run as the fan-out latency benchmark's subscriber process.
		os.Exit(runFanoutProc(os.Stdin, os.Stdout))
	}
	// The local sandbox that agentd.New builds logs through the default
	// logger, not Config.Logger.
	slog.SetDefault(quietLogger())
	goleak.VerifyTestMain(m,
		// The Socket.IO library keeps package-level timers and pools.
		goleak.IgnoreAnyFunction("github.com/zishang520/socket.io/v3/pkg/queue.(*Queue).run"),
		// Idle keep-alive connections of http.DefaultClient (the Go client's
		// default) wind down after the test servers close.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		// The PostgreSQL server a benchmark may have started.
		goleak.Cleanup(func(code int) { pgtest.Stop(); os.Exit(code) }),
	)
}

func TestPercentileNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(101-i)*time.Millisecond) // unsorted on purpose
	}
	sum := Summarize(s)
	want := Summary{N: 100, P50: 50 * time.Millisecond, P95: 95 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if sum != want {
		t.Fatalf("Summarize = %+v, want %+v", sum, want)
	}
	if got := Percentile([]time.Duration{7}, 99); got != 7 {
		t.Fatalf("one sample: p99 = %v", got)
	}
	if got := Summarize(nil); got != (Summary{}) {
		t.Fatalf("empty sample: %+v", got)
	}
	// Small samples: p99 of 10 values is the largest, p50 the fifth.
	ten := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := Percentile(ten, 99); p != 10 {
		t.Fatalf("p99 of 10 = %v", p)
	}
	if p := Percentile(ten, 50); p != 5 {
		t.Fatalf("p50 of 10 = %v", p)
	}
}

func TestStampLinesSplitAnywhere(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	out := ""
	for i := range 5 {
		out += strconv.FormatInt(base.Add(time.Duration(i)*time.Millisecond).UnixNano(), 10) + "\n"
	}
	recv := base.Add(10 * time.Millisecond)
	for cut := 0; cut <= len(out); cut++ {
		var p StampLines
		lat, err := p.Feed(out[:cut], recv, nil)
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		lat, err = p.Feed(out[cut:], recv, lat)
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		if len(lat) != 5 || p.Pending() {
			t.Fatalf("cut %d: %d latencies, pending %v", cut, len(lat), p.Pending())
		}
		for i, d := range lat {
			if want := time.Duration(10-i) * time.Millisecond; d != want {
				t.Fatalf("cut %d: line %d latency %v, want %v", cut, i, d, want)
			}
		}
	}
}

func TestStampLinesRejectsGarbageButKeepsGoing(t *testing.T) {
	var p StampLines
	now := time.Now()
	ok := strconv.FormatInt(now.Add(-time.Millisecond).UnixNano(), 10)
	lat, err := p.Feed("hello world\n"+ok+"\n-5\n\n", now, nil)
	if !errors.Is(err, ErrBadStamp) {
		t.Fatalf("err = %v, want ErrBadStamp", err)
	}
	if len(lat) != 1 || lat[0] != time.Millisecond {
		t.Fatalf("latencies %v", lat)
	}
	if _, err := p.Feed("123", now, nil); err != nil || !p.Pending() {
		t.Fatalf("partial line: err %v pending %v", err, p.Pending())
	}
	if _, err := p.Feed("x\n", now, nil); !errors.Is(err, ErrBadStamp) {
		t.Fatalf("completed garbage line: %v", err)
	}
}

func TestFrameSeq(t *testing.T) {
	cases := []struct {
		frame string
		seq   int64
		ok    bool
	}{
		{`{"op":"event","event":{"seq":42,"type":"block:delta"}}`, 42, true},
		{`{"op":"event","event":{"seq":1,"type":"status"}}`, 1, true},
		{`{"op":"ack","id":"j","ok":true}`, 0, false},
		{`{"op":"event","event":{"seq":0,"type":"x"}}`, 0, false},
		{`{"op":"event","event":{"seq":-1,"type":"x"}}`, 0, false},
		{`{"op":"event","event":{"seq":12`, 0, false},
		{`{"op":"event","event":{"seq":,"type":"x"}}`, 0, false},
		{`{"op":"event","event":{"seq":99999999999999999999,"t":1}}`, 0, false},
		{``, 0, false},
	}
	for _, c := range cases {
		seq, ok := FrameSeq([]byte(c.frame))
		if seq != c.seq || ok != c.ok {
			t.Errorf("FrameSeq(%s) = %d, %v; want %d, %v", c.frame, seq, ok, c.seq, c.ok)
		}
	}
}

func FuzzStampLines(f *testing.F) {
	f.Add("1800000000000000000\n18000000", "00000000001\nfoo\n")
	f.Add("", "\n\n")
	f.Add("9223372036854775807\n", "-1\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		var p StampLines
		now := time.Unix(1_900_000_000, 0)
		lat, _ := p.Feed(a, now, nil)
		lat, _ = p.Feed(b, now, lat)
		// Every completed line yields at most one latency; the parser never
		// invents lines.
		if lines := strings.Count(a+b, "\n"); len(lat) > lines {
			t.Fatalf("%d latencies from %d lines", len(lat), lines)
		}
		if p.Pending() != (len(a+b) > 0 && !strings.HasSuffix(a+b, "\n")) {
			t.Fatalf("pending %v for %q", p.Pending(), a+b)
		}
	})
}

func FuzzFrameSeq(f *testing.F) {
	f.Add([]byte(`{"op":"event","event":{"seq":42,"type":"block:delta"}}`))
	f.Add([]byte(`{"op":"event","event":{"seq":`))
	f.Add([]byte(`{"op":"ack"}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		seq, ok := FrameSeq(frame)
		if ok != (seq > 0) {
			t.Fatalf("ok %v with seq %d", ok, seq)
		}
		if ok && !strings.Contains(string(frame), strconv.FormatInt(seq, 10)) {
			t.Fatalf("seq %d not in frame %q", seq, frame)
		}
	})
}
