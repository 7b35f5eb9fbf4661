package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNoFreeUser: every user of the pool runs an environment.
var ErrNoFreeUser = errors.New("executor: no free user in the pool")

// maxPoolSize bounds a pool given as uid ranges.
const maxPoolSize = 1 << 16

// userPool hands out one user per environment. A user is taken when the
// server holds an exclusive flock on <lockDir>/<uid>.lock and no process runs
// as that uid; the lock's file is inherited by the executor (--hold-fd), so
// the user stays taken exactly as long as its executor lives: across server
// restarts, and also between several servers sharing the run folder. The
// process check catches what a dead executor may have left running.
//
// Safe for concurrent use.
type userPool struct {
	users   []*credential
	lockDir string

	mu   sync.Mutex
	next int // where the next search starts, so users rotate
}

// parseUserPool resolves pool entries: user names, numeric uids, and uid
// ranges "FIRST-LAST". A uid without a passwd entry runs with gid = uid and
// no supplementary groups.
func parseUserPool(entries []string) ([]*credential, error) {
	var out []*credential
	seen := map[uint32]bool{}
	add := func(c *credential) error {
		if c.uid == 0 {
			return fmt.Errorf("user pool: %q is root", c.name)
		}
		if !seen[c.uid] {
			seen[c.uid] = true
			out = append(out, c)
		}
		if len(out) > maxPoolSize {
			return fmt.Errorf("user pool: more than %d users", maxPoolSize)
		}
		return nil
	}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if lo, hi, ok := strings.Cut(e, "-"); ok && isDigits(lo) && isDigits(hi) {
			first, err1 := strconv.ParseUint(lo, 10, 32)
			last, err2 := strconv.ParseUint(hi, 10, 32)
			if err1 != nil || err2 != nil || last < first || last-first >= maxPoolSize {
				return nil, fmt.Errorf("user pool: bad uid range %q", e)
			}
			for u := first; u <= last; u++ {
				if err := add(uidCredential(uint32(u))); err != nil {
					return nil, err
				}
			}
			continue
		}
		c, err := lookupUser(e)
		if err != nil && isDigits(e) {
			n, perr := strconv.ParseUint(e, 10, 32)
			if perr != nil {
				return nil, fmt.Errorf("user pool: bad uid %q", e)
			}
			c, err = uidCredential(uint32(n)), nil
		}
		if err != nil {
			return nil, fmt.Errorf("user pool: %q: %w", e, err)
		}
		if err := add(c); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, errors.New("user pool: no users")
	}
	return out, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// uidCredential is a uid with its passwd entry if there is one, else gid =
// uid.
func uidCredential(uid uint32) *credential {
	if c, err := lookupUser(strconv.FormatUint(uint64(uid), 10)); err == nil && c.uid == uid {
		return c
	}
	return &credential{uid: uid, gid: uid, home: "/", name: strconv.FormatUint(uint64(uid), 10)}
}

// newUserPool makes lockDir (in a run folder ensureRunDir checked): the
// server's, 0700.
func newUserPool(users []*credential, lockDir string) (*userPool, error) {
	if err := os.Mkdir(lockDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("user pool: %w", err)
	}
	if _, err := checkOwnDir(lockDir); err != nil {
		return nil, fmt.Errorf("user pool: lock folder %s: %w", lockDir, err)
	}
	if err := os.Chmod(lockDir, 0o700); err != nil {
		return nil, fmt.Errorf("user pool: %w", err)
	}
	return &userPool{users: users, lockDir: lockDir}, nil
}

// acquire takes a free user. The returned file holds the user's lock: pass
// it to the executor, then close it; closing it before the executor has
// it releases the user.
func (p *userPool) acquire() (*credential, *os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	busy := 0
	for i := range p.users {
		j := (p.next + i) % len(p.users)
		c := p.users[j]
		f, err := openLockFile(p.lockDir, strconv.FormatUint(uint64(c.uid), 10)+".lock")
		if err != nil {
			return nil, nil, fmt.Errorf("user pool: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return nil, nil, fmt.Errorf("user pool: lock uid %d: %w", c.uid, err)
		}
		if n := processesOf(c.uid); n > 0 {
			// Left by an executor that died without cleaning up: not
			// safe to hand to another session until they are gone.
			f.Close()
			busy++
			continue
		}
		p.next = j + 1
		return c, f, nil
	}
	if busy > 0 {
		return nil, nil, fmt.Errorf("%w (%d users still run processes of a finished environment)", ErrNoFreeUser, busy)
	}
	return nil, nil, ErrNoFreeUser
}

// lookup returns the pool's user with uid.
func (p *userPool) lookup(uid uint32) *credential {
	for _, c := range p.users {
		if c.uid == uid {
			return c
		}
	}
	return nil
}

// processesOf counts the live processes whose /proc entry belongs to uid
// (the effective uid of a dumpable process). Zombies, which can do
// nothing, do not count.
func processesOf(uid uint32) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if !isDigits(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid == uid && !zombie(e.Name()) {
			n++
		}
	}
	return n
}

// zombie reports whether process pid (a /proc name) has exited and waits
// to be reaped.
func zombie(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return true // gone
	}
	// The state follows the command name, in parentheses.
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}
