package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// DefaultOutputLimit is the default Config.OutputLimit: the most bytes of
// one block's text kept in the log and the reduced conversation.
const DefaultOutputLimit = 64 << 10

const (
	// A truncated block still growing gets a progress upsert (its
	// totalBytes and tail) once at least boundNoteBytes more text came and
	// an interval passed since the last one: boundNoteEvery at first,
	// doubling with each upsert up to boundNoteMax. Live clients see the
	// block grow while the log grows by a tail per interval: some 150 of
	// them for an hour of output, not 3,600.
	boundNoteBytes = 64 << 10
	boundNoteEvery = time.Second
	boundNoteMax   = 30 * time.Second
	// textPlain is the content type of the artifacts holding full texts.
	textPlain = "text/plain; charset=utf-8"
)

// bounder keeps the text of every block a runner emits within limit bytes
// in the log (and so in every reduced state, replay and live stream). A
// block's text (output for tool_result and subagent blocks, content for the
// others: where block:delta appends) passes unchanged while it is at most
// limit bytes. Beyond, the log keeps its first limit/2 bytes as the field
// and its last limit/2 bytes as truncated.tail (an upsert replaces the
// field with the head when the text crosses the limit), later deltas go to
// a spool file in the data folder instead of the log, a progress upsert
// now and then says how far it got, and when the block completes (or the
// turn ends) the full text is stored as an artifact, named in
// truncated.artifact (or truncated.artifactError). Memory per block is
// bounded by limit whatever the text's size.
//
// The methods ending in Locked need mu held; Emit holds it across bounding
// and appending, so the log's order is the order in which the bounder
// decided.
type bounder struct {
	limit int
	dir   string // the session's spool folder
	sid   string
	arts  store.ArtifactStore // nil: the store keeps no artifacts
	// lookup returns block id of conversation conv as the log has it now
	// (false when it has none), for a block this bounder has not seen.
	lookup func(ctx context.Context, conv, id string) (conversation.Block, bool)
	// scan yields every block of the log's conversation once, for the
	// blocks an earlier server (or environment) left growing.
	scan func(ctx context.Context, f func(conv string, b conversation.Block)) error
	log  *slog.Logger
	now  func() time.Time

	mu      sync.Mutex
	scanned bool
	open    map[blockKey]*boundText
	// known: the blocks the log holds that are not open (completed ones,
	// which an upsert may take up again with the text they have).
	known map[blockKey]struct{}
	// inputs: the tool_use blocks whose input the log holds bounded
	// (boundinput.go).
	inputs map[blockKey]*inputState
}

type blockKey struct{ conv, id string }

// boundText is what the bounder knows of one block's text.
type boundText struct {
	typ  conversation.BlockType
	size int64  // bytes of the full text so far
	text []byte // the full text, while not truncated (at most limit bytes)

	trunc    bool
	headLen  int64    // bytes of the text the field holds
	spool    *os.File // the full text, once truncated
	spoolErr error    // the spool failed or was lost: no artifact
	ring     []byte   // the last bytes of the text after the head
	noted    int64    // size at the last progress upsert
	notedAt  time.Time
	noteGap  time.Duration // the interval before the next progress upsert
	spoolNam string
}

func newBounder(limit int, dir, sid string, arts store.ArtifactStore, log *slog.Logger) *bounder {
	return &bounder{limit: limit, dir: dir, sid: sid, arts: arts, log: log, now: time.Now,
		open: make(map[blockKey]*boundText), known: make(map[blockKey]struct{}),
		inputs: make(map[blockKey]*inputState)}
}

// textField names the field block:delta appends to for blocks of type t.
func textField(t conversation.BlockType) string {
	if t == conversation.BlockToolResult || t == conversation.BlockSubagent {
		return "output"
	}
	return "content"
}

func fieldText(b *conversation.Block) *string {
	if textField(b.Type) == "output" {
		return &b.Output
	}
	return &b.Content
}

func convOf(e conversation.Event) string {
	if e.Context.ConversationID == "" {
		return conversation.MainConversation
	}
	return e.Context.ConversationID
}

// boundLocked returns events as the log keeps them: deltas past a block's
// limit are dropped (spooled) or turned into progress upserts, upserts
// carrying too long a text get the head and a truncation.
func (bd *bounder) boundLocked(ctx context.Context, events []conversation.Event) []conversation.Event {
	if bd.limit <= 0 {
		return events
	}
	if !bd.scanned {
		bd.scanned = true
		bd.scanLocked(ctx)
	}
	out := events[:0:0]
	for _, e := range events {
		switch e.Type {
		case conversation.TypeBlockDelta:
			if ne, keep := bd.deltaLocked(ctx, e); keep {
				out = append(out, ne)
			}
		case conversation.TypeBlockUpsert:
			out = append(out, bd.upsertLocked(ctx, e))
		default:
			out = append(out, e)
		}
	}
	return out
}

