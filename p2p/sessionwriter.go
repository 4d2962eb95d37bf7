package p2p

import (
	"encoding/binary"
	"runtime"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
)

// sessionWriter writes whole frames to a session's stream, each uvarint
// length-prefixed. The frames queued while one is written go out together
// in the next write: yamux sends each write of a stream as a frame of its
// own, encrypted apart and written with a system call of its own, and
// answers come in bursts (the writes of one of the directory's batches
// answered at once; the next requests of the clients those answers
// reached). A frame's writer waits for the write that carries it.
type sessionWriter struct {
	s network.Stream

	mu       sync.Mutex
	queued   []byte        // frames not yet written
	spare    []byte        // the buffer written last, for the next queue
	deadline time.Time     // the latest of the queued frames' deadlines
	next     *sessionFlush // the write the queued frames go in
	writing  bool          // a writer is writing the queue out
}

// maxSpare bounds the buffer a session's writer keeps for its next
// frames.
const maxSpare = 64 << 10

// sessionFlush is one write of queued frames: done closes once it was
// written, or failed with err.
type sessionFlush struct {
	done chan struct{}
	err  error
}

// answer writes the answer frame of request id; false when the stream
// broke.
func (w *sessionWriter) answer(id uint64, status byte, resp []byte) bool {
	frame := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+1+len(resp)), id)
	return w.write(append(append(frame, status), resp...), time.Now().Add(streamTimeout)) == nil
}

// write writes frame by deadline. A frame written in part leaves the
// stream unusable: the caller resets it (the frames written with it fail
// alike).
func (w *sessionWriter) write(frame []byte, deadline time.Time) error {
	w.mu.Lock()
	if w.next == nil {
		w.next = &sessionFlush{done: make(chan struct{})}
	}
	mine := w.next
	w.queued = binary.AppendUvarint(w.queued, uint64(len(frame)))
	w.queued = append(w.queued, frame...)
	if deadline.After(w.deadline) {
		w.deadline = deadline
	}
	if w.writing { // the writer at work writes it
		w.mu.Unlock()
		<-mine.done
		return mine.err
	}
	w.writing = true
	w.mu.Unlock()
	runtime.Gosched() // the frames being made meanwhile join this write
	w.flush()
	return mine.err
}

// flush writes the queue out, until none is left.
func (w *sessionWriter) flush() {
	for {
		w.mu.Lock()
		f, buf, deadline := w.next, w.queued, w.deadline
		if f == nil {
			w.writing = false
			w.mu.Unlock()
			return
		}
		w.next, w.queued, w.spare, w.deadline = nil, w.spare, nil, time.Time{}
		w.mu.Unlock()
		w.s.SetWriteDeadline(deadline)
		_, f.err = w.s.Write(buf) // yamux copies what it sends
		close(f.done)
		if cap(buf) <= maxSpare {
			w.mu.Lock()
			w.spare = buf[:0]
			w.mu.Unlock()
		}
	}
}
