package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/agentd/agentd/conversation"
)

const (
	// defaultBlockLimit is how many main-conversation blocks GET
	// /api/sessions/{id} returns without ?limit: the last ones.
	defaultBlockLimit = 200
	maxBlockLimit     = 1000
	// blockPageBytes bounds a page's blocks' JSON: the page stops before
	// the block that would pass it (one block at least). Block texts are
	// bounded by the output limit, so a page is too.
	blockPageBytes = 512 << 10
)

// blockPage reads ?limit and ?before.
func blockPage(r *http.Request) (limit int, before string, err error) {
	q := r.URL.Query()
	limit = defaultBlockLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxBlockLimit {
			return 0, "", badRequest(fmt.Sprintf("limit %q: want 1 to %d", v, maxBlockLimit))
		}
		limit = n
	}
	if q.Has("before") && q.Get("before") == "" {
		return 0, "", badRequest("before: want a block id")
	}
	return limit, q.Get("before"), nil
}

// pageBlocks returns the page of blocks: at most limit of the blocks
// before block id before (all blocks when before is ""), the last ones,
// fewer when their JSON would pass blockPageBytes; and the index of its
// first block.
func pageBlocks(blocks []conversation.Block, limit int, before string) ([]conversation.Block, int, error) {
	end := len(blocks)
	if before != "" {
		end = -1
		for i := range blocks {
			if blocks[i].ID == before {
				end = i
				break
			}
		}
		if end < 0 {
			return nil, 0, badRequest(fmt.Sprintf("before %q: the main conversation has no such block", before))
		}
	}
	start, size := end, 0
	for start > 0 && end-start < limit {
		raw, err := json.Marshal(blocks[start-1])
		if err != nil {
			return nil, 0, err
		}
		if size += len(raw) + 1; size > blockPageBytes && start < end {
			break
		}
		start--
	}
	return blocks[start:end:end], start, nil
}
