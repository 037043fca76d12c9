//go:build unix

package idem

import (
	"errors"
	"os"
	"syscall"
)

// readRegular reads the file at path, refusing anything but a regular file
// without blocking (a FIFO put in the file's place is opened non-blocking
// and refused, never read). It is readRegularFile with the system calls
// made directly: open, fstat, read until end of file (most often one
// read), close, without an *os.File (which would also try the file in the
// runtime's poller and register a cleanup), as every Run reads the file
// three times. Its errors are *os.PathError's, as os's.
func readRegular(path string) ([]byte, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return readRegularFile(path) // not a regular file: its error, naming what it is
	}
	b := make([]byte, 0, int(st.Size)+512)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grown in place: the file grew
		}
		want := cap(b) - len(b)
		n, err := syscall.Read(fd, b[len(b):cap(b)])
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return b, nil
		}
		b = b[:len(b)+n]
		if n < want && int64(len(b)) >= st.Size {
			// A read of a regular file that stops short, past the size
			// fstat gave, stopped at the end of the file: the read
			// that would return 0 is spared.
			return b, nil
		}
	}
}
