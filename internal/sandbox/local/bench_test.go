package local

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/agentd/agentd/sandbox"
)

// BenchmarkExecTrue is an exec round trip: start `true`, read its (empty)
// output to the end, wait for its status.
func BenchmarkExecTrue(b *testing.B) {
	env := testEnv(b, Options{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		for range p.Output() {
		}
		if st, err := p.Wait(ctx); err != nil || !st.Success() {
			b.Fatal(st, err)
		}
	}
}

// BenchmarkCreate creates an environment on a new workspace folder, ready
// for use (Terminate is not timed).
func BenchmarkCreate(b *testing.B) {
	p := New(Options{})
	base := b.TempDir()
	ctx := context.Background()
	i := 0
	for b.Loop() {
		i++
		e, err := p.Create(ctx, sandbox.Spec{Workspace: filepath.Join(base, strconv.Itoa(i))})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := e.Terminate(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkOutputThroughput reads 200 MiB of stdout through the chunk
// channel; MB/s is the pipe-to-consumer throughput.
func BenchmarkOutputThroughput(b *testing.B) {
	for _, tc := range []struct {
		name string
		pty  *sandbox.WindowSize
	}{{"pipe", nil}, {"pty", &sandbox.WindowSize{Rows: 24, Cols: 80}}} {
		b.Run(tc.name, func(b *testing.B) {
			env := testEnv(b, Options{})
			ctx := context.Background()
			const size = 200 << 20
			b.SetBytes(size)
			for b.Loop() {
				argv := []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}
				if tc.pty != nil {
					// Raw mode: no newline translation, so the byte count holds.
					argv = []string{"sh", "-c", fmt.Sprintf("stty raw -echo; head -c %d /dev/zero", size)}
				}
				p, err := env.Exec(ctx, sandbox.Cmd{Argv: argv, PTY: tc.pty})
				if err != nil {
					b.Fatal(err)
				}
				var n int64
				for c := range p.Output() {
					n += int64(len(c.Data))
				}
				if st, err := p.Wait(ctx); err != nil || !st.Success() || n != size {
					b.Fatalf("status %+v %v, %d bytes", st, err, n)
				}
			}
		})
	}
}

func BenchmarkWriteFile(b *testing.B) {
	env := testEnv(b, Options{})
	ctx := context.Background()
	data := make([]byte, 4096)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := env.WriteFile(ctx, "dir/file.txt", data, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadFile(b *testing.B) {
	env := testEnv(b, Options{})
	ctx := context.Background()
	if err := env.WriteFile(ctx, "dir/file.txt", make([]byte, 4096), 0); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := env.ReadFile(ctx, "dir/file.txt"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkListRecursive lists a workspace of 1000 files in 10 folders.
func BenchmarkListRecursive(b *testing.B) {
	env := testEnv(b, Options{})
	ctx := context.Background()
	var files []sandbox.File
	for i := range 1000 {
		files = append(files, sandbox.File{Path: fmt.Sprintf("d%d/f%d", i%10, i)})
	}
	if err := env.WriteFiles(ctx, files); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		list, err := env.List(ctx, "", true)
		if err != nil || len(list) != 1010 {
			b.Fatal(len(list), err)
		}
	}
}
