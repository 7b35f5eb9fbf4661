package opencode

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/agent/agentproc"
	"github.com/agentd/agentd/sandbox"
)

// ParseListening returns the base URL from the line `opencode serve`
// prints once it accepts connections ("opencode server listening on
// http://127.0.0.1:4096"). Only an http URL on a loopback address counts:
// the runner never talks to anything else.
func ParseListening(line string) (string, bool) {
	_, rest, ok := strings.Cut(line, "listening on ")
	if !ok {
		return "", false
	}
	raw := strings.TrimSpace(rest)
	if i := strings.IndexAny(raw, " \t"); i >= 0 {
		raw = raw[:i]
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Port() == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return "", false
	}
	ip := net.ParseIP(u.Hostname())
	if u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", false
	}
	return "http://" + u.Host, true
}

// server is one `opencode serve` process and the HTTP client talking to it.
// Its methods are safe for concurrent use.
type server struct {
	proc     *agentproc.Proc
	base     string
	password string
	http     *http.Client
	version  string

	cancel     context.CancelFunc // ends the event stream
	streamDone chan struct{}      // closed when the event stream ended
	done       chan struct{}      // closed when the event stream and stdout readers ended

	mu     sync.Mutex // guards events
	events error      // why the event stream ended (nil while it runs)
}

func randomPassword() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// startServer starts `opencode serve` in env and waits for its listening
// line. stdout lines after it go to logLine.
func startServer(ctx context.Context, a Architecture, env sandbox.Environment, logLine func([]byte)) (*server, error) {
	pw, err := randomPassword()
	if err != nil {
		return nil, agent.Fail(agent.CodeInternal, "opencode: server password: %v", err)
	}
	home := path.Join(env.WorkDir(), HomeDir)
	proc, err := agentproc.Start(ctx, env, "opencode", sandbox.Cmd{
		Argv: []string{a.command(), "serve", "--hostname", "127.0.0.1", "--port", "0"},
		Env: map[string]string{
			"XDG_CONFIG_HOME":                  home + "/config",
			"XDG_DATA_HOME":                    home + "/data",
			"XDG_CACHE_HOME":                   home + "/cache",
			"XDG_STATE_HOME":                   home + "/state",
			"OPENCODE_SERVER_PASSWORD":         pw,
			"OPENCODE_DISABLE_AUTOUPDATE":      "1",
			"OPENCODE_DISABLE_MODELS_FETCH":    "1",
			"OPENCODE_DISABLE_LSP_DOWNLOAD":    "1",
			"OPENCODE_DISABLE_EMBEDDED_WEB_UI": "1",
		},
	})
	if err != nil {
		return nil, err
	}
	s := &server{proc: proc, password: pw, done: make(chan struct{}), streamDone: make(chan struct{}),
		http: &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}}
	for {
		select {
		case l, ok := <-proc.Lines():
			if !ok {
				<-proc.Done()
				return nil, proc.ExitError()
			}
			if u, ok := ParseListening(string(l.Data)); ok {
				s.base = u
				return s, nil
			}
			logLine(l.Data)
		case <-ctx.Done():
			proc.Stop(context.WithoutCancel(ctx), a.stopGrace())
			go func() { // drain what is left so the process can be reaped
				for range proc.Lines() {
				}
			}()
			return nil, ctx.Err()
		}
	}
}

// drainStdout logs what the server prints after its listening line until
// it exits.
func (s *server) drainStdout(logLine func([]byte)) {
	for l := range s.proc.Lines() {
		logLine(l.Data)
	}
}

// httpError is a non-2xx answer.
type httpError struct {
	Status int
	Body   string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.Status, strings.TrimSpace(e.Body))
}

// call does one request; out (when non-nil) receives the JSON answer.
func (s *server) call(ctx context.Context, method, p string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+p, rd)
	if err != nil {
		return err
	}
	req.SetBasicAuth("opencode", s.password)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("opencode %s %s: %w", method, p, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("opencode %s %s: %w", method, p, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("opencode %s %s: %w", method, p, &httpError{Status: resp.StatusCode, Body: string(data)})
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("opencode %s %s: %w", method, p, err)
		}
	}
	return nil
}

// subscribe opens GET /event and calls onEvent with each event's data, in
// order, until ctx ends or the stream breaks; connected is closed once the
// stream answered.
func (s *server) subscribe(ctx context.Context, connected chan<- struct{}, onEvent func([]byte)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/event", nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth("opencode", s.password)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("opencode event stream: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("opencode event stream: %w", &httpError{Status: resp.StatusCode, Body: string(b)})
	}
	close(connected)
	return readSSE(resp.Body, agentproc.MaxLine, onEvent)
}

// errLineTooLong marks an SSE line longer than the bound; it is skipped.
var errLineTooLong = errors.New("line too long")

// readSSE splits a text/event-stream into events and calls onEvent with
// each event's data (data lines joined by newlines). Comments, event, id
// and retry fields are skipped; a line longer than max is dropped whole.
func readSSE(r io.Reader, max int, onEvent func([]byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data []byte
	has := false
	for {
		line, err := readLine(br, max)
		if errors.Is(err, errLineTooLong) {
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if has {
					onEvent(data)
				}
				return io.EOF
			}
			return err
		}
		switch {
		case len(line) == 0:
			if has {
				onEvent(data)
			}
			data, has = nil, false
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte(" "))
			if has {
				data = append(data, '\n')
			}
			data = append(data, v...)
			has = true
		}
	}
}

// readLine reads one line without its end (\n or \r\n), at most max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+2 {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(line) > 0 && errors.Is(err, io.EOF) && !tooLong {
				return bytes.TrimRight(line, "\r\n"), nil
			}
			return nil, err
		}
		if tooLong {
			return nil, errLineTooLong
		}
		return bytes.TrimRight(line, "\r\n"), nil
	}
}

func (s *server) setStreamErr(err error) {
	s.mu.Lock()
	if s.events == nil {
		s.events = err
	}
	s.mu.Unlock()
}

func (s *server) streamErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events
}

// alive reports whether the process runs and its event stream is open.
func (s *server) alive() bool {
	select {
	case <-s.done:
		return false
	case <-s.proc.Done():
		return false
	default:
		return s.streamErr() == nil
	}
}
