// Package convert turns saved or streamed agent output files into agentd
// events, for `agentd convert` and for tests. Each format registers itself
// from its own file (claude.go, codex.go, …) with the converter of its
// architecture package.
package convert

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	"github.com/agentd/agentd/conversation"
)

// Input is one file to convert.
type Input struct {
	Name string
	R    io.Reader
}

// Sink receives a conversion's output.
type Sink interface {
	// Emit receives events in order.
	Emit(e conversation.Event) error
	// Warn reports a line that was skipped (bad JSON, a truncated line, an
	// error line); conversion goes on with the next line.
	Warn(file string, line int, err error)
}

// Format is one input format.
type Format struct {
	Name        string
	Description string
	// Convert converts all inputs as one run (a format whose run spans
	// several files, such as a Claude transcript with its subagent files,
	// groups them itself; others convert each input in turn).
	Convert func(inputs []Input, sink Sink) error
}

var (
	mu      sync.RWMutex
	formats = map[string]Format{}
)

// Register adds a format; registering a name twice panics.
func Register(f Format) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := formats[f.Name]; dup {
		panic("convert: format registered twice: " + f.Name)
	}
	formats[f.Name] = f
}

// Lookup returns a registered format.
func Lookup(name string) (Format, bool) {
	mu.RLock()
	defer mu.RUnlock()
	f, ok := formats[name]
	return f, ok
}

// Names lists the registered formats, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(formats))
	for n := range formats {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Options controls Run.
type Options struct {
	Format string
	Files  []string
	// Blocks prints the reduced blocks instead of the events: one JSON line
	// per block, main conversation first, then each subagent's blocks, each
	// line {"conversationId":…, "block":{…}}.
	Blocks bool
	// RequireEvents makes an input that yields no conversation event (log
	// events do not count) an error, ErrNoEvents: most likely the wrong
	// format. What was converted is still written.
	RequireEvents bool
}

// ErrNoEvents is Run's error when the input yielded no event at all: most
// likely the wrong format.
var ErrNoEvents = errors.New("no events")

// Formats returns every registered format, sorted by name.
func Formats() []Format {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]Format, 0, len(formats))
	for _, f := range formats {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Warning is a skipped line.
type Warning struct {
	File string
	Line int
	Err  error
}

func (w Warning) String() string { return fmt.Sprintf("%s:%d: %v", w.File, w.Line, w.Err) }

// Run converts opts.Files and writes JSON lines to out. Skipped lines are
// returned as warnings; an error means the conversion could not run at all
// (unknown format, unreadable file, write failure).
func Run(opts Options, out io.Writer) ([]Warning, error) {
	f, ok := Lookup(opts.Format)
	if !ok {
		return nil, fmt.Errorf("unknown format %q (known: %v)", opts.Format, Names())
	}
	if len(opts.Files) == 0 {
		return nil, fmt.Errorf("no input files")
	}
	var inputs []Input
	for _, name := range opts.Files {
		fh, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("open input: %w", err)
		}
		defer fh.Close()
		inputs = append(inputs, Input{Name: name, R: fh})
	}
	w := bufio.NewWriterSize(out, 64<<10)
	if opts.Blocks {
		s := &blocksSink{r: conversation.NewReducer()}
		if err := f.Convert(inputs, s); err != nil {
			return s.warnings, err
		}
		if s.count == 0 && opts.RequireEvents {
			return s.warnings, noEvents(f)
		}
		if err := s.writeBlocks(w); err != nil {
			return s.warnings, err
		}
		return s.warnings, w.Flush()
	}
	s := newEventSink(w)
	if err := f.Convert(inputs, s); err != nil {
		return s.warnings, err
	}
	if s.count == 0 && opts.RequireEvents {
		return s.warnings, noEvents(f)
	}
	return s.warnings, w.Flush()
}

func noEvents(f Format) error {
	return fmt.Errorf("%w: the input does not look like %s output (agentd convert --list shows every format)", ErrNoEvents, f.Name)
}
