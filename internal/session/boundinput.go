package session

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// A tool_use block's input (JSON) is bounded like a text: an input whose
// JSON is longer than the limit is stored whole as an artifact, and the log
// keeps a bounded JSON of the same shape (boundJSON). Only the log's copy
// is bounded: the runner keeps the input it gave, and permission requests
// (which a client may answer with an updatedInput derived from them) are
// not block upserts, so they carry the input whole.

const (
	// inputField is Truncation.Field for a tool_use block's input.
	inputField = "input"
	// appJSON is the content type of the artifacts holding full inputs.
	appJSON = "application/json"
	// fallbackKey is the one key of an input whose shape could not be kept
	// within the limit (see boundJSON).
	fallbackKey = "truncatedInput"
	// minStringCap is the least a shortened string keeps, in encoded bytes,
	// besides its marker: shorter strings are never shortened.
	minStringCap = 32
)

// inputState is what the bounder remembers of a tool_use block whose input
// it bounded: enough to recognise the same input (or its bounded form) sent
// again, without holding either.
type inputState struct {
	full    [32]byte // SHA-256 of the full input JSON (zero: unknown)
	bounded [32]byte // SHA-256 of the bounded input the log holds
	tr      conversation.Truncation
}

// omitted is the marker standing for n bytes cut out of a string.
func omitted(n int) string { return "\n… [" + strconv.Itoa(n) + " bytes omitted] …\n" }

// inputLocked bounds tool_use block b's input when its JSON is longer than
// the limit, or notes that an input within the limit replaced a bounded
// one. It returns the truncation to set (nil: none) and whether b changed.
func (bd *bounder) inputLocked(ctx context.Context, key blockKey, b *conversation.Block) (*conversation.Truncation, bool) {
	st := bd.inputs[key]
	if len(b.Input) <= bd.limit {
		if st == nil || sha256.Sum256(b.Input) == st.bounded {
			return nil, false // within the limit, or the bounded form sent again
		}
		// A short input replaced a bounded one: nothing is omitted any
		// more, which a truncation without artifact and with the input's
		// length says (an upsert cannot remove the old one).
		delete(bd.inputs, key)
		return &conversation.Truncation{Field: inputField, TotalBytes: int64(len(b.Input))}, true
	}
	full := sha256.Sum256(b.Input)
	bounded, err := boundJSON(b.Input, bd.limit)
	if err != nil {
		// Not JSON (the log refuses the event): left as it is.
		return nil, false
	}
	var tr conversation.Truncation
	if st != nil && st.full == full && st.tr.Artifact != nil {
		tr = st.tr // the same input again: stored already
	} else {
		tr = bd.storeInputLocked(ctx, key, b.Input)
	}
	b.Input = bounded
	bd.inputs[key] = &inputState{full: full, bounded: sha256.Sum256(bounded), tr: tr}
	c := tr
	return &c, true
}

// storeInputLocked stores a full input as an artifact and returns its
// truncation; a failure is reported in ArtifactError.
func (bd *bounder) storeInputLocked(ctx context.Context, key blockKey, input []byte) conversation.Truncation {
	tr := conversation.Truncation{Field: inputField, TotalBytes: int64(len(input))}
	if bd.arts == nil {
		tr.ArtifactError = "the store keeps no artifacts"
		return tr
	}
	ref, err := bd.arts.PutArtifact(context.WithoutCancel(ctx), bd.sid,
		conversation.ArtifactRef{ContentType: appJSON, Name: key.id + "-input.json"}, bytes.NewReader(input))
	if err != nil {
		tr.ArtifactError = fmt.Sprintf("store the full input: %v", err)
		if !errors.Is(err, store.ErrArtifactQuota) {
			bd.log.Error("store a truncated block's input", "block", key.id, "err", err)
		}
		return tr
	}
	tr.Artifact = &ref
	return tr
}

