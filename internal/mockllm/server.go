package mockllm

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Server answers model API requests from a script. All methods are safe
// for concurrent use. Rule use counts, per-kind call counters and the
// request log live in the server and are guarded by mu; responses are
// written only after mu is released.
type Server struct {
	log      *slog.Logger
	seed     string
	now      func() time.Time
	logLimit int
	jsonl    io.Writer

	mu      sync.Mutex
	script  *Script
	uses    []int
	calls   map[Kind]int
	seq     int
	entries []RecordedRequest

	jsonlMu sync.Mutex
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the structured logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithSeed sets the seed the ids derive from (default "mock-llm").
func WithSeed(seed string) Option { return func(s *Server) { s.seed = seed } }

// WithClock sets the clock used for timestamps in responses.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// WithLogLimit keeps at most n requests in the log (default 1000; the
// oldest are dropped first).
func WithLogLimit(n int) Option { return func(s *Server) { s.logLimit = n } }

// WithRequestLog also writes each recorded request, without its body, as
// one JSON line to w (e.g. a file for `agentd mock-llm --log`).
func WithRequestLog(w io.Writer) Option { return func(s *Server) { s.jsonl = w } }

// New returns a server for script (nil means an empty script: every main
// request gets the "no rule matched" answer).
func New(script *Script, opts ...Option) *Server {
	s := &Server{log: slog.Default(), seed: "mock-llm", now: time.Now, logLimit: 1000}
	for _, o := range opts {
		o(s)
	}
	s.setScriptLocked(script)
	return s
}

// RecordedRequest is one request the server received, as the request log
// keeps it.
type RecordedRequest struct {
	Seq      int       `json:"seq"`
	Time     time.Time `json:"time"`
	Method   string    `json:"method"`
	Path     string    `json:"path"`
	API      API       `json:"api"`
	Provider Provider  `json:"provider,omitempty"`
	Model    string    `json:"model,omitempty"`
	Kind     Kind      `json:"kind,omitempty"`
	Stream   bool      `json:"stream,omitempty"`
	// Turn and Call are as the matchers see them (0 for non-model calls).
	Turn int `json:"turn,omitempty"`
	Call int `json:"call,omitempty"`
	// Rule names the rule that answered; "" when a built-in answer did
	// (Builtin says which: default, title, structured, quota).
	Rule    string `json:"rule,omitempty"`
	Builtin string `json:"builtin,omitempty"`
	Status  int    `json:"status"`
	// UserTexts and ToolResults are the last user turn.
	UserTexts   []string     `json:"userTexts,omitempty"`
	ToolResults []ToolResult `json:"toolResults,omitempty"`
	// Images are the last user turn's images (user and tool result ones).
	Images []ImageInfo     `json:"images,omitempty"`
	Tools  []string        `json:"tools,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Requests returns a copy of the request log, oldest first.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RecordedRequest(nil), s.entries...)
}

// ModelRequests returns the logged model calls (messages, responses,
// chat, gemini) of the given kind ("" or KindAny for all kinds).
func (s *Server) ModelRequests(kind Kind) []RecordedRequest {
	var out []RecordedRequest
	for _, e := range s.Requests() {
		if e.API == APIOther || e.API == "" {
			continue
		}
		if kind == "" || kind == KindAny || e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// Reset clears the request log, the rule use counts and the call counters.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setScriptLocked(s.script)
}

// SetScript replaces the script and resets like Reset.
func (s *Server) SetScript(script *Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setScriptLocked(script)
}

func (s *Server) setScriptLocked(script *Script) {
	if script == nil {
		script = &Script{}
	}
	s.script = script
	s.uses = make([]int, len(script.Rules))
	s.calls = map[Kind]int{}
	s.entries = nil
}

// Serve listens on addr and serves until ctx is done, then shuts down
// (open streams are cancelled through their request contexts).
func (s *Server) Serve(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("mock-llm listen: %w", err)
	}
	return s.ServeListener(ctx, ln)
}

// ServeListener is Serve on an existing listener (use it with ":0" to
// learn the port first). It closes ln.
func (s *Server) ServeListener(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.log.Info("mock-llm listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("mock-llm serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("mock-llm serve: %w", err)
	}
	return nil
}

// Handler returns the HTTP handler: the provider APIs plus
// /_mockllm/{requests,reset,script} for tests driving a separate process.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

const maxBodyBytes = 64 << 20

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	post := r.Method == http.MethodPost
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case p == "/":
		s.other(w, r, nil, http.StatusOK, "")
		if r.Method != http.MethodHead {
			_, _ = io.WriteString(w, "mock-llm\n")
		}
	case p == "/v1/messages" && post:
		s.model(w, r, APIMessages)
	case p == "/v1/messages/count_tokens" && post:
		body, ok := s.body(w, r, APIMessages)
		if !ok {
			return
		}
		s.other(w, r, body, http.StatusOK, "")
		anthropicCountTokens(w, body)
	case (p == "/v1/responses" || p == "/responses") && post:
		s.model(w, r, APIResponses)
	case (p == "/v1/responses" || p == "/responses") && get:
		// Codex tries the Responses API over WebSocket first when it talks
		// to the built-in OpenAI provider; 426 makes it fall back to HTTP
		// at once (a 404 would fail the turn).
		const msg = "mock-llm serves the Responses API over HTTP POST only"
		s.other(w, r, nil, http.StatusUpgradeRequired, msg)
		writeOpenAIError(w, &apiError{status: http.StatusUpgradeRequired, message: msg}, newIDGen(s.seed, "websocket", 0))
	case (p == "/v1/chat/completions" || p == "/chat/completions") && post:
		s.model(w, r, APIChat)
	case (p == "/v1/models" || p == "/models") && get:
		s.other(w, r, nil, http.StatusOK, "")
		if isAnthropicClient(r) {
			writeJSON(w, http.StatusOK, anthropicModels(s.models(ProviderAnthropic)))
		} else {
			writeJSON(w, http.StatusOK, openAIModels(s.models(ProviderOpenAI)))
		}
	case strings.HasPrefix(p, "/v1/models/") && get && !strings.Contains(p, ":"):
		id := strings.TrimPrefix(p, "/v1/models/")
		s.other(w, r, nil, http.StatusOK, "")
		if isAnthropicClient(r) {
			writeJSON(w, http.StatusOK, anthropicModel(id))
		} else {
			writeJSON(w, http.StatusOK, openAIModel(id))
		}
	case p == "/v1beta/models" && get:
		s.other(w, r, nil, http.StatusOK, "")
		writeJSON(w, http.StatusOK, geminiModels(s.models(ProviderGemini)))
	case strings.HasPrefix(p, "/v1beta/models/") || strings.HasPrefix(p, "/v1/models/"):
		s.gemini(w, r)
	case p == "/_mockllm/requests" && get:
		s.adminRequests(w, r)
	case p == "/_mockllm/reset" && post:
		s.Reset()
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	case p == "/_mockllm/script" && (post || r.Method == http.MethodPut):
		s.adminScript(w, r)
	default:
		s.notFound(w, r)
	}
}

func isAnthropicClient(r *http.Request) bool {
	return r.Header.Get("anthropic-version") != "" || r.Header.Get("x-api-key") != ""
}

func (s *Server) models(p Provider) []string {
	s.mu.Lock()
	m := s.script.Models
	s.mu.Unlock()
	if len(m) > 0 {
		return m
	}
	switch p {
	case ProviderAnthropic:
		return []string{"claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5"}
	case ProviderGemini:
		return []string{"gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite"}
	default:
		return []string{"gpt-5", "gpt-5-mini", "gpt-5-codex"}
	}
}

// gemini routes /v1beta/models/{model}[:action].
func (s *Server) gemini(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/v1beta/models/"), "/v1/models/")
	model, action, hasAction := strings.Cut(rest, ":")
	switch {
	case !hasAction && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		s.other(w, r, nil, http.StatusOK, "")
		writeJSON(w, http.StatusOK, geminiModel(model))
	case hasAction && r.Method == http.MethodPost && (action == "generateContent" || action == "streamGenerateContent"):
		s.model(w, r, APIGemini)
	case hasAction && r.Method == http.MethodPost && action == "countTokens":
		body, ok := s.body(w, r, APIGemini)
		if !ok {
			return
		}
		s.other(w, r, body, http.StatusOK, "")
		writeJSON(w, http.StatusOK, map[string]int{"totalTokens": approxTokensBytes(body)})
	default:
		s.notFound(w, r)
	}
}

// body reads the request body (gzip allowed), answering errors itself.
func (s *Server) body(w http.ResponseWriter, r *http.Request, api API) ([]byte, bool) {
	var rd io.Reader = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(rd)
		if err != nil {
			s.fail(w, r, nil, api, http.StatusBadRequest, "bad gzip body: "+err.Error())
			return nil, false
		}
		defer gz.Close()
		rd = io.LimitReader(gz, maxBodyBytes)
	default:
		s.fail(w, r, nil, api, http.StatusUnsupportedMediaType, "unsupported Content-Encoding "+enc)
		return nil, false
	}
	body, err := io.ReadAll(rd)
	if err != nil {
		s.fail(w, r, nil, api, http.StatusBadRequest, "read body: "+err.Error())
		return nil, false
	}
	return body, true
}

func parseRequest(api API, body []byte, r *http.Request) (*Request, error) {
	switch api {
	case APIMessages:
		return parseAnthropic(body)
	case APIResponses:
		return parseResponses(body)
	case APIChat:
		return parseChat(body)
	case APIGemini:
		return parseGemini(body, r)
	}
	return nil, fmt.Errorf("unknown api %q", api)
}

// model serves one model call: parse, pick a rule, log, answer.
func (s *Server) model(w http.ResponseWriter, r *http.Request, api API) {
	body, ok := s.body(w, r, api)
	if !ok {
		return
	}
	req, err := parseRequest(api, body, r)
	if err != nil {
		s.fail(w, r, body, api, http.StatusBadRequest, err.Error())
		return
	}
	req.InputTokens = approxTokensBytes(body)
	req.Kind = req.classify()

	// Pick the rule and record the request under the lock; answer after.
	s.mu.Lock()
	s.seq++
	seq := s.seq
	s.calls[req.Kind]++
	call := s.calls[req.Kind]
	script := s.script
	var rule *Rule
	for i := range script.Rules {
		cand := &script.Rules[i]
		if cand.Times > 0 && s.uses[i] >= cand.Times {
			continue
		}
		if cand.match(req, call) {
			s.uses[i]++
			rule = cand
			break
		}
	}
	s.mu.Unlock()

	ids := newIDGen(s.seed, req.Kind, call)
	tc := &tmplCtx{req: req, call: call, seq: seq}
	now := s.now()
	entry := RecordedRequest{
		Seq: seq, Time: now, Method: r.Method, Path: r.URL.RequestURI(), API: api,
		Provider: req.Provider, Model: req.Model, Kind: req.Kind, Stream: req.Stream,
		Turn: req.Turn(), Call: call, Status: http.StatusOK,
		UserTexts: req.UserTexts(), ToolResults: req.ToolResults(), Images: req.Images(), Tools: req.ToolNames(),
		// The body parsed, so it is valid JSON; no second validation pass.
		Body: json.RawMessage(body),
	}
	var reply *Reply
	var scripted *ErrorReply
	switch {
	case rule != nil:
		entry.Rule = rule.Name
		reply, scripted = rule.Reply, rule.Error
	default:
		entry.Builtin = string(req.Kind)
		if req.Kind == KindMain {
			entry.Builtin = "default"
		}
		reply = builtinReply(req, script, call)
	}

	var p *plan
	var apiErr *apiError
	if scripted != nil {
		apiErr, err = buildError(scripted, tc)
		if err == nil && scripted.InStream && req.Stream {
			p = &plan{stream: true, model: req.Model, stop: StopEndTurn, chunk: defaultChunk, now: now,
				inputTokens: req.InputTokens, outputTokens: 1, streamErr: apiErr}
			apiErr = nil
		}
	} else {
		p, err = buildPlan(req, reply, tc, ids, now)
	}
	if err != nil {
		// A template that fails at run time is a script bug; say so loudly
		// in an answer the test will see.
		apiErr = &apiError{status: http.StatusInternalServerError, typ: "api_error", message: "mock-llm: " + err.Error()}
	}
	if apiErr != nil {
		entry.Status = apiErr.status
		entry.Error = apiErr.message
	}
	s.record(entry)
	s.log.Debug("mock-llm request", "seq", seq, "api", api, "model", req.Model, "kind", req.Kind,
		"call", call, "turn", entry.Turn, "rule", entry.Rule, "builtin", entry.Builtin, "status", entry.Status)

	if p != nil && p.latency > 0 {
		t := time.NewTimer(p.latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if apiErr != nil {
		writeAPIError(w, api, apiErr, ids, now)
		return
	}
	switch api {
	case APIMessages:
		writeAnthropic(w, r, p, ids)
	case APIResponses:
		writeResponses(w, r, p, ids)
	case APIChat:
		writeChat(w, r, p, ids)
	case APIGemini:
		writeGemini(w, r, p, ids)
	}
}

func writeAPIError(w http.ResponseWriter, api API, e *apiError, ids *idGen, now time.Time) {
	switch api {
	case APIMessages:
		writeAnthropicError(w, e, ids, now)
	case APIGemini:
		writeGeminiError(w, e)
	default:
		writeOpenAIError(w, e, ids)
	}
}

func validJSON(b []byte) json.RawMessage {
	if len(b) == 0 || !json.Valid(b) {
		return nil
	}
	return json.RawMessage(b)
}

// fail answers a request the server could not take (bad body, bad JSON)
// with the provider's error shape, and logs it.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, body []byte, api API, status int, msg string) {
	s.mu.Lock()
	s.seq++
	seq := s.seq
	s.mu.Unlock()
	s.record(RecordedRequest{Seq: seq, Time: s.now(), Method: r.Method, Path: r.URL.RequestURI(), API: api,
		Status: status, Error: msg, Body: validJSON(body)})
	e := &apiError{status: status, message: msg}
	ids := newIDGen(s.seed, "error", seq)
	writeAPIError(w, api, e, ids, s.now())
}

// other logs a non-model request that is answered normally.
func (s *Server) other(w http.ResponseWriter, r *http.Request, body []byte, status int, errMsg string) {
	s.mu.Lock()
	s.seq++
	seq := s.seq
	s.mu.Unlock()
	s.record(RecordedRequest{Seq: seq, Time: s.now(), Method: r.Method, Path: r.URL.RequestURI(), API: APIOther,
		Status: status, Error: errMsg, Body: validJSON(body)})
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.log.Warn("mock-llm: unknown route", "method", r.Method, "path", r.URL.Path)
	api := APIOther
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1beta/"):
		api = APIGemini
	case isAnthropicClient(r):
		api = APIMessages
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxBodyBytes))
	s.fail(w, r, nil, api, http.StatusNotFound, fmt.Sprintf("mock-llm: no route for %s %s", r.Method, r.URL.Path))
}

func (s *Server) record(e RecordedRequest) {
	s.mu.Lock()
	s.entries = append(s.entries, e)
	if s.logLimit > 0 && len(s.entries) > s.logLimit {
		s.entries = append([]RecordedRequest(nil), s.entries[len(s.entries)-s.logLimit:]...)
	}
	s.mu.Unlock()
	if s.jsonl != nil {
		e.Body = nil
		line, err := json.Marshal(e)
		if err == nil {
			s.jsonlMu.Lock()
			_, _ = s.jsonl.Write(append(line, '\n'))
			s.jsonlMu.Unlock()
		}
	}
}

// adminRequests answers GET /_mockllm/requests[?body=1][&kind=main].
func (s *Server) adminRequests(w http.ResponseWriter, r *http.Request) {
	withBody := r.URL.Query().Get("body") == "1"
	kind := Kind(r.URL.Query().Get("kind"))
	var out []RecordedRequest
	for _, e := range s.Requests() {
		if kind != "" && kind != KindAny && e.Kind != kind {
			continue
		}
		if !withBody {
			e.Body = nil
		}
		out = append(out, e)
	}
	if out == nil {
		out = []RecordedRequest{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"requests": out})
}

// adminScript replaces the script with the body (YAML or JSON).
func (s *Server) adminScript(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxScriptBytes))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	script, err := Parse(data)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s.SetScript(script)
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "rules": len(script.Rules)})
}
