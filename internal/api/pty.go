package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/coder/websocket"

	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/sandbox"
)

type ptyControl struct {
	Type  string `json:"type"`
	Rows  uint16 `json:"rows"`
	Cols  uint16 `json:"cols"`
	Token string `json:"token"` // "auth": the refreshed credential (reauth.go)
}

// handlePTY attaches a WebSocket to a shell on a PTY in the session's
// sandbox: binary frames carry terminal bytes both ways, a text frame
// {"type":"resize"} resizes, {"type":"auth","token"} renews the
// connection's credential (answered {"type":"auth","ok"}), and
// {"type":"exit","code"} ends the session.
func (s *Server) handlePTY(w http.ResponseWriter, r *http.Request) {
	if !checkOrigin(w, r) {
		return
	}
	sess, err := s.cfg.Sessions.Get(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	size := sandbox.WindowSize{Rows: 24, Cols: 80}
	for name, dst := range map[string]*uint16{"rows": &size.Rows, "cols": &size.Cols} {
		if v := r.URL.Query().Get(name); v != "" {
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil || n == 0 {
				writeError(w, http.StatusBadRequest, CodeBadRequest, name+" must be a positive integer")
				return
			}
			*dst = uint16(n)
		}
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	s.connWG.Add(1)
	defer s.connWG.Done()
	defer c.CloseNow()
	ctx, cancel := context.WithCancel(s.closeCtx)
	defer cancel()
	live, untrack := s.live.trackConn(r.Context(), func() {
		c.Close(CloseUnauthorized, "credential no longer valid")
		cancel()
	})
	defer untrack()

	env, err := sess.EnsureEnv(ctx, Principal(r.Context()))
	if err != nil {
		_, e := s.describe(err, "op", "pty: start environment", "session", sess.ID())
		c.Close(websocket.StatusInternalError, truncate("start environment: "+e.Error, 120))
		return
	}
	p, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", `exec "${SHELL:-sh}" -i`}, PTY: &size, Env: map[string]string{"TERM": "xterm-256color"}})
	if err != nil {
		_, e := s.describe(err, "op", "pty: start shell", "session", sess.ID())
		c.Close(websocket.StatusInternalError, truncate("start shell: "+e.Error, 120))
		return
	}
	defer p.Kill()
	// The client going away (or shutdown) ends the shell.
	stop := context.AfterFunc(ctx, func() { _ = p.Kill() })
	defer stop()

	go func() {
		defer cancel()
		for {
			typ, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				if _, err := p.Write(data); err != nil {
					return
				}
				continue
			}
			var ctl ptyControl
			if json.Unmarshal(data, &ctl) == nil && ctl.Type == "resize" && ctl.Rows > 0 && ctl.Cols > 0 {
				_ = p.Resize(sandbox.WindowSize{Rows: ctl.Rows, Cols: ctl.Cols})
			} else if ctl.Type == "auth" {
				reply := ptyAuthReply(s.renewConn(ctx, PrincipalOf(r.Context()), live, ctl.Token, sess.ID(), auth.ScopeSessionsWrite, auth.LevelControl))
				if err := c.Write(ctx, websocket.MessageText, reply); err != nil {
					return
				}
			} else if ctl.Type == "input" {
				// Text input is accepted too, for clients that cannot send binary.
				var in struct {
					Data string `json:"data"`
				}
				if json.Unmarshal(data, &in) == nil {
					_, _ = p.Write([]byte(in.Data))
				}
			}
		}
	}()
	for chunk := range p.Output() {
		if err := c.Write(ctx, websocket.MessageBinary, chunk.Data); err != nil {
			return
		}
	}
	st, err := p.Wait(ctx)
	if err != nil {
		c.Close(websocket.StatusGoingAway, "terminal ended")
		return
	}
	b, _ := json.Marshal(map[string]any{"type": "exit", "code": st.Code, "signal": st.Signal})
	_ = c.Write(ctx, websocket.MessageText, b)
	c.Close(websocket.StatusNormalClosure, "exit")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