// seedInputLocked remembers a tool_use block whose input the log holds
// bounded (an earlier bounder's), so that its bounded form sent again is
// not taken for a new, short input.
func (bd *bounder) seedInputLocked(key blockKey, b conversation.Block) {
	st := &inputState{bounded: sha256.Sum256(b.Input), tr: *b.Truncated}
	if a := b.Truncated.Artifact; a != nil {
		if sum, err := hexSum(a.SHA256); err == nil {
			st.full = sum
		}
	}
	bd.inputs[key] = st
}

func hexSum(s string) ([32]byte, error) {
	var sum [32]byte
	b, err := hex.DecodeString(s)
	if err == nil && len(b) != len(sum) {
		err = errors.New("not a SHA-256")
	}
	copy(sum[:], b)
	return sum, err
}

// jval is a JSON value, its objects' keys in their order.
type jval struct {
	kind byte // 's' string, 'o' object, 'a' array, 'r' any other (raw)
	s    string
	raw  string
	keys []string
	vals []*jval
}

func parseJSON(raw []byte) (*jval, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := parseValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func parseValue(dec *json.Decoder) (*jval, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		v := &jval{kind: 'a'}
		if t == '{' {
			v.kind = 'o'
		}
		for dec.More() {
			if v.kind == 'o' {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v.keys = append(v.keys, k.(string))
			}
			e, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			v.vals = append(v.vals, e)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return v, nil
	case string:
		return &jval{kind: 's', s: t}, nil
	case json.Number:
		return &jval{kind: 'r', raw: string(t)}, nil
	case bool:
		return &jval{kind: 'r', raw: strconv.FormatBool(t)}, nil
	default:
		return &jval{kind: 'r', raw: "null"}, nil
	}
}

// encString appends s as encoding/json writes it (HTML characters escaped).
func encString(buf []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always encodes
	return append(buf, b...)
}

func (v *jval) encode(buf []byte) []byte {
	switch v.kind {
	case 's':
		return encString(buf, v.s)
	case 'r':
		return append(buf, v.raw...)
	}
	opening, closing := byte('['), byte(']')
	if v.kind == 'o' {
		opening, closing = '{', '}'
	}
	buf = append(buf, opening)
	for i, e := range v.vals {
		if i > 0 {
			buf = append(buf, ',')
		}
		if v.kind == 'o' {
			buf = encString(buf, v.keys[i])
			buf = append(buf, ':')
		}
		buf = e.encode(buf)
	}
	return append(buf, closing)
}

// encodedLen is the length of v.encode(nil), computed without encoding.
func (v *jval) encodedLen() int {
	switch v.kind {
	case 's':
		return encLen(v.s) + 2
	case 'r':
		return len(v.raw)
	}
	n := 2 + max(0, len(v.vals)-1) // brackets and commas
	for i, e := range v.vals {
		if v.kind == 'o' {
			n += encLen(v.keys[i]) + 3 // quotes and colon
		}
		n += e.encodedLen()
	}
	return n
}

// strings appends v's string values (not keys), depth first.
func (v *jval) strings(out []*jval) []*jval {
	if v.kind == 's' {
		return append(out, v)
	}
	for _, e := range v.vals {
		out = e.strings(out)
	}
	return out
}

// encRuneLen is the length of rune r (size bytes of the text) as
// encoding/json writes it in a string.
func encRuneLen(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1:
		return 6 // \ufffd
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t' || r == '\b' || r == '\f':
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
		return 6
	}
	return size
}

// encLen is the length of s's JSON encoding without its quotes.
func encLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		n += encRuneLen(r, size)
		i += size
	}
	return n
}

