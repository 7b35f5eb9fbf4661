package opencode

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/convkit"
)

type exportDoc struct {
	Info *struct {
		ID       string `json:"id"`
		ParentID string `json:"parentID"`
		Title    string `json:"title"`
		Version  string `json:"version"`
	} `json:"info"`
	Messages []struct {
		Info  json.RawMessage   `json:"info"`
		Parts []json.RawMessage `json:"parts"`
	} `json:"messages"`
}

// ConvertExport converts the JSON `opencode export <session>` prints:
// {info, messages:[{info, parts}]}. The parts map as in EventsConverter;
// an assistant message that finished (finish other than "tool-calls")
// ends a turn with query:completed, one with an error with error events
// and query:failed. Child sessions are not part of an export: a task
// call's subagent has its prompt, output and child session id but no
// blocks of its own. A message or part that does not decode becomes a log
// event; only a document that is not an export is an error.
func ConvertExport(doc []byte, opts ...Option) ([]conversation.Event, error) {
	var d exportDoc
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("opencode export: %w", err)
	}
	if d.Info == nil || d.Info.ID == "" {
		return nil, fmt.Errorf("opencode export: no session info")
	}
	c := newCore(opts)
	if c.mainSession == "" {
		c.mainSession = d.Info.ID
	}
	o := &convkit.Out{}
	o.Log(conversation.LevelInfo, "opencode session "+d.Info.ID+" "+strconv.Quote(d.Info.Title),
		convkit.MustJSON(map[string]string{"id": d.Info.ID, "title": d.Info.Title, "version": d.Info.Version}))
	for _, m := range d.Messages {
		var info ocMessageInfo
		if err := json.Unmarshal(m.Info, &info); err != nil || info.ID == "" {
			o.Log(conversation.LevelWarn, "opencode: exported message without usable info", m.Info)
			continue
		}
		o.TS = convkit.MsTime(info.Time.Created)
		conv, ok := c.message(o, &info)
		if !ok {
			continue
		}
		var text strings.Builder
		for _, raw := range m.Parts {
			var p ocPart
			if err := json.Unmarshal(raw, &p); err != nil {
				o.Log(conversation.LevelWarn, "opencode: exported part that does not decode", raw)
				continue
			}
			if p.SessionID == "" {
				p.SessionID = info.SessionID
			}
			if p.MessageID == "" {
				p.MessageID = info.ID
			}
			if p.Type == "text" {
				text.WriteString(p.Text)
			}
			o.TS = time.Time{}
			c.part(o, &p, raw)
		}
		if info.Role != "assistant" || conv != "" {
			continue
		}
		c.at(o, info.Time.Completed, info.Time.Created)
		if e := parseError(info.Error); e != nil {
			o.Emit("", conversation.ErrorEvent{Message: e.Data.Message, Code: e.Name})
			o.Emit("", conversation.QueryFailed{Error: e.Data.Message, Code: e.Name, Interrupted: e.Name == "MessageAbortedError"})
			continue
		}
		if info.Finish != "" && info.Finish != "tool-calls" && info.Finish != "unknown" {
			o.Emit("", conversation.QueryCompleted{Result: strings.TrimSpace(text.String())})
		}
	}
	return o.Events, nil
}