func (bd *bounder) deltaLocked(ctx context.Context, e conversation.Event) (conversation.Event, bool) {
	var d conversation.BlockDelta
	if err := json.Unmarshal(e.Payload, &d); err != nil || d.Delta == "" {
		return e, true // the log refuses or keeps it as it is
	}
	key := blockKey{convOf(e), d.BlockID}
	bt := bd.open[key]
	if bt == nil {
		b, ok := bd.lookup(ctx, key.conv, key.id)
		if !ok {
			return e, true // a delta for an unknown block: the reducer reports it
		}
		bt = bd.seedLocked(ctx, key, b)
	}
	if !bt.trunc {
		if bt.size+int64(len(d.Delta)) <= int64(bd.limit) {
			bt.text = append(bt.text, d.Delta...)
			bt.size += int64(len(d.Delta))
			return e, true
		}
		text := string(bt.text) + d.Delta
		head := bd.truncateLocked(key, bt, text)
		b := conversation.Block{ID: key.id, Type: bt.typ, Truncated: bd.note(bt)}
		*fieldText(&b) = head
		return bd.rewrite(e, b), true
	}
	bd.spoolWrite(bt, d.Delta)
	if bt.size-bt.noted >= boundNoteBytes && bd.now().Sub(bt.notedAt) >= max(bt.noteGap, boundNoteEvery) {
		bt.noteGap = min(2*max(bt.noteGap, boundNoteEvery), boundNoteMax)
		return bd.rewrite(e, conversation.Block{ID: key.id, Type: bt.typ, Truncated: bd.note(bt)}), true
	}
	return e, false
}

func (bd *bounder) upsertLocked(ctx context.Context, e conversation.Event) conversation.Event {
	var p struct {
		Block conversation.Block `json:"block"`
	}
	if err := json.Unmarshal(e.Payload, &p); err != nil || p.Block.ID == "" {
		return e
	}
	b := p.Block
	key := blockKey{convOf(e), b.ID}
	bt := bd.open[key]
	done := b.Status == conversation.StatusComplete || b.Status == conversation.StatusError
	if _, known := bd.known[key]; bt == nil && known && (*fieldText(&b) != "" || !done) {
		// A block the log holds already, taken up again (it changes its
		// text or opens again): followed from its text as it is.
		if old, ok := bd.lookup(ctx, key.conv, key.id); ok {
			bt = bd.seedLocked(ctx, key, old)
		}
	}
	changed := false
	if text := *fieldText(&b); text != "" {
		if len(text) > bd.limit || (bt != nil && bt.trunc) {
			if bt == nil {
				bt = &boundText{typ: b.Type}
				bd.open[key] = bt
			}
			bt.typ = b.Type
			*fieldText(&b) = bd.truncateLocked(key, bt, text)
			b.Truncated = bd.note(bt)
			changed = true
		} else if !done {
			if bt == nil {
				bt = &boundText{}
				bd.open[key] = bt
			}
			bt.typ, bt.text, bt.size = b.Type, append(bt.text[:0], text...), int64(len(text))
		}
	} else if bt == nil && !done {
		bd.open[key] = &boundText{typ: b.Type}
	} else if bt != nil {
		bt.typ = b.Type
	}
	if b.Type == conversation.BlockToolUse && len(b.Input) > 0 {
		if tr, ok := bd.inputLocked(ctx, key, &b); ok {
			changed = true
			// A truncated text (which no converter sends in a tool_use
			// block) keeps truncated for itself; the input's bounded
			// strings still carry their markers.
			if tr != nil && b.Truncated == nil && (bt == nil || !bt.trunc) {
				b.Truncated = tr
			}
		}
	}
	if done && bt != nil {
		if bt.trunc {
			b.Truncated = bd.finishLocked(ctx, key, bt)
			changed = true
		}
		bd.dropLocked(key, bt)
	}
	if !changed {
		return e
	}
	return bd.rewrite(e, b)
}

// finishAllLocked completes every block still truncated and open (the
// turn ended without completing them): their artifacts are stored and
// upserts say so. Other open blocks are forgotten.
func (bd *bounder) finishAllLocked(ctx context.Context) []conversation.Event {
	var out []conversation.Event
	for key, bt := range bd.open {
		if bt.trunc {
			b := conversation.Block{ID: key.id, Type: bt.typ, Truncated: bd.finishLocked(ctx, key, bt)}
			e := conversation.Upsert(b)
			e.Context.ConversationID = key.conv
			out = append(out, e)
		}
		bd.dropLocked(key, bt)
	}
	if bd.dir != "" {
		_ = os.RemoveAll(bd.dir) // leftovers of blocks an earlier server never completed
	}
	return out
}

