package sqlite

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// memoryPath is the DSN path that asks for a throwaway database.
const memoryPath = ":memory:"

// dsn is a parsed data source name.
type dsn struct {
	path   string // file path as given, or memoryPath
	params config // settings from the query string, applied before Options
	set    paramSet
}

// paramSet records which settings the query string gave.
type paramSet struct {
	synchronous, busyTimeout bool
}

// parseDSN accepts sqlite:///abs/path.db, sqlite://relative.db,
// sqlite:relative.db, a plain path, or :memory: (each optionally with a
// query string: synchronous=normal|full, busy_timeout=<ms or duration>).
func parseDSN(s string) (dsn, error) {
	var d dsn
	rest := s
	if r, ok := strings.CutPrefix(rest, "sqlite:"); ok {
		rest = r
		if r, ok := strings.CutPrefix(rest, "//"); ok {
			rest = r
		}
	} else if scheme, _, ok := strings.Cut(rest, "://"); ok && !strings.ContainsAny(scheme, "/\\") {
		return d, fmt.Errorf("dsn %q: scheme %q is not sqlite", s, scheme)
	}
	p, query, _ := strings.Cut(rest, "?")
	if p == "" {
		return d, fmt.Errorf("dsn %q: no database path", s)
	}
	if strings.ContainsRune(p, 0) {
		return d, fmt.Errorf("dsn %q: path contains a NUL byte", s)
	}
	if strings.HasPrefix(p, "file:") {
		// The driver would read it as a URI with its own parameters.
		return d, fmt.Errorf("dsn %q: file: URIs are not supported; give a path", s)
	}
	d.path = p
	if query == "" {
		return d, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return d, fmt.Errorf("dsn %q: %w", s, err)
	}
	for key, vals := range q {
		if len(vals) != 1 {
			return d, fmt.Errorf("dsn %q: parameter %s given %d times", s, key, len(vals))
		}
		v := vals[0]
		switch key {
		case "synchronous":
			sync, err := parseSynchronous(v)
			if err != nil {
				return d, fmt.Errorf("dsn %q: %w", s, err)
			}
			d.params.synchronous, d.set.synchronous = sync, true
		case "busy_timeout":
			t, err := parseTimeout(v)
			if err != nil {
				return d, fmt.Errorf("dsn %q: busy_timeout: %w", s, err)
			}
			d.params.busyTimeout, d.set.busyTimeout = t, true
		default:
			return d, fmt.Errorf("dsn %q: unknown parameter %q (known: synchronous, busy_timeout)", s, key)
		}
	}
	return d, nil
}

func parseSynchronous(v string) (Synchronous, error) {
	switch strings.ToLower(v) {
	case "normal":
		return SyncNormal, nil
	case "full":
		return SyncFull, nil
	}
	return 0, fmt.Errorf("synchronous=%q: want normal or full", v)
}

// parseTimeout reads milliseconds ("5000") or a Go duration ("5s").
func parseTimeout(v string) (time.Duration, error) {
	var d time.Duration
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		if ms > int64(maxBusyTimeout/time.Millisecond) {
			return 0, fmt.Errorf("%q is too long", v)
		}
		d = time.Duration(ms) * time.Millisecond
	} else if d, err = time.ParseDuration(v); err != nil {
		return 0, fmt.Errorf("%q is neither milliseconds nor a duration", v)
	}
	if d < 0 {
		return 0, errors.New("must not be negative")
	}
	if d > maxBusyTimeout {
		return 0, fmt.Errorf("%q is too long", v)
	}
	return d, nil
}
