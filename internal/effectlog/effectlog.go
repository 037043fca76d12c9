// Package effectlog reads the effects logs of the kill tests: files of one
// line per effect, appended with one write each (O_APPEND), so that a
// SIGKILL loses nothing written and a reader sees whole lines, but for a
// last one still being written.
package effectlog

import (
	"bytes"
	"io"
	"os"
	"sync"
)

// Reader counts a log's lines incrementally: each Count reads only what
// was appended since the last one, so that a TwoPhase check on a batch of
// doubtful items (after a kill, up to 100 per worker) stays well within its
// lease, even under the race detector. It is safe for concurrent
// use.
type Reader struct {
	mu   sync.Mutex
	path string
	off  int64
	rest []byte // a last line not yet whole
	n    map[string]int
}

// NewReader returns a Reader of the log at path, which need not exist yet.
func NewReader(path string) *Reader { return &Reader{path: path, n: map[string]int{}} }

// Count reads what was appended to the log and returns how many lines are
// line.
func (r *Reader) Count(line string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.read(); err != nil {
		return 0, err
	}
	return r.n[line], nil
}

// Counts reads the whole log at path and returns how many times each
// whole line is in it.
func Counts(path string) (map[string]int, error) {
	r := NewReader(path)
	if err := r.read(); err != nil {
		return nil, err
	}
	return r.n, nil
}

func (r *Reader) read() error {
	f, err := os.Open(r.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, r.off, 1<<62))
	if err != nil {
		return err
	}
	r.off += int64(len(b))
	b = append(r.rest, b...)
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		r.n[string(b[:i])]++
		b = b[i+1:]
	}
	r.rest = b
	return nil
}
