// Package effectlog writes and reads the effects logs of the kill tests:
// files of one record per effect, appended with one write each (O_APPEND)
// by processes that may be SIGKILLed at any moment.
//
// A write is not whole when a SIGKILL lands in it: Linux copies a write
// into the file page by page and stops at a page boundary when a fatal
// signal is pending, so a 12-byte line that straddles two pages can leave
// its first bytes alone in the file, and the next process's line is then
// glued to them. A plain "line\n" format would read that as one strange
// line and lose the second: an effect counted zero times. So each record
// starts with a separator byte (0x1E, ASCII's record separator) and ends
// with a newline: a torn record is a prefix that starts with the separator
// and lacks the newline, and the record after it starts with the
// separator too. A reader keeps, of each newline-terminated line, what
// follows its last separator: the whole record, never a torn one. A
// record counts once its newline is in the file; a torn one never does,
// for every reader alike (a TwoPhase check reading the log incrementally,
// the test counting it at the end).
package effectlog

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// sep starts every record.
const sep = '\x1e'

// Append writes line to the log f, opened with O_APPEND, as one record in
// one write. line must not hold a newline or the separator.
func Append(f *os.File, line string) error {
	if strings.ContainsAny(line, "\n\x1e") {
		return fmt.Errorf("effectlog: %q holds a newline or the separator", line)
	}
	_, err := f.WriteString(string(sep) + line + "\n")
	return err
}

// Reader reads a log's records incrementally: each call reads only what
// was appended since the last one, so that a TwoPhase check on a batch of
// doubtful items (after a kill, up to 100 per worker) stays well within its
// lease, even under the race detector. It is safe for concurrent use.
type Reader struct {
	mu    sync.Mutex
	path  string
	off   int64
	rest  []byte // a last line not yet whole
	n     map[string]int
	lines []string // the records in order
	plain bool     // a line without the separator is a record (CountsMixed)
}

// NewReader returns a Reader of the log at path, which need not exist yet.
func NewReader(path string) *Reader { return &Reader{path: path, n: map[string]int{}} }

// Count reads what was appended to the log and returns how many records
// are line.
func (r *Reader) Count(line string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.read(); err != nil {
		return 0, err
	}
	return r.n[line], nil
}

// Counts reads the whole log at path and returns how many times each
// record is in it; a log that does not exist has none.
func Counts(path string) (map[string]int, error) {
	r, err := readAll(path, false)
	return r.n, err
}

// CountsMixed is Counts for a log that writers of plain lines ("line\n",
// with no separator: an older build of a worker) append to as well: such
// a line is a record, whole. A write of theirs that a SIGKILL cut short
// cannot be told from a record, nor can a record glued to it.
func CountsMixed(path string) (map[string]int, error) {
	r, err := readAll(path, true)
	return r.n, err
}

// Lines reads the whole log at path and returns its records in order; a
// log that does not exist has none.
func Lines(path string) ([]string, error) {
	r, err := readAll(path, false)
	return r.lines, err
}

// readAll reads the whole log at path; with plain, a line without the
// separator is a record (CountsMixed). On an error, the Reader is empty.
func readAll(path string, plain bool) (*Reader, error) {
	r := NewReader(path)
	r.plain = plain
	if err := r.read(); err != nil {
		return &Reader{}, err
	}
	return r, nil
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
	start := r.off - int64(len(r.rest)) // where b's first line starts
	r.off += int64(len(b))
	b = append(r.rest, b...)
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		line := b[:i]
		if !r.plain && (len(line) == 0 || line[0] != sep) {
			return fmt.Errorf("effectlog: %s: the line at byte %d is no record (written without effectlog.Append?): %q", r.path, start, line)
		}
		rec := string(line[bytes.LastIndexByte(line, sep)+1:]) // torn records before it are dropped (-1: plain)
		r.n[rec]++
		r.lines = append(r.lines, rec)
		start += int64(i + 1)
		b = b[i+1:]
	}
	r.rest = b
	return nil
}
