package restapi_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/restapi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMessageRequestContentShapes(t *testing.T) {
	var m restapi.MessageRequest
	if err := json.Unmarshal([]byte(`{"content":"hi","queue":false}`), &m); err != nil || m.Content != "hi" || m.Parts != nil || m.Queue == nil || *m.Queue {
		t.Fatalf("string content: %+v %v", m, err)
	}
	in := `{"content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}`
	if err := json.Unmarshal([]byte(in), &m); err != nil || len(m.Parts) != 2 || m.Parts[1].Source.ContentMediaType() != "image/png" || m.Content != "" {
		t.Fatalf("parts: %+v %v", m, err)
	}
	out, _ := json.Marshal(m)
	var back restapi.MessageRequest
	if err := json.Unmarshal(out, &back); err != nil || !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip %s: %+v %v", out, back, err)
	}
	for _, bad := range []string{`{"content":42}`, `{"content":{}}`, `{"content":[1]}`, `{"content":true}`} {
		if err := json.Unmarshal([]byte(bad), &m); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// FuzzMessageRequest: any body either fails to decode or decodes to a
// request that encodes and decodes back to itself.
func FuzzMessageRequest(f *testing.F) {
	for _, s := range []string{
		`{"content":"hi"}`, `{"content":[]}`, `{"content":null}`, `{"queue":true}`,
		`{"content":[{"type":"image","url":"data:image/png;base64,AA=="},{"type":"file","name":"a","data":"AA=="}]}`,
		`{"content":[{"type":"image","source":{"type":"base64","mediaType":"image/gif","data":""}}],"queue":false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m restapi.MessageRequest
		if json.Unmarshal(data, &m) != nil {
			return
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("marshal %+v: %v", m, err)
		}
		var back restapi.MessageRequest
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		// An empty list of parts encodes as the empty string.
		if len(m.Parts) == 0 {
			m.Parts = nil
		}
		if !reflect.DeepEqual(back, m) {
			t.Fatalf("%s → %+v → %s → %+v", data, m, out, back)
		}
	})
}