// shorten returns s cut to about capBytes encoded bytes: its first and last
// parts joined by the marker saying how many bytes are left out; s itself
// when that would not be shorter.
func shorten(s string, capBytes int) string {
	mark := encLen(omitted(len(s)))
	part := max(0, (capBytes-mark)/2)
	h, n := 0, 0
	for h < len(s) {
		r, size := utf8.DecodeRuneInString(s[h:])
		if n+encRuneLen(r, size) > part {
			break
		}
		n += encRuneLen(r, size)
		h += size
	}
	t, n := len(s), 0
	for t > h {
		r, size := utf8.DecodeLastRuneInString(s[:t])
		if n+encRuneLen(r, size) > part {
			break
		}
		n += encRuneLen(r, size)
		t -= size
	}
	if t-h <= len(omitted(t-h)) {
		return s
	}
	return s[:h] + omitted(t-h) + s[t:]
}

// waterCap returns the largest cap such that cutting every length in lens
// above it down to it brings total to at most target, or floor when none
// at or above floor does.
func waterCap(lens []int, total, target, floor int) int {
	sorted := append([]int(nil), lens...)
	sort.Sort(sort.Reverse(sort.IntSlice(sorted)))
	lo, hi := floor, max(floor, sorted[0])
	saved := func(c int) int {
		s := 0
		for _, l := range sorted {
			if l <= c {
				break
			}
			s += l - c
		}
		return s
	}
	if total-saved(lo) > target {
		return lo
	}
	for lo < hi { // the largest c in [lo, hi] with total-saved(c) <= target
		mid := lo + (hi-lo+1)/2
		if total-saved(mid) <= target {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// boundJSON returns a JSON value of at most limit bytes standing for raw (a
// value longer than that), keeping its shape where it can:
//
//  1. String values are shortened to their first and last parts joined by
//     "\n… [N bytes omitted] …\n", the longest first: every string longer
//     than some length is cut to it, the largest length that makes the
//     whole fit.
//  2. When that is not enough (many short strings, numbers) and raw is an
//     object, its values (with the strings shortened as far as step 1
//     goes) are cut the same way, the largest first, each replaced by a
//     string: the start and the end of its JSON text with the marker
//     between. The keys stay.
//  3. When that is not enough either (the keys alone are too long, or raw
//     is no object), the result is {"truncatedInput": "<start of raw's
//     JSON>\n… [N bytes omitted] …\n<end>"}.
func boundJSON(raw []byte, limit int) ([]byte, error) {
	v, err := parseJSON(raw)
	if err != nil {
		return nil, err
	}
	fit := func(target int, units []*jval, text func(*jval) string, set func(*jval, string)) []byte {
		for range 4 { // the estimate can miss by a rune's escape: try again tighter
			if len(units) == 0 {
				break
			}
			lens := make([]int, len(units))
			total := v.encodedLen()
			for i, u := range units {
				lens[i] = encLen(text(u))
			}
			c := waterCap(lens, total, target, len(omitted(total))+minStringCap)
			for i, u := range units {
				if lens[i] > c {
					set(u, shorten(text(u), c))
				}
			}
			out := v.encode(nil)
			if len(out) <= limit {
				return out
			}
			target -= len(out) - limit
		}
		return nil
	}
	// 1. Strings.
	if out := fit(limit, v.strings(nil), func(u *jval) string { return u.s }, func(u *jval, s string) { u.s = s }); out != nil {
		return out, nil
	}
	// 2. An object's values, as JSON texts.
	if v.kind == 'o' {
		units := append([]*jval(nil), v.vals...)
		text := func(u *jval) string {
			if u.kind == 's' {
				return u.s
			}
			return string(u.encode(nil))
		}
		set := func(u *jval, s string) { *u = jval{kind: 's', s: s} }
		if out := fit(limit, units, text, set); out != nil {
			return out, nil
		}
	}
	// 3. The whole as a string.
	whole := string(v.encode(nil))
	room := limit - len(`{"`+fallbackKey+`":""}`)
	for range 4 {
		out := (&jval{kind: 'o', keys: []string{fallbackKey}, vals: []*jval{{kind: 's', s: shorten(whole, room)}}}).encode(nil)
		if len(out) <= limit {
			return out, nil
		}
		room -= len(out) - limit
	}
	return []byte("{}"), nil
}
