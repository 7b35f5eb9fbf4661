package mockllm

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
)

// idGen derives the ids of one model call from the server's seed and the
// call's kind and number, never from randomness or the clock, so a rerun
// of the same script against the same client yields the same ids. A side
// request that races the main conversation (OpenCode asks for a title
// while the first turn runs) does not shift the main ids, because each
// kind counts its own calls.
type idGen struct {
	base string
}

func newIDGen(seed string, kind Kind, call int) *idGen {
	return &idGen{base: seed + "\x00" + string(kind) + "\x00" + strconv.Itoa(call)}
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func (g *idGen) sum(salt string, i int) [32]byte {
	return sha256.Sum256([]byte(g.base + "\x00" + salt + "\x00" + strconv.Itoa(i)))
}

// id is prefix + n base62 characters (like msg_01…, toolu_01…, call_…).
func (g *idGen) id(prefix string, n int, salt string) string {
	b := make([]byte, 0, len(prefix)+n)
	b = append(b, prefix...)
	for round := 0; len(b) < len(prefix)+n; round++ {
		h := g.sum(salt, round)
		for _, c := range h {
			if len(b) == len(prefix)+n {
				break
			}
			b = append(b, base62[int(c)%len(base62)])
		}
	}
	return string(b)
}

// hex is prefix + n lowercase hex digits (like resp_…, fc_…).
func (g *idGen) hex(prefix string, n int, salt string) string {
	var s string
	for round := 0; len(s) < n; round++ {
		h := g.sum(salt, round)
		s += hex.EncodeToString(h[:])
	}
	return prefix + s[:n]
}

// signature is an opaque base64 blob standing in for a thinking
// signature or encrypted reasoning.
func (g *idGen) signature(salt string) string {
	var raw []byte
	for round := 0; round < 3; round++ {
		h := g.sum("sig"+salt, round)
		raw = append(raw, h[:]...)
	}
	return base64.StdEncoding.EncodeToString(raw)
}
