package claudeconv

// PayloadReader reads the few fields of block:upsert and block:delta
// payloads that tell how far a block got (agentd's own payloads: this
// package's encoder's or encoding/json's), with the converter's scanner.
// Text lengths are of the decoded strings, as the reducer stores them. A
// PayloadReader is not safe for concurrent use; the zero value is ready.
type PayloadReader struct{ s scanner }

// UpsertFields are the fields of a block:upsert payload PayloadReader
// reads: the block's id, type and status, and the byte lengths of its
// content and output (Has…: the field is present).
type UpsertFields struct {
	ID, Type, Status                 string
	HasStatus, HasContent, HasOutput bool
	Content, Output                  int
}

// Upsert reads a block:upsert payload. ok is false when the payload is
// not valid JSON or names no block id.
func (r *PayloadReader) Upsert(payload []byte) (f UpsertFields, ok bool) {
	s := &r.s
	s.reset(payload)
	if !s.enter('{') {
		return f, false
	}
	for first := true; s.next('}', &first); {
		if string(s.key()) != "block" || !s.enter('{') {
			s.skip()
			continue
		}
		for first2 := true; s.next('}', &first2); {
			switch string(s.key()) {
			case "id":
				f.ID = s.str()
			case "type":
				f.Type = s.str()
			case "status":
				f.Status, f.HasStatus = s.str(), true
			case "content":
				f.Content, f.HasContent = len(s.strBytes()), true
			case "output":
				f.Output, f.HasOutput = len(s.strBytes()), true
			default:
				s.skip()
			}
		}
	}
	return f, s.err == nil && f.ID != ""
}

// Delta reads a block:delta payload: the block and the delta's length in
// bytes.
func (r *PayloadReader) Delta(payload []byte) (blockID string, n int, ok bool) {
	s := &r.s
	s.reset(payload)
	if !s.enter('{') {
		return "", 0, false
	}
	for first := true; s.next('}', &first); {
		switch string(s.key()) {
		case "blockId":
			blockID = s.str()
		case "delta":
			n = len(s.strBytes())
		default:
			s.skip()
		}
	}
	return blockID, n, s.err == nil && blockID != ""
}
