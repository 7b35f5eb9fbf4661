package opencode

import (
	"sort"
	"time"

	"github.com/agentd/agentd/conversation"
)

// settlePending closes every block the converter left pending, stamped
// with ts: an interrupted or crashed turn never completes its items, and a
// block left pending would show as still running forever. Text blocks
// become complete, tool blocks error (the tool did not finish). Ids are
// visited in sorted order so the events are deterministic.
func (bs *blocks) settlePending(ts time.Time) []conversation.Event {
	ids := make([]string, 0, len(bs.m))
	for id, st := range bs.m {
		if st.last.Status == conversation.StatusPending {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	o := &out{ts: ts}
	for _, id := range ids {
		st := bs.m[id]
		status := conversation.StatusComplete
		switch st.last.Type {
		case conversation.BlockToolUse, conversation.BlockToolResult, conversation.BlockSubagent:
			status = conversation.StatusError
		}
		bs.put(o, st.conv, conversation.Block{ID: id, Type: st.last.Type, Status: status})
	}
	return o.events
}
