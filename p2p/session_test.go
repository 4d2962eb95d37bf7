package p2p

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"

	"github.com/agentmesh/mesh/internal/testkit"
)

// sessionPair starts two connected hosts, b serving proto as sessions
// with fn, and waits until a knows b serves it.
func sessionPair(t *testing.T, proto string, maxReq int, fn RequestHandler) (a, b *Host) {
	t.Helper()
	a, b = startHost(t, Config{}), startHost(t, Config{})
	b.HandleSessions(proto, maxReq, fn)
	connect(t, a, b)
	testkit.Eventually(t, 10*time.Second, func() bool {
		ok, _ := a.Libp2p().Peerstore().SupportsProtocols(b.ID(), protocol.ID(proto))
		return len(ok) == 1
	}, "b's protocols known to a")
	return a, b
}

// streamsOf counts the streams of proto between a and b, as b sees them.
func streamsOf(a, b *Host, proto string) int {
	n := 0
	for _, c := range b.Libp2p().Network().ConnsToPeer(a.ID()) {
		for _, s := range c.GetStreams() {
			if s.Protocol() == protocol.ID(proto) {
				n++
			}
		}
	}
	return n
}

// TestSessionRequests: the requests of one host to another share one
// stream, are served at once (an answer may overtake an earlier
// request's) and each gets its own answer.
func TestSessionRequests(t *testing.T) {
	t.Parallel()
	const proto = "/mesh/test/session/1.0.0"
	release := make(chan struct{})
	a, b := sessionPair(t, proto, 64, func(ctx context.Context, _ peer.ID, req []byte) ([]byte, error) {
		switch string(req) {
		case "wait":
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case "release":
			close(release)
		}
		return append([]byte("echo:"), req...), nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	waited := make(chan error, 1)
	go func() {
		resp, err := a.SessionRequest(ctx, b.ID(), proto, "", []byte("wait"), 64)
		if err == nil && string(resp) != "echo:wait" {
			err = fmt.Errorf("answer %q", resp)
		}
		waited <- err
	}()
	// "wait" is answered only once "release" was served after it.
	testkit.Eventually(t, 10*time.Second, func() bool { return streamsOf(a, b, proto) == 1 }, "the session opened")
	if resp, err := a.SessionRequest(ctx, b.ID(), proto, "", []byte("release"), 64); err != nil || string(resp) != "echo:release" {
		t.Fatalf("release: %q, %v", resp, err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("wait: %v", err)
	}

	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			req := fmt.Sprintf("r%d", i)
			if resp, err := a.SessionRequest(ctx, b.ID(), proto, "", []byte(req), 64); err != nil || string(resp) != "echo:"+req {
				t.Errorf("%s: %q, %v", req, resp, err)
			}
		})
	}
	wg.Wait()
	if n := streamsOf(a, b, proto); n != 1 {
		t.Errorf("%d streams of the session's protocol, want 1", n)
	}
}

// TestSessionOpenedOnce: requests sent at once before there is a session
// all go on the one the first opened (another request's session is never
// failed under it).
func TestSessionOpenedOnce(t *testing.T) {
	t.Parallel()
	const proto = "/mesh/test/session-once/1.0.0"
	a, b := sessionPair(t, proto, 64, func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) { return req, nil })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			<-start
			req := fmt.Sprint("r", i)
			if resp, err := a.SessionRequest(ctx, b.ID(), proto, "", []byte(req), 64); err != nil || string(resp) != req {
				t.Errorf("%s: %q, %v", req, resp, err)
			}
		})
	}
	close(start)
	wg.Wait()
	testkit.Eventually(t, 10*time.Second, func() bool { return streamsOf(a, b, proto) == 1 }, "one session left")
}

