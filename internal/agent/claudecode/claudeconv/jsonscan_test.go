package claudeconv

import (
	"bytes"
	"encoding/json"
	"math/bits"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd/conversation"
	"pgregory.net/rapid"
)

// scanValid runs the scanner over data as one value.
func scanValid(data []byte) error {
	var s scanner
	s.reset(data)
	s.skip()
	s.end()
	return s.err
}

func TestScannerAcceptsExactlyValidJSON(t *testing.T) {
	cases := []string{
		`{}`, `[]`, `""`, `0`, `-0`, `1.5e+3`, `-12.0E-7`, `true`, `false`, `null`,
		`{"a":[1,{"b":"c\n\u00e9\ud83d\ude00"}],"d":null}`, ` [ 1 , 2 ] `,
		`{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":}`, `{1:2}`, `[1 2]`, `01`, `1.`, `.5`, `-`, `1e`,
		`"\x"`, `"\u12"`, "\"a\tb\"", `"abc`, `{"a":"b"`, `[[[`, `]`, `tru`, `nul`, `{"a":1}}`,
		`"\ud800"`, "\"\xff\"", `[1,{"a":[true,false,null,"x"]},-3.25]`,
	}
	for _, c := range cases {
		want := json.Valid([]byte(c))
		got := scanValid([]byte(c)) == nil
		if got != want {
			t.Errorf("%q: scanner valid=%v, json.Valid=%v", c, got, want)
		}
	}
}

func TestScannerDepthLimit(t *testing.T) {
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	if err := scanValid([]byte(deep)); err == nil {
		t.Fatal("nesting beyond maxDepth accepted")
	}
	ok := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	if err := scanValid([]byte(ok)); err != nil {
		t.Fatalf("nesting of maxDepth refused: %v", err)
	}
}

// swarMasks lists each SWAR mask with the byte test it stands for.
var swarMasks = map[string]struct {
	mask func(uint64) uint64
	test func(byte) bool
}{
	"special":  {specialMask, isSpecial},
	"escapeHi": {func(w uint64) uint64 { return eqMask(w, '\\') | w&msb }, func(c byte) bool { return c == '\\' || c >= 0x80 }},
	"escape":   {escapeMask, func(c byte) bool { return c >= 0x80 || !safeASCII[c] }},
	"html": {func(w uint64) uint64 { return eqMask(w, '<') | eqMask(w, '>') | eqMask(w, '&') | eqMask(w, 0xE2) },
		func(c byte) bool { return c == '<' || c == '>' || c == '&' || c == 0xE2 }},
}

// firstMatch is the index of the first byte of w that test accepts, 8 if none.
func firstMatch(w []byte, test func(byte) bool) int {
	for i, c := range w {
		if test(c) {
			return i
		}
	}
	return 8
}

// checkSWAR requires mask's first flagged byte to be the first byte test
// accepts.
func checkSWAR(t *testing.T, w []byte) {
	for name, m := range swarMasks {
		got := bits.TrailingZeros64(m.mask(leUint64(w))) >> 3
		if want := firstMatch(w, m.test); got != want {
			t.Fatalf("%s: %q: first match at %d, want %d", name, w, got, want)
		}
	}
}

func TestSWARMasks(t *testing.T) {
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 8; pos++ {
			for _, fill := range []byte{'a', 0, 0x7f, 0x80, 0xff, '"'} {
				w := bytes.Repeat([]byte{fill}, 8)
				w[pos] = byte(c)
				checkSWAR(t, w)
			}
		}
	}
}

func FuzzSWARMasks(f *testing.F) {
	f.Add(uint64(0x2020202020202020))
	f.Add(uint64(0x1f22225c80ff0001))
	f.Fuzz(func(t *testing.T, x uint64) {
		w := make([]byte, 8)
		for i := range w {
			w[i] = byte(x >> (8 * i))
		}
		checkSWAR(t, w)
	})
}

func leUint64(b []byte) uint64 {
	var w uint64
	for i := 7; i >= 0; i-- {
		w = w<<8 | uint64(b[i])
	}
	return w
}

// FuzzScannerValid: the scanner accepts exactly what json.Valid accepts, and
// decodes strings exactly as encoding/json does.
func FuzzScannerValid(f *testing.F) {
	for _, s := range []string{`{"a":"b\\n"}`, `[1,2,{"x":null}]`, `"\ud83d\ude00"`, "\"\xff\xfe\"", `{"a":1,}`, `-0.5e10`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want := json.Valid(data)
		if got := scanValid(data) == nil; got != want {
			t.Fatalf("scanner valid=%v, json.Valid=%v for %q", got, want, data)
		}
		trimmed := bytes.TrimSpace(data)
		if !want || len(trimmed) == 0 || trimmed[0] != '"' {
			return
		}
		var std string
		if err := json.Unmarshal(data, &std); err != nil {
			t.Fatalf("json.Unmarshal of a valid string: %v", err)
		}
		var s scanner
		s.reset(data)
		got := s.str()
		if s.err != nil || got != std {
			t.Fatalf("str() = %q, %v; encoding/json %q", got, s.err, std)
		}
		s.reset(data)
		if b := s.strBytes(); s.err != nil || string(b) != std {
			t.Fatalf("strBytes() = %q, %v; encoding/json %q", b, s.err, std)
		}
	})
}

// FuzzAppendString: appendString writes what json.Marshal writes.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "<a href='x'>&amp;</a>", "\u2028\u2029", "\x00\x1f\b\f\n\r\t\"\\", "\xff\xfe", "é😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
		}
	})
}

