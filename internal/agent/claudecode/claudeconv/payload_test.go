package claudeconv

import (
	"encoding/json"
	"testing"

	"github.com/agentd/agentd/conversation"
)

// FuzzPayloadReader: PayloadReader (the runner's block tracker reads with
// it) never panics on any bytes, and on the payloads agentd writes (the
// converter's encoder and encoding/json's) it reads the id, the status and
// the text lengths the reducer stores.
func FuzzPayloadReader(f *testing.F) {
	f.Add("msg_1-0", "pending", "Hello \"world\"\n", "", []byte(`{"block":{"id":"a","type":"tool_result","output":"x"}}`))
	f.Add("t", "complete", "", "out\xff\xfeput", []byte(`{"blockId":"a","delta":"\u00e9"}`))
	f.Add("", "", "\x00\u2028", "", []byte(`{"block":null}`))
	f.Fuzz(func(t *testing.T, id, status, content, output string, raw []byte) {
		var r PayloadReader
		r.Upsert(raw)
		r.Delta(raw)
		if id == "" {
			return
		}
		b := conversation.Block{ID: id, Type: conversation.BlockAssistantText, Status: conversation.BlockStatus(status), Content: content, Output: output}
		for name, payload := range map[string][]byte{
			"converter": appendUpsertPayload(nil, &b),
			"json":      conversation.Upsert(b).Payload,
		} {
			var want conversation.BlockUpsert
			if err := json.Unmarshal(payload, &want); err != nil {
				t.Fatalf("%s payload %q: %v", name, payload, err)
			}
			got, ok := r.Upsert(payload)
			if !ok || got.ID != want.Block.ID || got.Status != string(want.Block.Status) ||
				got.Content != len(want.Block.Content) || got.Output != len(want.Block.Output) ||
				got.HasContent != (want.Block.Content != "") || got.HasOutput != (want.Block.Output != "") {
				t.Fatalf("%s payload %q: read %+v, reducer has %+v", name, payload, got, want.Block)
			}
		}
		d := conversation.Delta(id, content)
		var want conversation.BlockDelta
		_ = json.Unmarshal(d.Payload, &want)
		gid, n, ok := r.Delta(d.Payload)
		if !ok || gid != want.BlockID || n != len(want.Delta) {
			t.Fatalf("delta %q: read %q %d", d.Payload, gid, n)
		}
		delta := appendDeltaPayload(nil, id, content)
		if gid, n, ok := r.Delta(delta); !ok || gid != want.BlockID || n != len(want.Delta) {
			t.Fatalf("converter delta %q: read %q %d", delta, gid, n)
		}
	})
}
