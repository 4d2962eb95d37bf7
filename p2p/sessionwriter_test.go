package p2p

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-msgio"

	"github.com/agentmesh/mesh/internal/testkit"
)

// heldStream records each write of a session's stream; the first waits
// until release closes. Each write fails with err, when set.
type heldStream struct {
	network.Stream
	release chan struct{}
	err     error
	mu      sync.Mutex
	writes  [][]byte
}

func (s *heldStream) SetWriteDeadline(time.Time) error { return nil }

func (s *heldStream) Write(b []byte) (int, error) {
	s.mu.Lock()
	s.writes = append(s.writes, bytes.Clone(b))
	first := len(s.writes) == 1
	s.mu.Unlock()
	if first {
		<-s.release
	}
	if s.err != nil {
		return 0, s.err
	}
	return len(b), nil
}

// TestSessionFramesQueuedGoInOneWrite: the frames queued while a frame is
// written go out together in the next write of the stream, each whole.
func TestSessionFramesQueuedGoInOneWrite(t *testing.T) {
	s := &heldStream{release: make(chan struct{})}
	w := &sessionWriter{s: s}
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	write := func(frame string) {
		wg.Go(func() {
			if err := w.write([]byte(frame), deadline); err != nil {
				t.Errorf("%s: %v", frame, err)
			}
		})
	}
	write("first")
	testkit.Eventually(t, 10*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.writes) == 1
	}, "the first frame written")
	var want []string
	for i := range 10 {
		want = append(want, fmt.Sprintf("frame %d", i))
		write(want[i])
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.queued) == 10*(1+len("frame 0"))
	}, "ten frames queued")
	close(s.release)
	wg.Wait()

	if len(s.writes) != 2 {
		t.Fatalf("%d writes, want 2: the first frame, then the ten queued meanwhile", len(s.writes))
	}
	r := msgio.NewVarintReaderSize(bytes.NewReader(slices.Concat(s.writes...)), 64)
	var got []string
	for {
		frame, err := r.ReadMsg()
		if err != nil {
			break
		}
		got = append(got, string(frame))
	}
	slices.Sort(got)
	want = append(want, "first")
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("frames read %q, want %q", got, want)
	}
}

// TestSessionFramesFailWithTheirWrite: a write that fails fails every
// frame it carried, each writer told so.
func TestSessionFramesFailWithTheirWrite(t *testing.T) {
	s := &heldStream{release: make(chan struct{}), err: errors.New("stream reset")}
	w := &sessionWriter{s: s}
	deadline := time.Now().Add(time.Minute)
	errs := make(chan error, 4)
	go func() { errs <- w.write([]byte("first"), deadline) }()
	testkit.Eventually(t, 10*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.writes) == 1
	}, "the first frame written")
	for range 3 {
		go func() { errs <- w.write([]byte("queued"), deadline) }()
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.queued) == 3*(1+len("queued"))
	}, "three frames queued")
	close(s.release)
	for range 4 {
		if err := <-errs; !errors.Is(err, s.err) {
			t.Errorf("a frame of a failed write: %v, want %v", err, s.err)
		}
	}
	if len(s.writes) != 2 {
		t.Errorf("%d writes, want 2", len(s.writes))
	}
}
