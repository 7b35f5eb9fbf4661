package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	sio "github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/agentd/agentd/internal/seedproto"
)

// The seed's per-type events on Socket.IO (docs/api.md, "Socket.IO"): a
// client asks for them at the handshake with events=per-type, in its auth
// object (io(url, {auth: {events: "per-type"}})) or its query (the URL's
// ?events=per-type, which reaches the server from a client whose code
// cannot change). Each joined session's log is then mapped by a
// seedproto.Mapper, from the same subscription: the same order, and
// `after` resumes it as it does session:event.

const (
	eventsEnvelope = "envelope"
	eventsPerType  = "per-type"
)

// eventsMode reads the events form a Socket.IO handshake asks for.
func eventsMode(h *sio.Handshake) (string, error) {
	var vals []string
	if h.Auth != nil {
		if v, ok := h.Auth["events"]; ok {
			s, isString := v.(string)
			if !isString {
				return "", fmt.Errorf("events must be %q or %q", eventsEnvelope, eventsPerType)
			}
			vals = append(vals, s)
		}
	}
	if v, ok := h.Query["events"]; ok {
		switch t := v.(type) {
		case string:
			vals = append(vals, t)
		case []string:
			vals = append(vals, t...)
		case []any:
			for _, e := range t {
				if s, ok := e.(string); ok {
					vals = append(vals, s)
				}
			}
		}
	}
	mode := eventsEnvelope
	for _, v := range vals {
		switch v {
		case eventsEnvelope, "":
		case eventsPerType:
			mode = eventsPerType
		default:
			return "", fmt.Errorf("events %q: want %q or %q", v, eventsEnvelope, eventsPerType)
		}
	}
	return mode, nil
}

// primeBatch is how many events priming reads from the store at a time.
const primeBatch = 1000

// primedMapper returns a mapper for session id that knows the session's
// log up to seq after, as a client that loaded the session then (or
// received the events up to it) knows it.
func (conn *sioConn) primedMapper(id string, after int64) (*seedproto.Mapper, error) {
	m := seedproto.New(id)
	for from := int64(0); from < after; {
		evs, err := conn.x.s.cfg.Log.Read(conn.ctx, id, from, primeBatch)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if e.Seq > after {
				return m, nil
			}
			m.Prime(e)
		}
		if len(evs) < primeBatch {
			break
		}
		from = evs[len(evs)-1].Seq
	}
	return m, nil
}

// seedContentMax bounds the file content a per-type file event carries.
const seedContentMax = 256 << 10

// seedData encodes a mapped message's argument: the envelope itself for
// an event the seed had no event for; a file event with the file's text
// when the workspace still holds the version the event names (its
// sha256), it is text and at most seedContentMax bytes, as the seed's
// {path, content} files did.
func (conn *sioConn) seedData(ctx context.Context, id string, msg seedproto.Message, envelope []byte) []byte {
	if msg.Data == nil {
		return envelope
	}
	if fe, ok := msg.Data.(seedproto.FileEvent); ok && fe.File != nil && fe.File.SHA256 != "" && fe.File.Size != nil && *fe.File.Size <= seedContentMax {
		if data, err := conn.x.s.cfg.Sessions.ReadFile(ctx, id, fe.File.Path); err == nil && utf8.Valid(data) {
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) == fe.File.SHA256 {
				f := *fe.File
				text := string(data)
				f.Content = &text
				fe.File = &f
				msg.Data = fe
			}
		}
	}
	b, err := json.Marshal(msg.Data)
	if err != nil {
		// Only plain data goes in; a failure is a programming error, and
		// the client gets the envelope rather than nothing.
		conn.x.s.log.Error("encode a per-type event", "session", id, "event", msg.Event, "err", err)
		return envelope
	}
	return b
}
