package gemini

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/convkit"
)

// jsonOutput is the single object `gemini --output-format json` prints.
type jsonOutput struct {
	SessionID string  `json:"session_id"`
	Response  *string `json:"response"`
	Stats     *struct {
		Models map[string]struct {
			API struct {
				TotalRequests int64 `json:"totalRequests"`
			} `json:"api"`
			Tokens struct {
				Prompt     int64  `json:"prompt"`
				Candidates int64  `json:"candidates"`
				Cached     int64  `json:"cached"`
				Thoughts   int64  `json:"thoughts"`
				Tool       int64  `json:"tool"`
				Input      *int64 `json:"input"`
			} `json:"tokens"`
		} `json:"models"`
	} `json:"stats"`
	Error *struct {
		Type    string          `json:"type"`
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
	} `json:"error"`
}

// ConvertJSONOutput converts the result object of `gemini
// --output-format json`: the answer becomes an assistant_text block
// "<session id>-0" ("gemini-0" when the output names no session), usage is
// summed over the models it lists, the model reported is the one that
// used the most tokens, and the run ends with query:completed (its Result
// the answer) or, when the object carries an error, error events and
// query:failed.
func ConvertJSONOutput(doc []byte) ([]conversation.Event, error) {
	var r jsonOutput
	if err := json.Unmarshal(doc, &r); err != nil {
		return nil, fmt.Errorf("gemini json output: %w", err)
	}
	if r.Response == nil && r.Error == nil && r.Stats == nil {
		return nil, fmt.Errorf("gemini json output: no response, stats or error")
	}
	o := &convkit.Out{}
	scope := r.SessionID
	if scope == "" {
		scope = "gemini"
	}
	if r.SessionID != "" {
		o.Log(conversation.LevelInfo, "gemini session "+r.SessionID, convkit.MustJSON(map[string]string{"session_id": r.SessionID}))
	}
	if r.Stats != nil && len(r.Stats.Models) > 0 {
		names := make([]string, 0, len(r.Stats.Models))
		for n := range r.Stats.Models {
			names = append(names, n)
		}
		sort.Strings(names)
		var u conversation.Usage
		main, mainTokens := "", int64(-1)
		for _, n := range names {
			t := r.Stats.Models[n].Tokens
			in := max(t.Prompt-t.Cached, 0)
			if t.Input != nil {
				in = *t.Input
			}
			u = u.Add(conversation.Usage{InputTokens: in + t.Tool, OutputTokens: t.Candidates + t.Thoughts, CacheReadInputTokens: t.Cached})
			if total := t.Prompt + t.Candidates + t.Thoughts; total > mainTokens {
				main, mainTokens = n, total
			}
		}
		o.Emit("", conversation.MetadataUpdate{Usage: &u, Model: main})
	}
	if r.Response != nil && *r.Response != "" {
		o.Emit("", conversation.BlockUpsert{Block: conversation.Block{ID: scope + "-0", Type: conversation.BlockAssistantText,
			Status: conversation.StatusComplete, Content: *r.Response}})
	}
	if r.Error != nil {
		msg := r.Error.Message
		if msg == "" {
			msg = "gemini run failed"
		}
		o.Emit("", conversation.BlockUpsert{Block: conversation.Block{ID: scope + "-error", Type: conversation.BlockError,
			Status: conversation.StatusError, Message: msg, Code: r.Error.Type}})
		o.Emit("", conversation.ErrorEvent{Message: msg, Code: r.Error.Type})
		o.Emit("", conversation.QueryFailed{Error: msg, Code: r.Error.Type})
		return o.Events, nil
	}
	result := ""
	if r.Response != nil {
		result = *r.Response
	}
	o.Emit("", conversation.QueryCompleted{Result: result})
	return o.Events, nil
}