// rewrite returns e with b as its upsert (context kept).
func (bd *bounder) rewrite(e conversation.Event, b conversation.Block) conversation.Event {
	ne := conversation.Upsert(b)
	ne.Context = e.Context
	return ne
}

// truncateLocked makes text the block's full text, spooled, and returns the
// head the field keeps.
func (bd *bounder) truncateLocked(key blockKey, bt *boundText, text string) string {
	bt.text = nil
	bt.size = int64(len(text))
	head := text[:runeCut(text, min(len(text), bd.limit/2))]
	bt.headLen = int64(len(head))
	bt.ring = append(bt.ring[:0], text[len(head):][max(0, len(text)-len(head)-bd.limit/2):]...)
	bt.trunc = true
	bt.spoolErr = nil
	if bt.spool == nil {
		bt.spoolNam = bd.spoolName(key)
		if err := os.MkdirAll(bd.dir, 0o700); err != nil {
			bt.spoolErr = fmt.Errorf("spool: %w", err)
			return head
		}
		f, err := os.OpenFile(bt.spoolNam, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			bt.spoolErr = fmt.Errorf("spool: %w", err)
			return head
		}
		bt.spool = f
	} else if err := bt.spool.Truncate(0); err != nil {
		bt.spoolErr = fmt.Errorf("spool: %w", err)
		return head
	} else if _, err := bt.spool.Seek(0, io.SeekStart); err != nil {
		bt.spoolErr = fmt.Errorf("spool: %w", err)
		return head
	}
	if _, err := bt.spool.WriteString(text); err != nil {
		bt.spoolErr = fmt.Errorf("spool: %w", err)
	}
	return head
}

// spoolWrite appends text to a truncated block's spool and tail.
func (bd *bounder) spoolWrite(bt *boundText, text string) {
	if bt.spool != nil && bt.spoolErr == nil {
		// Written at the file's end (WriteString copies nothing).
		if _, err := bt.spool.WriteString(text); err != nil {
			bt.spoolErr = fmt.Errorf("spool: %w", err)
		}
	}
	bt.size += int64(len(text))
	tailMax := bd.limit / 2
	if len(text) >= tailMax {
		bt.ring = append(bt.ring[:0], text[len(text)-tailMax:]...)
		return
	}
	if len(bt.ring)+len(text) > 2*tailMax {
		keep := bt.ring[len(bt.ring)-(tailMax-len(text)):]
		bt.ring = append(bt.ring[:0], keep...)
	}
	bt.ring = append(bt.ring, text...)
}

// note returns the block's truncation as it stands, and marks it noted.
func (bd *bounder) note(bt *boundText) *conversation.Truncation {
	bt.noted, bt.notedAt = bt.size, bd.now()
	n := min(int64(bd.limit/2), bt.size-bt.headLen, int64(len(bt.ring)))
	tail := bt.ring[len(bt.ring)-int(n):]
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return &conversation.Truncation{Field: textField(bt.typ), TotalBytes: bt.size, Tail: string(tail)}
}

// finishLocked stores the block's full text as an artifact and returns its
// final truncation. A failure is reported in artifactError, never fails the
// event it rides on.
func (bd *bounder) finishLocked(ctx context.Context, key blockKey, bt *boundText) *conversation.Truncation {
	tr := bd.note(bt)
	switch {
	case bt.spoolErr != nil:
		tr.ArtifactError = bt.spoolErr.Error()
	case bt.spool == nil:
		tr.ArtifactError = "the full text was not kept"
	case bd.arts == nil:
		tr.ArtifactError = "the store keeps no artifacts"
	default:
		ref, err := bd.arts.PutArtifact(context.WithoutCancel(ctx), bd.sid,
			conversation.ArtifactRef{ContentType: textPlain, Name: key.id + ".txt"},
			io.NewSectionReader(bt.spool, 0, bt.size))
		if err != nil {
			tr.ArtifactError = fmt.Sprintf("store the full text: %v", err)
			if !errors.Is(err, store.ErrArtifactQuota) {
				bd.log.Error("store a truncated block's text", "block", key.id, "err", err)
			}
		} else {
			tr.Artifact = &ref
		}
	}
	return tr
}

func (bd *bounder) dropLocked(key blockKey, bt *boundText) {
	if bt.spool != nil {
		_ = bt.spool.Close()
		_ = os.Remove(bt.spoolNam)
		bt.spool = nil
	}
	delete(bd.open, key)
	bd.known[key] = struct{}{}
}

func (bd *bounder) closeLocked() {
	for key, bt := range bd.open {
		if bt.spool != nil {
			_ = bt.spool.Close() // kept: a turn resumed later continues it
			bt.spool = nil
		}
		delete(bd.open, key)
	}
}