func TestBlockFieldsKnown(t *testing.T) {
	typ := reflect.TypeFor[conversation.Block]()
	var names []string
	for i := range typ.NumField() {
		tag := typ.Field(i).Tag.Get("json")
		names = append(names, strings.Split(tag, ",")[0])
	}
	if !reflect.DeepEqual(names, blockFields) {
		t.Fatalf("conversation.Block fields changed; update appendBlock and blockFields.\nBlock:   %v\nencoder: %v", names, blockFields)
	}
}

// TestEncodeMatchesMarshal: the hand-written payload encoders write exactly
// what json.Marshal writes for the same values.
func TestEncodeMatchesMarshal(t *testing.T) {
	str := rapid.OneOf(rapid.String(), rapid.SampledFrom([]string{"", "<&>", "a\u2028b", "\xff", "x\ny\"z"}))
	rapid.Check(t, func(t *rapid.T) {
		b := conversation.Block{
			ID:          str.Draw(t, "id"),
			Type:        conversation.BlockType(rapid.SampledFrom(conversation.BlockTypes).Draw(t, "type")),
			Status:      conversation.BlockStatus(rapid.SampledFrom([]string{"", "pending", "complete", "error"}).Draw(t, "status")),
			Content:     str.Draw(t, "content"),
			Model:       str.Draw(t, "model"),
			Summary:     str.Draw(t, "summary"),
			ToolName:    str.Draw(t, "toolName"),
			ToolUseID:   str.Draw(t, "toolUseId"),
			DisplayName: str.Draw(t, "displayName"),
			Description: str.Draw(t, "description"),
			Output:      str.Draw(t, "output"),
			IsError:     rapid.Bool().Draw(t, "isError"),
			DurationMs:  rapid.Int64().Draw(t, "durationMs"),
			Subtype:     str.Draw(t, "subtype"),
			Message:     str.Draw(t, "message"),
			Code:        str.Draw(t, "code"),
			SubagentID:  str.Draw(t, "subagentId"),
			Name:        str.Draw(t, "name"),
			SkillName:   str.Draw(t, "skillName"),
		}
		if rapid.Bool().Draw(t, "hasTime") {
			b.Timestamp = time.Unix(rapid.Int64Range(0, 1<<34).Draw(t, "sec"), rapid.Int64Range(0, 999999999).Draw(t, "nsec")).UTC()
		}
		if rapid.Bool().Draw(t, "hasMeta") {
			b.Metadata = map[string]any{"synthetic": true, str.Draw(t, "metaKey"): str.Draw(t, "metaVal")}
		}
		if rapid.Bool().Draw(t, "hasInput") {
			in, _ := json.Marshal(map[string]any{"k": str.Draw(t, "inputVal"), "n": rapid.Int().Draw(t, "n")})
			b.Input = in
		}
		want, err := json.Marshal(conversation.BlockUpsert{Block: b})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendUpsertPayload(nil, &b); !bytes.Equal(got, want) {
			t.Fatalf("upsert payload\n got %s\nwant %s", got, want)
		}
		id, delta := str.Draw(t, "blockId"), str.Draw(t, "delta")
		want, _ = json.Marshal(conversation.BlockDelta{BlockID: id, Delta: delta})
		if got := appendDeltaPayload(nil, id, delta); !bytes.Equal(got, want) {
			t.Fatalf("delta payload\n got %s\nwant %s", got, want)
		}
	})
}

func TestPassthroughJSONMatchesMarshal(t *testing.T) {
	for _, raw := range []string{
		`{"a":1}`, `{ "a" : [1, 2] }`, `{"html":"<b>&</b>"}`, "{\"ls\":\"a\u2028b\"}", `"x"`,
		"{\n  \"pretty\": true\n}",
	} {
		var s scanner
		s.reset([]byte(raw))
		before := s.spaces
		span := s.raw()
		if s.err != nil {
			t.Fatal(s.err)
		}
		want, _ := json.Marshal(json.RawMessage(raw))
		if got := passthroughJSON(span, s.spaces != before); !bytes.Equal(got, want) {
			t.Errorf("passthroughJSON(%q) = %s, want %s", raw, got, want)
		}
	}
	if compactJSON([]byte(`{"a":`)) != nil {
		t.Error("compactJSON accepted invalid JSON")
	}
}

func TestUnescapeReplacesLikeEncodingJSON(t *testing.T) {
	for _, body := range []string{`a\u00e9`, `\ud83d\ude00`, `\ud800x`, `\udc00`, "\xff\xfe", "é\xe2\x80", `\/\b\f`} {
		var std string
		if err := json.Unmarshal([]byte(`"`+body+`"`), &std); err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		got, ok := unescape([]byte(body))
		if !ok || string(got) != std {
			t.Errorf("unescape(%q) = %q, %v; want %q", body, got, ok, std)
		}
		if !utf8.Valid(got) {
			t.Errorf("unescape(%q) gave invalid UTF-8", body)
		}
	}
	for _, bad := range []string{`\x`, `\u12`, `\`} {
		if _, ok := unescape([]byte(bad)); ok {
			t.Errorf("unescape(%q) accepted a bad escape", bad)
		}
	}
}

// FuzzHTMLEscape: htmlEscape writes what json.HTMLEscape writes.
func FuzzHTMLEscape(f *testing.F) {
	for _, s := range []string{"", `{"a":"<b>&</b>"}`, "\u2028\u2029", "\xe2\x80", "\xe2\x80\xa8x<", "é😀&"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		var want bytes.Buffer
		json.HTMLEscape(&want, src)
		if got := htmlEscape(src); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("htmlEscape(%q) = %q, want %q", src, got, want.Bytes())
		}
	})
}
