// Package runcli is `agentd run`: create a session, send one prompt, and
// render the turn live in the terminal (streaming text, each tool call with
// a spinner while it runs and then its result, permission prompts answered
// at the keyboard), exiting non-zero when the turn fails.
package runcli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/restapi"
)

// Options configure Run.
type Options struct {
	Server, APIKey  string
	Architecture    string
	Profile, Model  string
	Prompt          string
	AutoAllow, Keep bool
	In              io.Reader
	Out, Err        io.Writer
	// Color forces ANSI styling on or off; nil means "when Out is a terminal".
	Color *bool
}

// ExitError carries the process exit code of a failed turn.
type ExitError struct {
	Code int
	Msg  string
}

func (e ExitError) Error() string { return e.Msg }

// Run executes one turn.
func Run(ctx context.Context, o Options) error {
	c, err := client.New(o.Server, client.WithAPIKey(o.APIKey))
	if err != nil {
		return err
	}
	var opts json.RawMessage
	if o.Model != "" {
		opts, _ = json.Marshal(map[string]string{"model": o.Model})
	}
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{
		Architecture: o.Architecture, AgentProfileRef: o.Profile, SessionOptions: opts, Name: firstLine(o.Prompt, 60),
	})
	if err != nil {
		return createError(o.Server, err)
	}
	if !o.Keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = c.DeleteSession(dctx, created.SessionID, false)
		}()
	}
	stream := c.Stream(ctx, created.SessionID, 0)
	defer stream.Close()
	sent, err := c.SendNow(ctx, created.SessionID, o.Prompt)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	color := false
	if o.Color != nil {
		color = *o.Color
	} else if f, ok := o.Out.(*os.File); ok {
		color = isatty.IsTerminal(f.Fd())
	}
	r := &renderer{out: o.Out, errOut: o.Err, color: color, blocks: map[string]*conversation.Block{}, shown: map[string]bool{}}
	shell := created.Runtime.Architecture == "shell"
	answers := bufio.NewReader(o.In)
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			r.stopSpinner()
			return err
		}
		switch ev.Type {
		case conversation.TypeQueryCompleted, conversation.TypeQueryFailed:
			p, _ := ev.Decode()
			switch q := p.(type) {
			case *conversation.QueryCompleted:
				if q.QueryID != sent.QueryID {
					continue
				}
				r.finish()
				r.flushErrors()
				if q.Interrupted {
					return ExitError{Code: 130, Msg: "turn interrupted"}
				}
				// The shell's turn is its command: exit with its status, as
				// sh -c would.
				if shell && r.exitCode != 0 {
					return ExitError{Code: r.exitCode, Msg: ""}
				}
				return nil
			case *conversation.QueryFailed:
				if q.QueryID != sent.QueryID {
					continue
				}
				r.finish()
				return ExitError{Code: 1, Msg: r.failure(q)}
			}
		case conversation.TypePermissionRequest:
			p, _ := ev.Decode()
			req := p.(*conversation.PermissionRequested)
			r.stopSpinner()
			allow := o.AutoAllow
			if !allow {
				fmt.Fprintf(r.out, "\n%s %s %s [y/N] ", r.style("1;33", "?"), r.style("1", "allow "+req.ToolName), summarize(req.Input, 80))
				line, _ := answers.ReadString('\n')
				allow = strings.HasPrefix(strings.ToLower(strings.TrimSpace(line)), "y")
			}
			ans := restapi.PermissionAnswer{Behavior: conversation.Deny, Message: "denied at the terminal"}
			if allow {
				ans = restapi.PermissionAnswer{Behavior: conversation.Allow}
			}
			if err := c.AnswerPermission(ctx, created.SessionID, req.RequestID, ans); err != nil && !client.IsCode(err, "PERMISSION_ALREADY_RESOLVED") {
				fmt.Fprintf(r.errOut, "answer permission: %v\n", err)
			}
		case conversation.TypeError:
			p, _ := ev.Decode()
			e := p.(*conversation.ErrorEvent)
			r.stopSpinner()
			r.holdError(e.Message, e.Code)
		default:
			r.apply(ev)
		}
	}
}

// renderer prints main-conversation blocks as they stream.
type renderer struct {
	out, errOut io.Writer
	color       bool
	blocks      map[string]*conversation.Block
	shown       map[string]bool // tool calls announced
	current     string          // block whose text is being streamed
	exitCode    int             // the last main-conversation command's exit code
	// held are error messages not printed yet: a failing turn reports the
	// same error as an error block, an error event and its query:failed,
	// and the user should read it once. They are printed when anything
	// else happens, or merged into the failure line.
	held []heldError

	mu      sync.Mutex // guards spin
	spin    chan struct{}
	spinWG  sync.WaitGroup
	spinFor string
}