// spoolName is the spool file of a block: named by its conversation and
// id, so a server resuming a turn finds it.
func (bd *bounder) spoolName(key blockKey) string {
	h := sha256.Sum256([]byte(key.conv + "\x00" + key.id))
	return filepath.Join(bd.dir, hex.EncodeToString(h[:12]))
}

// scanLocked takes up the blocks the log holds truncated and not
// completed (an earlier server's, whose turn this one resumes, or which
// ended with that server), and the pending blocks with text.
func (bd *bounder) scanLocked(ctx context.Context) {
	if bd.scan == nil {
		return
	}
	err := bd.scan(ctx, func(conv string, b conversation.Block) {
		tr := textTruncation(b)
		open := b.Status == conversation.StatusPending ||
			(tr != nil && tr.Artifact == nil && tr.ArtifactError == "")
		if b.Type == conversation.BlockToolUse && b.Truncated != nil && b.Truncated.Field == inputField {
			bd.seedInputLocked(blockKey{conv, b.ID}, b)
		}
		if open {
			bd.seedLocked(ctx, blockKey{conv, b.ID}, b)
		} else {
			bd.known[blockKey{conv, b.ID}] = struct{}{}
		}
	})
	if err != nil {
		bd.log.Warn("scan the log for open blocks", "err", err)
	}
}

// seedLocked starts following block b as the log holds it.
func (bd *bounder) seedLocked(ctx context.Context, key blockKey, b conversation.Block) *boundText {
	bt := &boundText{typ: b.Type}
	bd.open[key] = bt
	delete(bd.known, key)
	text := *fieldText(&b)
	tr := textTruncation(b)
	if tr == nil {
		bt.text = []byte(text)
		bt.size = int64(len(text))
		if bt.size > int64(bd.limit) {
			// Longer than this server keeps (a smaller limit than the
			// earlier server's): truncated from here on.
			bd.truncateLocked(key, bt, text)
		}
		return bt
	}
	bt.trunc = true
	bt.size, bt.headLen, bt.noted = tr.TotalBytes, int64(len(text)), tr.TotalBytes
	bt.ring = []byte(tr.Tail)
	bt.notedAt = bd.now()
	bt.spoolNam = bd.spoolName(key)
	if tr.Artifact != nil || tr.ArtifactError != "" {
		// A completed text taken up again: its artifact back in a spool.
		if err := bd.respoolLocked(ctx, bt, tr); err != nil {
			bt.spoolErr = fmt.Errorf("the full text could not be taken up again: %v", err)
		}
		return bt
	}
	// The spool holds at least what the log says (it is written before the
	// log); text beyond it was never recorded and is sent again.
	f, err := os.OpenFile(bt.spoolNam, os.O_RDWR, 0)
	if err == nil {
		fi, serr := f.Stat()
		switch {
		case serr != nil:
			err = serr
		case fi.Size() < tr.TotalBytes:
			err = fmt.Errorf("%d of %d bytes left", fi.Size(), tr.TotalBytes)
		default:
			if err = f.Truncate(tr.TotalBytes); err == nil {
				_, err = f.Seek(0, io.SeekEnd)
			}
		}
		if err != nil {
			_ = f.Close()
		} else {
			bt.spool = f
		}
	}
	if err != nil {
		bt.spoolErr = fmt.Errorf("the full text was lost with an earlier server: %v", err)
	}
	return bt
}

// textTruncation is b's truncation when it is its text's (not a tool_use
// block's input's).
func textTruncation(b conversation.Block) *conversation.Truncation {
	if b.Truncated == nil || b.Truncated.Field != textField(b.Type) {
		return nil
	}
	return b.Truncated
}

// respoolLocked fills a new spool of bt with the artifact of tr.
func (bd *bounder) respoolLocked(ctx context.Context, bt *boundText, tr *conversation.Truncation) error {
	if tr.Artifact == nil {
		return errors.New(tr.ArtifactError)
	}
	if bd.arts == nil {
		return errors.New("the store keeps no artifacts")
	}
	rc, err := bd.arts.OpenArtifact(ctx, bd.sid, tr.Artifact.SHA256, 0, -1)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := os.MkdirAll(bd.dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(bt.spoolNam, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if n, err := io.Copy(f, rc); err != nil || n != bt.size {
		_ = f.Close()
		return fmt.Errorf("%d of %d bytes copied: %v", n, bt.size, err)
	}
	bt.spool = f
	return nil
}

// runeCut returns the largest i <= n at which s may be cut between runes.
func runeCut(s string, n int) int {
	for i := n; i > 0 && i > n-utf8.UTFMax; i-- {
		if i == len(s) || utf8.RuneStart(s[i]) {
			return i
		}
	}
	if n == len(s) {
		return n
	}
	return 0
}
