package httpx

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// SweptListener is a listener whose connections' read deadlines in the
// future are kept as times and enforced by one sweep a tick over all of
// them, rather than by a runtime timer each. net/http's server sets a
// connection's read deadline several times a request (the header timeout
// as a request begins, none while it is served, the idle timeout after
// it): with a timer, twice re-armed and once stopped, a cost of its own on
// every keep-alive request. Swept, a deadline is a time stored under the
// connection's lock, and a connection past its deadline is cut at the
// next sweep, at most a tick late: a client that sends nothing, or half a
// header, is still cut off. A deadline in the past (net/http's way to end
// a pending read, or one already passed at the last sweep) and no
// deadline reach the connection at once, as do write deadlines. A
// connection handed to a handler (hijacked: a WebSocket) has its
// deadlines exactly as set from then on (ConnState).
type SweptListener struct {
	net.Listener
	tick  time.Duration
	last  atomic.Int64 // the last sweep's time, Unix nanoseconds
	start sync.Once
	done  chan struct{} // closed when the sweeps end
	mu    sync.Mutex
	conns map[*sweptConn]struct{} // swept
	shut  bool                    // the listener is closed
}

// SweepDeadlines wraps ln, its deadlines swept every tick.
func SweepDeadlines(ln net.Listener, tick time.Duration) *SweptListener {
	l := &SweptListener{Listener: ln, tick: tick, conns: map[*sweptConn]struct{}{}, done: make(chan struct{})}
	l.last.Store(time.Now().UnixNano())
	return l
}

func (l *SweptListener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.sweep() })
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &sweptConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[sc] = struct{}{}
	l.mu.Unlock()
	return sc, nil
}

// Close closes the listener and ends its sweeps; the connections it
// accepted stay open, their deadlines still swept until they close (the
// server closes them).
func (l *SweptListener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	if !l.shut {
		l.shut = true
		l.stopIfDoneLocked()
	}
	l.mu.Unlock()
	return err
}

// stopIfDoneLocked ends the sweeps once the listener is closed and no
// connection it accepted is left to sweep.
func (l *SweptListener) stopIfDoneLocked() {
	if l.shut && len(l.conns) == 0 {
		select {
		case <-l.done:
		default:
			close(l.done)
		}
	}
}

// ConnState is for http.Server.ConnState: a hijacked connection has its
// deadlines exactly as set from then on, served over TLS too (a
// tls.Conn's NetConn is the swept connection).
func (l *SweptListener) ConnState(c net.Conn, s http.ConnState) {
	if s != http.StateHijacked {
		return
	}
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = tc.NetConn()
	}
	if sc, ok := c.(*sweptConn); ok {
		sc.exactly()
	}
}

func (l *SweptListener) sweep() {
	t := time.NewTicker(l.tick)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case now := <-t.C:
			l.mu.Lock()
			for c := range l.conns {
				c.cutIfPast(now)
			}
			l.mu.Unlock()
			l.last.Store(now.UnixNano())
		}
	}
}

// forget stops sweeping c.
func (l *SweptListener) forget(c *sweptConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.stopIfDoneLocked()
	l.mu.Unlock()
}

// longAgo is a deadline in the past: it ends a pending read at once.
var longAgo = time.Unix(1, 0)

// sweptConn is a connection of a SweptListener.
type sweptConn struct {
	net.Conn
	l     *SweptListener
	mu    sync.Mutex
	want  time.Time // the read deadline set; zero: none
	set   bool      // Conn has a read deadline, in the past: want, or longAgo once the sweep saw want pass
	exact bool      // deadlines go to Conn as they are set
}

func (c *sweptConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.want = t
	switch {
	case c.exact:
		return c.Conn.SetReadDeadline(t)
	case !t.IsZero() && t.UnixNano() <= c.l.last.Load(): // in the past: ends a pending read now
		c.set = true
		return c.Conn.SetReadDeadline(t)
	case c.set: // none, or one in the future, which the sweep keeps
		c.set = false
		return c.Conn.SetReadDeadline(time.Time{})
	}
	return nil
}

func (c *sweptConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.Conn.SetWriteDeadline(t))
}

// cutIfPast ends c's pending read if its deadline has passed at now.
func (c *sweptConn) cutIfPast(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.exact && !c.set && !c.want.IsZero() && !c.want.After(now) {
		c.set = true
		c.Conn.SetReadDeadline(longAgo)
	}
}

// exactly gives Conn the deadline set, and every one from now on.
func (c *sweptConn) exactly() {
	c.mu.Lock()
	c.exact, c.set = true, false
	c.Conn.SetReadDeadline(c.want)
	c.mu.Unlock()
	c.l.forget(c)
}

// ReadFrom lets net/http's response copy a file with Conn's own ReadFrom
// (sendfile), as it does on a connection it accepts itself.
func (c *sweptConn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(c.Conn, r) }

// CloseWrite lets net/http's server half-close Conn after an error
// answer, so that the client reads it before the connection goes.
func (c *sweptConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *sweptConn) Close() error {
	c.l.forget(c)
	return c.Conn.Close()
}
