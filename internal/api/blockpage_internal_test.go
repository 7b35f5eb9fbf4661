package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
)

// TestPageBlocksBytes: a page stops before the block that would take its
// blocks' JSON past blockPageBytes, and holds one block however large.
func TestPageBlocksBytes(t *testing.T) {
	var blocks []conversation.Block
	for i := range 40 {
		blocks = append(blocks, conversation.Block{ID: fmt.Sprint("b", i), Type: conversation.BlockToolResult,
			Output: strings.Repeat("x", 60<<10)})
	}
	page, off, err := pageBlocks(blocks, defaultBlockLimit, "")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(page)
	if len(raw) > blockPageBytes || len(page) < 7 || off != 40-len(page) || page[len(page)-1].ID != "b39" {
		t.Fatalf("page of %d blocks (%d bytes) at %d", len(page), len(raw), off)
	}
	huge := []conversation.Block{{ID: "h", Type: conversation.BlockSystem, Message: strings.Repeat("y", 2*blockPageBytes)}}
	if page, off, _ := pageBlocks(huge, 10, ""); len(page) != 1 || off != 0 {
		t.Fatalf("a huge block: page of %d at %d", len(page), off)
	}
	if page, off, _ := pageBlocks(blocks, 3, "b10"); len(page) != 3 || off != 7 || page[2].ID != "b9" {
		t.Fatalf("before b10: page of %d at %d", len(page), off)
	}
	if page, off, _ := pageBlocks(blocks, 3, "b0"); len(page) != 0 || off != 0 {
		t.Fatalf("before b0: page of %d at %d", len(page), off)
	}
}
