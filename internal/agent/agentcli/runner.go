package agentcli

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
)

// emitTimeout bounds recording one batch of a runner's events.
const emitTimeout = time.Minute

// Emit appends evs to the session's log through h. A failure is logged
// under "record <cli> events" (the session's log is the only place to
// report it, and it failed). It blocks at most a minute.
func Emit(h agent.Host, cli string, evs ...conversation.Event) {
	if len(evs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), emitTimeout)
	defer cancel()
	if err := h.Emit(ctx, evs...); err != nil {
		h.Logger().Error("record "+cli+" events", "err", err)
	}
}

// LogEvent is a log event for output agentd cannot convert, keeping data
// verbatim when it is JSON and as a JSON string otherwise.
func LogEvent(level conversation.LogLevel, msg string, data []byte) conversation.Event {
	raw := json.RawMessage(nil)
	if json.Valid(data) {
		raw = append(raw, data...)
	} else {
		raw, _ = json.Marshal(string(data))
	}
	return conversation.NewEvent(conversation.LogEvent{Level: level, Message: msg, Data: raw})
}

// SplitEnd takes the turn's end (query:completed or query:failed, which
// the session writes itself) out of evs. It returns the other events, in
// order and in evs's array, and the last end as a value
// (conversation.QueryCompleted or conversation.QueryFailed), nil when
// there is none or it does not decode.
func SplitEnd(evs []conversation.Event) ([]conversation.Event, conversation.Payload) {
	out := evs[:0]
	var end conversation.Payload
	for _, e := range evs {
		if e.Type == conversation.TypeQueryCompleted || e.Type == conversation.TypeQueryFailed {
			if p, err := e.Decode(); err == nil {
				end = Deref(p)
			}
			continue
		}
		out = append(out, e)
	}
	return out, end
}

// Deref returns the value of a *QueryCompleted or *QueryFailed (what
// Event.Decode returns), p itself otherwise.
func Deref(p conversation.Payload) conversation.Payload {
	switch v := p.(type) {
	case *conversation.QueryCompleted:
		return *v
	case *conversation.QueryFailed:
		return *v
	}
	return p
}

// Failed is the turn error for a query:failed the CLI reported, as
// "<cli>: <error> (<code>)", the code left out when empty.
func Failed(code, cli string, e conversation.QueryFailed) error {
	if e.Code != "" {
		return agent.Fail(code, "%s: %s (%s)", cli, e.Error, e.Code)
	}
	return agent.Fail(code, "%s: %s", cli, e.Error)
}

// Offer hands end to a turn waiting on ch without blocking: a turn that
// already has its end keeps the first.
func Offer(ch chan<- conversation.Payload, end conversation.Payload) {
	select {
	case ch <- end:
	default:
	}
}
