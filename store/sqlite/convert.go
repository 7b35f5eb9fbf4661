package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Times are stored as Unix nanoseconds, which cover 1677-09-21 to
// 2262-04-11; the zero time is stored as NULL.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// timeArg converts t for a query argument.
func timeArg(t time.Time) (any, error) {
	if t.IsZero() {
		return nil, nil
	}
	if t.Before(minTime) || t.After(maxTime) {
		return nil, fmt.Errorf("time %s is outside the storable range (%d to %d)", t.Format(time.RFC3339), minTime.Year(), maxTime.Year())
	}
	return t.UnixNano(), nil
}

// scanTime converts a stored time back, in UTC.
func scanTime(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

// optBytes stores an empty byte slice as NULL: an empty JSON document is
// no document.
func optBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// reqBytes stores b as a blob even when it is empty: an empty file is a file.
func reqBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// optString stores nil as NULL.
func optString(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// sqliteCode returns the extended SQLite result code of err, 0 if none.
func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

func isUniqueViolation(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

func isForeignKeyViolation(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}