// ansiRE matches terminal escape sequences: CSI (colours, cursor moves),
// OSC (titles, links) and the two-byte forms.
var ansiRE = regexp.MustCompile(`\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]`)

// plain drops escape sequences from command output when the output is not
// a terminal (a file, a pipe): there they are noise, not colours.
func (r *renderer) plain(s string) string {
	if r.color || !strings.Contains(s, "\x1b") {
		return s
	}
	return ansiRE.ReplaceAllString(s, "")
}

func (r *renderer) style(code, s string) string {
	if !r.color {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

type heldError struct{ msg, code string }

// holdError keeps an error to print once (see held).
func (r *renderer) holdError(msg, code string) {
	msg = strings.TrimSpace(msg)
	for i, h := range r.held {
		if h.msg == msg {
			if isVagueCode(h.code) && !isVagueCode(code) {
				r.held[i].code = code
			}
			return
		}
	}
	r.held = append(r.held, heldError{msg, code})
}

// isVagueCode: codes that say less than the turn's own ("unknown" is what
// Claude Code puts on its synthetic error message).
func isVagueCode(c string) bool { return c == "" || c == "unknown" }

// flushErrors prints the held errors.
func (r *renderer) flushErrors() {
	for _, h := range r.held {
		r.endText()
		code := ""
		if !isVagueCode(h.code) {
			code = " (" + h.code + ")"
		}
		fmt.Fprintf(r.errOut, "%s %s%s\n", r.style("31", "error:"), h.msg, code)
	}
	r.held = nil
}

// failure is the one line of a failed turn: its code and message, merged
// with the errors held for it; other held errors are printed first.
func (r *renderer) failure(q *conversation.QueryFailed) string {
	msg := strings.TrimSpace(q.Error)
	var rest []heldError
	for _, h := range r.held {
		if h.msg != msg && !strings.Contains(msg, h.msg) {
			rest = append(rest, h)
		}
	}
	r.held = rest
	r.flushErrors()
	code := q.Code
	if code == "" {
		code = "FAILED"
	}
	return fmt.Sprintf("turn failed: %s (%s)", msg, code)
}

func (r *renderer) apply(ev conversation.Event) {
	if ev.Context.ConversationID != "" && ev.Context.ConversationID != conversation.MainConversation {
		return // subagent detail stays in the UI; the main thread shows its block
	}
	if ev.Type == conversation.TypeBlockUpsert || ev.Type == conversation.TypeBlockDelta {
		if !isErrorBlock(ev) {
			r.flushErrors()
		}
	}
	switch ev.Type {
	case conversation.TypeBlockUpsert:
		var p conversation.BlockUpsert
		if json.Unmarshal(ev.Payload, &p) != nil {
			return
		}
		r.upsert(p.Block, ev.Payload)
	case conversation.TypeBlockDelta:
		var p conversation.BlockDelta
		if json.Unmarshal(ev.Payload, &p) != nil {
			return
		}
		b := r.blocks[p.BlockID]
		if b == nil {
			return
		}
		r.stream(b, p.Delta)
	}
}

func (r *renderer) upsert(nb conversation.Block, raw json.RawMessage) {
	b, seen := r.blocks[nb.ID]
	if !seen {
		b = &conversation.Block{}
		r.blocks[nb.ID] = b
	}
	prevStatus, prevLen := b.Status, len(b.Content)+len(b.Output)
	var wrap struct {
		Block json.RawMessage `json:"block"`
	}
	_ = json.Unmarshal(raw, &wrap)
	_ = json.Unmarshal(wrap.Block, b)
	switch b.Type {
	case conversation.BlockUserMessage:
		return
	case conversation.BlockAssistantText, conversation.BlockThinking:
		// A complete upsert may carry text the deltas did not (no partial
		// messages): print what is new.
		if text := b.Content; len(text) > prevLen && seen {
			r.streamRaw(b, text[prevLen:])
		} else if !seen && text != "" {
			r.streamRaw(b, text)
		}
	case conversation.BlockToolUse, conversation.BlockSubagent:
		// Claude Code opens a tool call before its input has streamed:
		// show it once the input (or the complete block) is there.
		if !r.shown[b.ID] && (len(b.Input) > 0 || b.Status != conversation.StatusPending) {
			r.shown[b.ID] = true
			r.endText()
			label := b.ToolName
			if b.Type == conversation.BlockSubagent {
				label = "subagent " + b.Name
			}
			r.startSpinner(b.ID, fmt.Sprintf("%s %s", r.style("1", label), summarize(b.Input, 70)))
		}
		if b.Status != conversation.StatusPending && prevStatus == conversation.StatusPending && b.Type == conversation.BlockSubagent {
			r.stopSpinner()
			fmt.Fprintf(r.out, "%s subagent %s done\n", r.mark(b.Status != conversation.StatusError), b.Name)
		}
	case conversation.BlockToolResult:
		if b.Status != conversation.StatusPending && (prevStatus == conversation.StatusPending || !seen) {
			r.stopSpinner()
			if r.current == b.ID {
				// Its output was streamed already.
				r.current = ""
				if !strings.HasSuffix(b.Output, "\n") {
					fmt.Fprintln(r.out)
				}
			} else {
				r.endText()
				if b.Output != "" {
					fmt.Fprint(r.out, indent(clip(r.plain(b.Output), 4000)))
				}
			}
			code := ""
			if v, ok := b.Metadata["exitCode"].(float64); ok {
				code = fmt.Sprintf(" (exit %d)", int(v))
				r.exitCode = int(v)
			}
			fmt.Fprintf(r.out, "%s %s%s\n", r.mark(!b.IsError), toolName(r.blocks, b.ToolUseID), code)
		}
	case conversation.BlockError:
		if b.Status != conversation.StatusPending && b.Message != "" {
			r.holdError(b.Message, b.Code)
		}
	}
}

func isErrorBlock(ev conversation.Event) bool {
	var p struct {
		Block struct {
			Type conversation.BlockType `json:"type"`
		} `json:"block"`
	}
	return json.Unmarshal(ev.Payload, &p) == nil && p.Block.Type == conversation.BlockError
}

func toolName(blocks map[string]*conversation.Block, toolUseID string) string {
	if b := blocks[toolUseID]; b != nil {
		return b.ToolName
	}
	return "tool"
}

func (r *renderer) mark(ok bool) string {
	if ok {
		return r.style("32", "✓")
	}
	return r.style("31", "✗")
}

func (r *renderer) stream(b *conversation.Block, delta string) {
	switch b.Type {
	case conversation.BlockToolResult:
		b.Output += delta
		r.stopSpinner()
		if r.current != b.ID {
			r.endText()
			r.current = b.ID
		}
		fmt.Fprint(r.out, r.style("2", r.plain(delta)))
	default:
		b.Content += delta
		r.streamRaw(b, delta)
	}
}

func (r *renderer) streamRaw(b *conversation.Block, text string) {
	r.stopSpinner()
	if r.current != b.ID {
		r.endText()
		r.current = b.ID
	}
	if b.Type == conversation.BlockThinking {
		text = r.style("2;3", text)
	}
	fmt.Fprint(r.out, text)
}

func (r *renderer) endText() {
	if r.current != "" {
		fmt.Fprintln(r.out)
		r.current = ""
	}
}

func (r *renderer) finish() {
	r.stopSpinner()
	r.endText()
}

// ServerURL is the URL of a server listening on addr (agentd serve's
// --addr / AGENTD_ADDR): a wildcard host is reached on loopback. Empty
// addr: the serve default.
func ServerURL(addr string) string {
	if addr == "" {
		return "http://127.0.0.1:8080"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// createError says why creating the session failed: what the server
// answered, or that it could not be reached.
func createError(server string, err error) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		return fmt.Errorf("create session: the server refused it: %s (%d %s)", ce.Message, ce.Status, ce.Code)
	}
	return fmt.Errorf("create session: cannot reach agentd at %s (is agentd serve running? set --server or AGENTD_SERVER): %w", server, err)
}

var frames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

func (r *renderer) startSpinner(id, label string) {
	r.stopSpinner()
	if !r.color {
		fmt.Fprintf(r.out, "• %s\n", label)
		return
	}
	stop := make(chan struct{})
	r.mu.Lock()
	r.spin, r.spinFor = stop, id
	r.mu.Unlock()
	r.spinWG.Add(1)
	go func() {
		defer r.spinWG.Done()
		t := time.NewTicker(80 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(r.out, "\r%s %s", frames[i%len(frames)], label)
			select {
			case <-stop:
				fmt.Fprintf(r.out, "\r• %s\n", label)
				return
			case <-t.C:
			}
		}
	}()
}

func (r *renderer) stopSpinner() {
	r.mu.Lock()
	stop := r.spin
	r.spin = nil
	r.mu.Unlock()
	if stop != nil {
		close(stop)
		r.spinWG.Wait()
	}
}

// summarize renders a tool input in one short line.
func summarize(input json.RawMessage, n int) string {
	var m map[string]any
	if json.Unmarshal(input, &m) != nil {
		return clip(string(input), n)
	}
	for _, k := range []string{"command", "file_path", "path", "pattern", "url", "description", "prompt"} {
		if v, ok := m[k].(string); ok && v != "" {
			return clip(strings.ReplaceAll(v, "\n", " "), n)
		}
	}
	b, _ := json.Marshal(m)
	return clip(string(b), n)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return clip(s, n)
}