// TestSessionFailures: a request its handler refuses fails alone; one
// larger than the handler takes ends the session, and the next request
// opens another; an answer larger than asked for fails; dropping a
// session fails the requests waiting on it.
func TestSessionFailures(t *testing.T) {
	t.Parallel()
	const proto = "/mesh/test/session-fail/1.0.0"
	hanging := make(chan struct{})
	a, b := sessionPair(t, proto, 16, func(ctx context.Context, _ peer.ID, req []byte) ([]byte, error) {
		switch string(req) {
		case "fail":
			return nil, errors.New("boom")
		case "big":
			return bytes.Repeat([]byte("y"), 100), nil
		case "hang":
			close(hanging)
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return req, nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	call := func(req string, maxResp int) ([]byte, error) {
		return a.SessionRequest(ctx, b.ID(), proto, "", []byte(req), maxResp)
	}

	if _, err := call("fail", 64); !errors.Is(err, ErrRefused) {
		t.Errorf("refused request: %v, want ErrRefused", err)
	}
	if resp, err := call("ok", 64); err != nil || string(resp) != "ok" {
		t.Errorf("after a refusal: %q, %v", resp, err)
	}
	if n := dropCount(b, SurfaceStream, DropRefused); n != 1 {
		t.Errorf("refused requests counted %d, want 1", n)
	}

	if _, err := call(string(bytes.Repeat([]byte("x"), 100)), 64); err == nil {
		t.Error("a request over the handler's maxReq succeeded")
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return dropCount(b, SurfaceStream, DropTooLarge) == 1 }, "the oversized request counted")
	if resp, err := call("again", 64); err != nil || string(resp) != "again" {
		t.Errorf("after a session ended: %q, %v", resp, err)
	}

	if _, err := call("big", 10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("answer over maxResp: %v, want ErrTooLarge", err)
	}

	hung := make(chan error, 1)
	go func() {
		_, err := call("hang", 64)
		hung <- err
	}()
	<-hanging
	a.DropSession(b.ID(), proto)
	if err := <-hung; err == nil {
		t.Error("a request on a dropped session succeeded")
	}
	if resp, err := call("after", 64); err != nil || string(resp) != "after" {
		t.Errorf("after a session was dropped: %q, %v", resp, err)
	}
}

// TestSessionFallback: a peer that does not serve the session protocol
// gets the request on a stream of its own, on the fallback protocol.
func TestSessionFallback(t *testing.T) {
	t.Parallel()
	const old, proto = "/mesh/test/old/1.0.0", "/mesh/test/old/2.0.0"
	a, b := startHost(t, Config{}), startHost(t, Config{})
	b.HandleRequests(old, 64, func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) {
		return append([]byte("old:"), req...), nil
	})
	connect(t, a, b)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if resp, err := a.SessionRequest(ctx, b.ID(), proto, old, []byte("q"), 64); err != nil || string(resp) != "old:q" {
		t.Errorf("fallback: %q, %v", resp, err)
	}
}

// TestSessionsShareThePeersInFlight: a peer that opens several sessions
// (as a hostile one may: the resource manager lets it open 64 streams of
// a protocol) has at most sessionInFlight of its requests served at once
// over all of them, not that many a session; the others wait in their
// streams, and every one is answered once slots free.
func TestSessionsShareThePeersInFlight(t *testing.T) {
	t.Parallel()
	const proto = "/mesh/test/session-peer/1.0.0"
	release := make(chan struct{})
	var running, peak atomic.Int64
	a, b := sessionPair(t, proto, 64, func(ctx context.Context, _ peer.ID, req []byte) ([]byte, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return req, nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const sessions = 3
	var streams []network.Stream
	for range sessions {
		s, err := a.Libp2p().NewStream(ctx, b.ID(), protocol.ID(proto))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Reset()
		w := msgio.NewVarintWriter(s)
		for i := range sessionInFlight {
			if err := w.WriteMsg(append(binary.AppendUvarint(nil, uint64(i)), 'q')); err != nil {
				t.Fatal(err)
			}
		}
		streams = append(streams, s)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return running.Load() >= sessionInFlight }, "%d of the peer's requests served at once", sessionInFlight)
	if testkit.Until(time.Second, func() bool { return running.Load() > sessionInFlight }) {
		t.Fatalf("%d requests of one peer served at once over %d sessions, at most %d", running.Load(), sessions, sessionInFlight)
	}
	close(release)
	for i, s := range streams {
		r := msgio.NewVarintReaderSize(s, 64)
		for range sessionInFlight {
			frame, err := r.ReadMsg()
			if _, n := binary.Uvarint(frame); err != nil || n <= 0 || len(frame) != n+2 || frame[n] != sessionOK || frame[n+1] != 'q' {
				t.Fatalf("session %d: answer %x, %v", i, frame, err)
			}
		}
	}
	if p := peak.Load(); p > sessionInFlight {
		t.Errorf("at most %d requests served at once, want %d", p, sessionInFlight)
	}
}

// TestSessionEndsAreNotMalformed: a session its asker ends (dropped with
// a request on it, or idle and replaced, its stream reset) or whose
// connection closes is no malformed input; a frame without an id, or cut
// short, is.
func TestSessionEndsAreNotMalformed(t *testing.T) {
	t.Parallel()
	const proto = "/mesh/test/session-end/1.0.0"
	hanging := make(chan struct{}, 1)
	a, b := sessionPair(t, proto, 64, func(ctx context.Context, _ peer.ID, req []byte) ([]byte, error) {
		if string(req) == "hang" {
			hanging <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return req, nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	call := func(req string) error {
		_, err := a.SessionRequest(ctx, b.ID(), proto, "", []byte(req), 64)
		return err
	}
	ended := func(what string) {
		t.Helper()
		testkit.Eventually(t, 10*time.Second, func() bool { return streamsOf(a, b, proto) == 0 }, "the session %s ended", what)
	}

	go call("hang")
	<-hanging
	a.DropSession(b.ID(), proto)
	ended("dropped")
	if err := call("idle"); err != nil {
		t.Fatal(err)
	}
	a.DropSession(b.ID(), proto)
	ended("dropped idle")
	if err := call("closed"); err != nil {
		t.Fatal(err)
	}
	a.Libp2p().Network().ClosePeer(b.ID())
	ended("whose connection closed")
	if n := dropCount(b, SurfaceStream, DropMalformed); n != 0 {
		t.Errorf("%d sessions that ended counted malformed", n)
	}

	connect(t, a, b)
	for i, frame := range [][]byte{{}, bytes.Repeat([]byte{0xff}, 11), {5, 'x'}} {
		s, err := a.Libp2p().NewStream(ctx, b.ID(), protocol.ID(proto))
		if err != nil {
			t.Fatal(err)
		}
		w := msgio.NewVarintWriter(s)
		if i < 2 {
			w.WriteMsg(frame) // no id: 0 bytes, a varint past 64 bits
		} else {
			s.Write(frame) // a frame of 5 bytes, cut after 1
			s.CloseWrite()
		}
		testkit.Eventually(t, 10*time.Second, func() bool { return dropCount(b, SurfaceStream, DropMalformed) == i+1 }, "bad frame %d counted", i)
		s.Reset()
	}
}

// TestSessionRequestsReuseWorkers: requests sent one after another in a
// session are served on one goroutine (a worker that outlives each
// request, keeping the stack it grew), not on a new one each.
func TestSessionRequestsReuseWorkers(t *testing.T) {
	t.Parallel()
	const proto = "/mesh/test/session-workers/1.0.0"
	a, b := sessionPair(t, proto, 64, func(context.Context, peer.ID, []byte) ([]byte, error) {
		buf := make([]byte, 64)
		buf = buf[:runtime.Stack(buf, false)] // "goroutine <id> [running]:..."
		return bytes.Fields(buf)[1], nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	served := map[string]bool{}
	for range 20 {
		id, err := a.SessionRequest(ctx, b.ID(), proto, "", []byte("which"), 64)
		if err != nil {
			t.Fatal(err)
		}
		served[string(id)] = true
	}
	// Requests one at a time: each finds the worker of the one before
	// idle, but for a race of its answer with the worker's return to
	// waiting for the next.
	if len(served) > 5 {
		t.Errorf("20 requests one after another served on %d goroutines, want a worker reused", len(served))
	}
}
