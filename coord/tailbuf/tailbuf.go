// Package tailbuf is an io.Writer that keeps the last bytes written to it:
// the end of a command's output, where its errors are.
package tailbuf

import (
	"strings"
	"sync"
)

// Buffer keeps the last Max bytes written to it; it is safe for concurrent
// writers (a command's stdout and stderr).
type Buffer struct {
	max   int
	mu    sync.Mutex
	buf   []byte
	total int
}

// New returns a buffer that keeps the last max bytes.
func New(max int) *Buffer { return &Buffer{max: max} }

func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += len(p)
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

// String is what is kept, as valid UTF-8, and whether earlier bytes were
// dropped.
func (t *Buffer) String() (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(string(t.buf), "\uFFFD"), t.total > len(t.buf)
}
