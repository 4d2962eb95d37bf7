package p2p

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/ratelimit"
	"github.com/agentmesh/mesh/internal/testkit"
)

var loopback = []string{"/ip4/127.0.0.1/tcp/0"}

// startHost starts a host on loopback with a fresh key unless cfg sets
// them, and closes it when the test ends.
func startHost(t *testing.T, cfg Config) *Host {
	t.Helper()
	if cfg.Key == nil {
		cfg.Key = identity.GenerateKey()
	}
	if cfg.Listen == nil {
		cfg.Listen = loopback
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := h.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func addrInfo(h *Host) peer.AddrInfo {
	return peer.AddrInfo{ID: h.ID(), Addrs: h.Libp2p().Addrs()}
}

// connect connects a to b and waits until both see the connection.
func connect(t *testing.T, a, b *Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.Connect(ctx, addrInfo(b)); err != nil {
		t.Fatalf("connect: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		return a.Connected(b.ID()) && b.Connected(a.ID())
	}, "connection seen on both sides")

}

func mustPeerID(t *testing.T, key ed25519.PrivateKey) peer.ID {
	t.Helper()
	id, err := PeerID(key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatalf("PeerID: %v", err)
	}
	return id
}

func TestParseAddrs(t *testing.T) {
	t.Parallel()
	a := mustPeerID(t, identity.GenerateKey())
	b := mustPeerID(t, identity.GenerateKey())
	c := mustPeerID(t, identity.GenerateKey())

	in := []string{
		"/ip4/10.0.0.3/tcp/4003/p2p/" + c.String(),
		"/ip4/10.0.0.1/tcp/4001/p2p/" + a.String(),
		"/ip4/10.0.0.2/tcp/4002/p2p/" + b.String(),
		"/ip4/10.0.0.1/udp/4001/quic-v1/p2p/" + a.String(),
		"/ip6/::1/tcp/4003/p2p/" + c.String(),
		"/ip4/10.0.0.11/tcp/4011/p2p/" + a.String(),
	}
	got, err := ParseAddrs(in)
	if err != nil {
		t.Fatalf("ParseAddrs: %v", err)
	}
	want := []struct {
		id    peer.ID
		addrs []string
	}{
		{c, []string{"/ip4/10.0.0.3/tcp/4003", "/ip6/::1/tcp/4003"}},
		{a, []string{"/ip4/10.0.0.1/tcp/4001", "/ip4/10.0.0.1/udp/4001/quic-v1", "/ip4/10.0.0.11/tcp/4011"}},
		{b, []string{"/ip4/10.0.0.2/tcp/4002"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d peers, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].ID != w.id {
			t.Errorf("peer %d = %s, want %s", i, got[i].ID, w.id)
		}
		var addrs []string
		for _, m := range got[i].Addrs {
			addrs = append(addrs, m.String())
		}
		if !slices.Equal(addrs, w.addrs) {
			t.Errorf("peer %d addrs = %v, want %v", i, addrs, w.addrs)
		}
	}

	// The simple case of the brief: [A1, B, A2] -> [A{1,2}, B].
	got, err = ParseAddrs([]string{in[1], in[2], in[3]})
	if err != nil {
		t.Fatalf("ParseAddrs: %v", err)
	}
	if len(got) != 2 || got[0].ID != a || got[1].ID != b || len(got[0].Addrs) != 2 || len(got[1].Addrs) != 1 {
		t.Errorf("ParseAddrs([A1 B A2]) = %v", got)
	}

	if got, err := ParseAddrs(nil); err != nil || len(got) != 0 {
		t.Errorf("ParseAddrs(nil) = %v, %v; want empty, nil", got, err)
	}

	for _, bad := range []string{
		"/ip4/10.0.0.1/tcp/4001",         // no /p2p/
		"not a multiaddr",                // malformed
		"/ip4/10.0.0.1/tcp/notaport",     // malformed
		"/ip4/10.0.0.1/tcp/4001/p2p/xyz", // bad peer ID
	} {
		if got, err := ParseAddrs([]string{in[0], bad}); err == nil {
			t.Errorf("ParseAddrs accepted %q: %v", bad, got)
		}
	}
}

func TestPeerIDPublicKey(t *testing.T) {
	t.Parallel()
	key := identity.GenerateKey()
	pub := key.Public().(ed25519.PublicKey)
	id, err := PeerID(pub)
	if err != nil {
		t.Fatalf("PeerID: %v", err)
	}
	back, err := PublicKey(id)
	if err != nil {
		t.Fatalf("PublicKey: %v", err)
	}
	if !back.Equal(pub) {
		t.Fatalf("PublicKey(PeerID(pub)) = %x, want %x", back, pub)
	}
	other := mustPeerID(t, identity.GenerateKey())
	if other == id {
		t.Fatal("two keys gave the same peer ID")
	}

	if _, err := PeerID(pub[:16]); err == nil {
		t.Error("PeerID accepted a 16-byte key")
	}
	// A peer ID of another key type is refused by PublicKey.
	_, secp, err := crypto.GenerateSecp256k1Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := peer.IDFromPublicKey(secp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PublicKey(sid); err == nil {
		t.Error("PublicKey accepted a secp256k1 peer ID")
	}

	h := startHost(t, Config{Key: key})
	if h.ID() != id {
		t.Errorf("host ID = %s, want PeerID(key) = %s", h.ID(), id)
	}
	for _, a := range h.Addrs() {
		if !strings.HasSuffix(a, "/p2p/"+id.String()) {
			t.Errorf("address %q does not end in /p2p/<id>", a)
		}
	}
	if len(h.Addrs()) == 0 {
		t.Error("host has no addresses")
	}
}

func TestRequest(t *testing.T) {
	t.Parallel()
	a := startHost(t, Config{})
	b := startHost(t, Config{})
	connect(t, a, b)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	t.Run("round trip", func(t *testing.T) {
		const proto = "/mesh/test/echo/1.0.0"
		var from atomic.Value
		b.HandleRequests(proto, 64, func(_ context.Context, p peer.ID, req []byte) ([]byte, error) {
			from.Store(p)
			return append([]byte("echo:"), req...), nil
		})
		resp, err := a.Request(ctx, b.ID(), proto, []byte("hello"), 64)
		if err != nil {
			t.Fatalf("Request: %v", err)
		}
		if string(resp) != "echo:hello" {
			t.Errorf("response = %q, want %q", resp, "echo:hello")
		}
		if got, _ := from.Load().(peer.ID); got != a.ID() {
			t.Errorf("handler saw peer %s, want %s", got, a.ID())
		}
		// Exactly at the limits is allowed.
		resp, err = a.Request(ctx, b.ID(), proto, bytes.Repeat([]byte("x"), 64-5), 64)
		if err != nil {
			t.Fatalf("Request at the limits: %v", err)
		}
		if len(resp) != 64 {
			t.Errorf("response length %d, want 64", len(resp))
		}
	})

	t.Run("request too large", func(t *testing.T) {
		const proto = "/mesh/test/small/1.0.0"
		var calls atomic.Int32
		b.HandleRequests(proto, 8, func(context.Context, peer.ID, []byte) ([]byte, error) {
			calls.Add(1)
			return []byte("ok"), nil
		})
		if _, err := a.Request(ctx, b.ID(), proto, bytes.Repeat([]byte("x"), 100), 64); err == nil {
			t.Error("Request over the handler's maxReq succeeded")
		}
		if n := calls.Load(); n != 0 {
			t.Errorf("handler called %d times for an oversized request", n)
		}
		testkit.Eventually(t, 5*time.Second, func() bool { return dropCount(b, SurfaceStream, DropTooLarge) == 1 }, "the oversized request counted")
		// The protocol still works for a request within the limit.
		if resp, err := a.Request(ctx, b.ID(), proto, []byte("12345678"), 64); err != nil || string(resp) != "ok" {
			t.Errorf("Request within limit = %q, %v", resp, err)
		}
	})

	t.Run("response too large", func(t *testing.T) {
		const proto = "/mesh/test/big/1.0.0"
		b.HandleRequests(proto, 64, func(context.Context, peer.ID, []byte) ([]byte, error) {
			return bytes.Repeat([]byte("y"), 100), nil
		})
		resp, err := a.Request(ctx, b.ID(), proto, []byte("q"), 10)
		if err == nil {
			t.Fatalf("Request accepted a 100-byte response with maxResp 10: %q", resp)
		}
		if !errors.Is(err, ErrTooLarge) {
			t.Errorf("error %v does not wrap ErrTooLarge", err)
		}
	})

	t.Run("handler error", func(t *testing.T) {
		const proto = "/mesh/test/fail/1.0.0"
		var calls atomic.Int32
		b.HandleRequests(proto, 64, func(context.Context, peer.ID, []byte) ([]byte, error) {
			calls.Add(1)
			return []byte("not sent"), errors.New("boom")
		})
		resp, err := a.Request(ctx, b.ID(), proto, []byte("q"), 64)
		if err == nil {
			t.Errorf("Request succeeded (%q) although the handler failed", resp)
		}
		if calls.Load() != 1 {
			t.Errorf("handler called %d times, want 1", calls.Load())
		}
		if n := dropCount(b, SurfaceStream, DropRefused); n != 1 {
			t.Errorf("refused requests counted %d, want 1", n)
		}
	})

	t.Run("malformed request", func(t *testing.T) {
		const proto = "/mesh/test/truncated/1.0.0"
		b.HandleRequests(proto, 64, func(context.Context, peer.ID, []byte) ([]byte, error) { return nil, nil })
		s, err := a.Libp2p().NewStream(ctx, b.ID(), proto)
		if err != nil {
			t.Fatal(err)
		}
		s.Write([]byte{10, 'x'}) // announces 10 bytes, sends 1
		s.CloseWrite()
		testkit.Eventually(t, 5*time.Second, func() bool { return dropCount(b, SurfaceStream, DropMalformed) == 1 }, "the truncated request counted")
		s.Reset()
	})

	t.Run("unknown protocol", func(t *testing.T) {
		if _, err := a.Request(ctx, b.ID(), "/mesh/test/none/1.0.0", []byte("q"), 64); err == nil {
			t.Error("Request on an unserved protocol succeeded")
		}
	})
}

func dropCount(h *Host, surface, reason string) int {
	return int(testutil.ToFloat64(h.drops.WithLabelValues(surface, reason)))
}

// TestCloseWaitsForHandlers: a handler runs with a context that Close
// cancels, and Close returns only once it has returned.
func TestCloseWaitsForHandlers(t *testing.T) {
	t.Parallel()
	a := startHost(t, Config{})
	b, err := New(Config{Key: identity.GenerateKey(), Listen: loopback})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	connect(t, a, b)
	entered := make(chan struct{})
	var returned atomic.Bool
	b.HandleRequests("/mesh/test/slow/1.0.0", 64, func(ctx context.Context, _ peer.ID, _ []byte) ([]byte, error) {
		defer returned.Store(true)
		close(entered)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // still busy when the context ends
		return nil, ctx.Err()
	})
	go a.Request(t.Context(), b.ID(), "/mesh/test/slow/1.0.0", []byte("q"), 64)
	<-entered
	if err := b.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	if !returned.Load() {
		t.Fatal("Close returned while a stream handler was running")
	}
}

func TestBootstrapReconnect(t *testing.T) {
	t.Parallel()
	keyA := identity.GenerateKey()
	a := startHost(t, Config{Key: keyA})

	var tcpAddr ma.Multiaddr
	for _, s := range a.Addrs() {
		full, err := ma.NewMultiaddr(s)
		if err != nil {
			t.Fatal(err)
		}
		transport, id := peer.SplitAddr(full)
		if id != a.ID() {
			t.Fatalf("address %s has peer %s, want %s", s, id, a.ID())
		}
		if strings.Contains(transport.String(), "/tcp/") {
			tcpAddr = transport
		}
	}
	if tcpAddr == nil {
		t.Fatalf("no tcp address in %v", a.Addrs())
	}
	infos, err := ParseAddrs(a.Addrs())
	if err != nil {
		t.Fatal(err)
	}

	b := startHost(t, Config{Bootstrap: infos})
	other := startHost(t, Config{})

	if !b.IsBootstrap(a.ID()) {
		t.Error("IsBootstrap(A) = false on B")
	}
	if b.IsBootstrap(b.ID()) || b.IsBootstrap(other.ID()) || other.IsBootstrap(a.ID()) {
		t.Error("IsBootstrap true for a peer that is not a bootstrap peer")
	}

	testkit.Eventually(t, 10*time.Second, func() bool {
		return b.Connected(a.ID())
	}, "B to connect to bootstrap peer A")

	if err := a.Close(); err != nil {
		t.Logf("closing A: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return !b.Connected(a.ID()) }, "B to see A gone")
	// libp2p's swarm backs an address off after a refused dial, longer
	// after each (5 s, then 5 s + n² s): B's own loop clears that before
	// dialling a bootstrap peer, or a bootstrap node that was down for a
	// while would wait minutes to be rejoined. Make it long.
	sw := b.Libp2p().Network().(*swarm.Swarm)
	testkit.Eventually(t, 10*time.Second, func() bool { return sw.Backoff().Backoff(a.ID(), tcpAddr) }, "B's dial to A to fail")
	for range 10 {
		sw.Backoff().AddBackoff(a.ID(), tcpAddr) // now over 100 s
	}

	restarted := time.Now()
	a2 := startHost(t, Config{Key: keyA, Listen: []string{tcpAddr.String()}})
	if a2.ID() != a.ID() {
		t.Fatalf("restarted A has ID %s, want %s", a2.ID(), a.ID())
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		return b.Connected(a2.ID()) && a2.Connected(b.ID())
	}, "B to reconnect to restarted A")

	t.Logf("B reconnected %v after A restarted", time.Since(restarted).Round(time.Millisecond))
}

// pubsubPair starts two connected hosts, joins topic on both (pubCfg on the
// publisher, subCfg on the receiver) and waits until the publisher sees the
// receiver's subscription.
func pubsubPair(t *testing.T, topic string, pubCfg, subCfg TopicConfig) (pub, sub *Host, pt, st *Topic) {
	t.Helper()
	pub = startHost(t, Config{})
	sub = startHost(t, Config{})
	connect(t, pub, sub)
	var err error
	if st, err = sub.Join(topic, subCfg); err != nil {
		t.Fatalf("Join on receiver: %v", err)
	}
	if pt, err = pub.Join(topic, pubCfg); err != nil {
		t.Fatalf("Join on publisher: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		return slices.Contains(pt.Peers(), sub.ID())
	}, "publisher to see the receiver's subscription")

	return pub, sub, pt, st
}

// inbox records deliveries.
type inbox struct {
	mu   sync.Mutex
	msgs []delivery
}

type delivery struct {
	from peer.ID
	data string
}

func (d delivery) String() string { return fmt.Sprintf("%q from %s", d.data, d.from) }

func (in *inbox) deliver(m Message) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.msgs = append(in.msgs, delivery{m.From, string(m.Data)})
}

func (in *inbox) all() []delivery {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.msgs)
}

func (in *inbox) has(data string) bool {
	return slices.ContainsFunc(in.all(), func(d delivery) bool { return d.data == data })
}

func publish(t *testing.T, tp *Topic, data string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := tp.Publish(ctx, []byte(data)); err != nil {
		t.Fatalf("Publish(%q): %v", data, err)
	}
}

func TestPubsub(t *testing.T) {
	t.Parallel()

	t.Run("last words before Close", func(t *testing.T) {
		t.Parallel()
		var got inbox
		pub, _, pt, _ := pubsubPair(t, "last-words", TopicConfig{}, TopicConfig{Deliver: got.deliver})
		const n = 20
		for i := range n {
			publish(t, pt, fmt.Sprint("word ", i))
		}
		pub.Close() // right after publishing: what was published is flushed first
		testkit.Eventually(t, 10*time.Second, func() bool { return len(got.all()) == n }, "every word published before Close")
	})

	t.Run("deliver", func(t *testing.T) {
		t.Parallel()
		var got, own inbox
		var validated atomic.Value
		pub, _, pt, st := pubsubPair(t, "deliver",
			TopicConfig{Deliver: own.deliver},
			TopicConfig{
				Deliver: got.deliver,
				Validate: func(origin peer.ID, data []byte) (any, error) {
					validated.Store(origin)
					return nil, nil
				},
			})
		publish(t, pt, "hello")
		testkit.Eventually(t, 10*time.Second, func() bool { return len(got.all()) > 0 }, "delivery")
		msgs := got.all()
		if len(msgs) != 1 || msgs[0].data != "hello" || msgs[0].from != pub.ID() {
			t.Errorf("delivered %v, want one \"hello\" from %s", msgs, pub.ID())
		}
		if o, _ := validated.Load().(peer.ID); o != pub.ID() {
			t.Errorf("Validate saw origin %s, want %s", o, pub.ID())
		}
		// Own messages are delivered too.
		testkit.Eventually(t, 10*time.Second, func() bool { return own.has("hello") }, "own delivery")
		for _, r := range []string{DropTooLarge, DropInvalid, DropRate} {
			if n := st.Dropped(r); n != 0 {
				t.Errorf("Dropped(%s) = %d, want 0", r, n)
			}
		}
	})

	// P - R - S in a line: S gets P's messages through R, and both Deliver
	// and Validate see P (the authenticated origin), not R (the forwarder).
	t.Run("relayed origin", func(t *testing.T) {
		t.Parallel()
		p := startHost(t, Config{})
		r := startHost(t, Config{})
		s := startHost(t, Config{})
		connect(t, p, r)
		connect(t, r, s)
		var got inbox
		var badOrigin atomic.Value
		check := func(origin peer.ID, _ []byte) (any, error) {
			if origin != p.ID() {
				badOrigin.Store(origin)
			}
			return nil, nil
		}
		if _, err := s.Join("relay", TopicConfig{Validate: check, Deliver: got.deliver}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Join("relay", TopicConfig{Validate: check}); err != nil {
			t.Fatal(err)
		}
		pt, err := p.Join("relay", TopicConfig{})
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, func() bool {
			return slices.Contains(pt.Peers(), r.ID())
		}, "P to see R's subscription")

		if p.Connected(s.ID()) {
			t.Fatal("P and S are connected directly")
		}
		// R forwards only to its mesh, which forms on a heartbeat: publish
		// until a message gets through.
		n := 0
		testkit.Eventually(t, 10*time.Second, func() bool {
			publish(t, pt, fmt.Sprintf("r%d", n))
			n++
			return testkit.Until(300*time.Millisecond, func() bool { return len(got.all()) > 0 })
		}, "a relayed delivery")

		for _, d := range got.all() {
			if d.from != p.ID() {
				t.Errorf("delivered %v, want origin %s (R is %s)", d, p.ID(), r.ID())
			}
		}
		if o := badOrigin.Load(); o != nil {
			t.Errorf("Validate saw origin %s, want %s", o, p.ID())
		}
	})

	t.Run("too large", func(t *testing.T) {
		t.Parallel()
		var got inbox
		_, _, pt, st := pubsubPair(t, "large",
			TopicConfig{},
			TopicConfig{MaxSize: 16, Deliver: got.deliver})
		big := strings.Repeat("x", 17)
		publish(t, pt, big)
		publish(t, pt, "small")
		testkit.Eventually(t, 10*time.Second, func() bool {
			return got.has("small") && st.Dropped(DropTooLarge) == 1
		}, "small delivered and big dropped")

		if got.has(big) {
			t.Error("a message over MaxSize was delivered")
		}
		if n := st.Dropped(DropInvalid); n != 0 {
			t.Errorf("Dropped(invalid) = %d, want 0", n)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		t.Parallel()
		var got inbox
		_, _, pt, st := pubsubPair(t, "invalid",
			TopicConfig{},
			TopicConfig{
				Deliver: got.deliver,
				Validate: func(_ peer.ID, data []byte) (any, error) {
					if string(data) == "bad" {
						return nil, errors.New("bad message")
					}
					return nil, nil
				},
			})
		publish(t, pt, "bad")
		publish(t, pt, "good")
		testkit.Eventually(t, 10*time.Second, func() bool {
			return got.has("good") && st.Dropped(DropInvalid) == 1
		}, "good delivered and bad dropped")

		if got.has("bad") {
			t.Error("a message refused by Validate was delivered")
		}
	})

	t.Run("ignore", func(t *testing.T) {
		t.Parallel()
		var got inbox
		var sawIgnored atomic.Bool
		_, sub, pt, st := pubsubPair(t, "ignore",
			TopicConfig{},
			TopicConfig{
				Deliver: got.deliver,
				Validate: func(_ peer.ID, data []byte) (any, error) {
					switch string(data) {
					case "dup":
						sawIgnored.Store(true)
						return nil, fmt.Errorf("seen before: %w", ErrIgnore)
					case "old":
						return nil, ErrReplay
					}
					return nil, nil
				},
			})
		publish(t, pt, "dup")
		publish(t, pt, "old")
		testkit.Eventually(t, 10*time.Second, sawIgnored.Load, "ignored message validated")
		// Ignored messages are counted, by reason, on the receiver's metric.
		testkit.Eventually(t, 10*time.Second, func() bool {
			return dropCount(sub, SurfaceTopic, DropIgnored) == 1 && dropCount(sub, SurfaceTopic, DropReplay) == 1 &&
				st.Dropped(DropIgnored) == 1 && st.Dropped(DropReplay) == 1
		}, "ignored messages counted")

		publish(t, pt, "fresh")
		testkit.Eventually(t, 10*time.Second, func() bool { return got.has("fresh") }, "fresh delivered")
		if got.has("dup") || got.has("old") {
			t.Error("a message ignored by Validate was delivered")
		}
		if n := st.Dropped(DropInvalid); n != 0 {
			t.Errorf("ErrIgnore counted as invalid: Dropped(invalid) = %d", n)
		}
	})

	t.Run("rate", func(t *testing.T) {
		t.Parallel()
		var got inbox
		pub, sub, pt, st := pubsubPair(t, "rate",
			TopicConfig{},
			TopicConfig{RatePerOrigin: 1, Burst: 2, Deliver: got.deliver})
		publish(t, pt, "m0")
		testkit.Eventually(t, 10*time.Second, func() bool { return got.has("m0") }, "first message delivered")
		// A little over the limit is ignored; a flood is rejected and
		// costs the publisher its score.
		const burst = 8
		for i := 1; i <= burst; i++ {
			publish(t, pt, fmt.Sprintf("m%d", i))
		}
		testkit.Eventually(t, 10*time.Second, func() bool {
			return st.Dropped(DropRate) >= 3 && sub.PeerScore(pub.ID()) < 0
		}, "the flood to cost the publisher")

		// One token may come back if the burst took more than a second.
		if n := len(got.all()); n > 3 {
			t.Errorf("%d of a burst of %d delivered at 1/s (burst 2): %v", n, burst+1, got.all())
		}
		if n := st.Dropped(DropInvalid); n != 0 {
			t.Errorf("rate drops counted as invalid: %d", n)
		}
	})

	// A peer that signs each message with a fresh key gets no fresh
	// budget: what it forwards is bounded whatever the origins.
	t.Run("rate per peer", func(t *testing.T) {
		t.Parallel()
		var got inbox
		pub, sub, pt, st := pubsubPair(t, "rate-peer",
			TopicConfig{},
			TopicConfig{RatePerOrigin: 100, Burst: 100, RatePerPeer: 1, PeerBurst: 2, Deliver: got.deliver})
		const n = 12
		for i := range n {
			priv, _, err := crypto.GenerateEd25519Key(nil)
			if err != nil {
				t.Fatal(err)
			}
			id, _ := peer.IDFromPrivateKey(priv)
			if err := pt.t.Publish(t.Context(), []byte(fmt.Sprintf("m%d", i)), pubsub.WithSecretKeyAndPeerId(priv, id)); err != nil {
				t.Fatal(err)
			}
		}
		testkit.Eventually(t, 10*time.Second, func() bool {
			return st.Dropped(DropRate) >= 3 && sub.PeerScore(pub.ID()) < 0
		}, "the flood under fresh keys to cost the forwarder")

		if d := got.all(); len(d) > 3 {
			t.Errorf("%d of %d messages under fresh keys delivered at 1/s from one peer (burst 2): %v", len(d), n, d)
		}
	})
}

// testValidator accepts values starting with "ok" and prefers the
// lexicographically largest.
type testValidator struct{}

func (testValidator) Validate(key string, value []byte) error {
	if !bytes.HasPrefix(value, []byte("ok")) {
		return fmt.Errorf("value %q does not start with ok", value)
	}
	return nil
}

func (testValidator) Select(key string, values [][]byte) (int, error) {
	if len(values) == 0 {
		return 0, errors.New("no values")
	}
	best := 0
	for i, v := range values {
		if bytes.Compare(v, values[best]) > 0 {
			best = i
		}
	}
	return best, nil
}

var _ record.Validator = testValidator{}

func TestPutGetValue(t *testing.T) {
	t.Parallel()
	validators := map[string]record.Validator{"t": testValidator{}}
	a := startHost(t, Config{DHTServer: true, Validators: validators})
	b := startHost(t, Config{Validators: validators})
	c := startHost(t, Config{Validators: validators})
	connect(t, b, a)
	connect(t, c, a)
	for _, h := range []*Host{b, c} {
		testkit.Eventually(t, 10*time.Second, func() bool {
			return h.dht.RoutingTable().Find(a.ID()) != ""
		}, "A in the client's routing table")

	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	if err := b.PutValue(ctx, "/t/k", []byte("ok1")); err != nil {
		t.Fatalf("PutValue: %v", err)
	}
	for name, h := range map[string]*Host{"A (server)": a, "B (writer)": b, "C (other client)": c} {
		v, err := h.GetValue(ctx, "/t/k")
		if err != nil || string(v) != "ok1" {
			t.Errorf("%s GetValue = %q, %v; want ok1", name, v, err)
		}
	}

	// Select keeps the largest: a newer, larger value replaces the record.
	if err := b.PutValue(ctx, "/t/k", []byte("ok2")); err != nil {
		t.Fatalf("PutValue ok2: %v", err)
	}
	if v, err := c.GetValue(ctx, "/t/k"); err != nil || string(v) != "ok2" {
		t.Errorf("C GetValue after ok2 = %q, %v; want ok2", v, err)
	}

	if err := b.PutValue(ctx, "/t/k2", []byte("bad")); err == nil {
		t.Error("PutValue of a value the validator refuses succeeded")
	}
	if n := dropCount(b, SurfaceDHT, DropInvalid); n != 1 {
		t.Errorf("refused records counted %d, want 1", n)
	}
	if v, err := a.GetValue(ctx, "/t/k2"); err == nil {
		t.Errorf("refused value is retrievable: %q", v)
	}
	if err := b.PutValue(ctx, "/x/k", []byte("ok1")); err == nil {
		t.Error("PutValue in an unknown namespace succeeded")
	}
	if v, err := c.GetValue(ctx, "/x/k"); err == nil {
		t.Errorf("GetValue in an unknown namespace returned %q", v)
	}
}

func TestDHTMode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cfg  Config
		want dht.ModeOpt
	}{
		{Config{}, dht.ModeAuto},
		{Config{Reachability: ReachPublic}, dht.ModeServer},
		{Config{Reachability: ReachPrivate}, dht.ModeClient},
		{Config{Reachability: ReachPrivate, DHTServer: true}, dht.ModeServer},
		{Config{DHTServer: true}, dht.ModeServer},
	}
	for _, c := range cases {
		if got := c.cfg.dhtMode(); got != c.want {
			t.Errorf("reachability %q, DHTServer %v: mode %v, want %v", c.cfg.Reachability, c.cfg.DHTServer, got, c.want)
		}
	}
	// What peers see: a public node serves the DHT; one that lets AutoNAT
	// decide, on loopback, stays a client.
	public := startHost(t, Config{Reachability: ReachPublic})
	auto := startHost(t, Config{})
	connect(t, auto, public)
	testkit.Eventually(t, 10*time.Second, func() bool { return auto.DHTServers() == 1 }, "the public node in the routing table")
	if public.DHTServers() != 0 || slices.Contains(auto.Libp2p().Mux().Protocols(), kadProto) {
		t.Fatal("a node on loopback without reachability serves the DHT")
	}
}

// TestPutValueAlone: without another DHT server a record is still stored
// here, and the caller learns that only this node holds it.
func TestPutValueAlone(t *testing.T) {
	t.Parallel()
	h := startHost(t, Config{DHTServer: true, Validators: map[string]record.Validator{"t": testValidator{}}})
	if err := h.PutValue(t.Context(), "/t/k", []byte("ok1")); !errors.Is(err, ErrNoPeer) {
		t.Fatalf("PutValue alone: %v, want ErrNoPeer", err)
	}
	if v, err := h.LocalValue(t.Context(), "/t/k"); err != nil || string(v) != "ok1" {
		t.Fatalf("LocalValue = %q, %v", v, err)
	}
	if h.DHTServers() != 0 {
		t.Fatalf("DHTServers = %d alone", h.DHTServers())
	}
}

func TestCloseAndNew(t *testing.T) {
	t.Parallel()

	t.Run("close twice", func(t *testing.T) {
		h := startHost(t, Config{})
		if err := h.Close(); err != nil {
			t.Errorf("first Close: %v", err)
		}
		if err := h.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})

	t.Run("close with topics", func(t *testing.T) {
		h := startHost(t, Config{})
		if _, err := h.Join("x", TopicConfig{Deliver: func(Message) {}}); err != nil {
			t.Fatalf("Join: %v", err)
		}
		done := make(chan error, 1)
		go func() { done <- h.Close() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Close with a joined topic did not return")
		}
	})

	t.Run("close never started", func(t *testing.T) {
		h, err := New(Config{Key: identity.GenerateKey(), Listen: loopback})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if _, err := h.Join("x", TopicConfig{}); !errors.Is(err, ErrNotStarted) {
			t.Errorf("Join before Start = %v, want ErrNotStarted", err)
		}
	})

	for _, listen := range []string{"/ip4/999.1.1.1/tcp/0", "/nonsense"} {
		t.Run("failed start "+listen, func(t *testing.T) {
			h, err := New(Config{Key: identity.GenerateKey(), Listen: []string{listen}})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if err := h.Start(t.Context()); err == nil {
				h.Close()
				t.Fatalf("Start with listen address %q succeeded", listen)
			}
			h.Close()
			h.Close()
		})
	}

	t.Run("bad config", func(t *testing.T) {
		for name, key := range map[string]ed25519.PrivateKey{
			"nil":      nil,
			"32 bytes": identity.GenerateKey()[:32],
			"65 bytes": append(identity.GenerateKey(), 0),
		} {
			if _, err := New(Config{Key: key}); err == nil {
				t.Errorf("New accepted a %s key", name)
			}
		}
		if _, err := New(Config{Key: identity.GenerateKey(), Validators: map[string]record.Validator{"t": nil}}); err == nil {
			t.Error("New accepted a nil validator")
		}
		if _, err := New(Config{Key: identity.GenerateKey(), Validators: map[string]record.Validator{"": testValidator{}}}); err == nil {
			t.Error("New accepted an empty namespace")
		}
		if _, err := New(Config{Key: identity.GenerateKey(), GossipQueueBytes: MinGossipQueueBytes - 1}); err == nil {
			t.Error("New accepted a gossip queue that cannot hold a message of the largest size")
		}
	})
}

// TestStreamBudgets: past its request budget on a protocol a peer's
// streams are reset unread (other protocols unaffected); an answer past
// its answer budget waits for it, and one larger than the budget ever
// holds is reset.
func TestStreamBudgets(t *testing.T) {
	t.Parallel()
	a := startHost(t, Config{})
	b, err := New(Config{Key: identity.GenerateKey(), Listen: loopback})
	if err != nil {
		t.Fatal(err)
	}
	b.streams = &streamLimits{
		requests: ratelimit.NewKeyed[protoPeer](0.001, 3, 10),
		answers:  ratelimit.NewKeyed[peer.ID](1000, 2000, 10),
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	connect(t, a, b)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	var calls atomic.Int32
	answer := func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) {
		calls.Add(1)
		n, _ := strconv.Atoi(string(req))
		return bytes.Repeat([]byte("z"), n), nil
	}
	b.HandleRequests("/mesh/test/rate/1.0.0", 64, answer)
	b.HandleRequests("/mesh/test/bytes/1.0.0", 64, answer)
	for i := range 3 {
		if _, err := a.Request(ctx, b.ID(), "/mesh/test/rate/1.0.0", []byte("1"), 64); err != nil {
			t.Fatalf("request %d within the budget: %v", i, err)
		}
	}
	if _, err := a.Request(ctx, b.ID(), "/mesh/test/rate/1.0.0", []byte("1"), 64); err == nil || calls.Load() != 3 {
		t.Fatalf("a request past the budget: %v, handler called %d times", err, calls.Load())
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return dropCount(b, SurfaceStream, DropRate) == 1 }, "the request past the budget counted")

	if _, err := a.Request(ctx, b.ID(), "/mesh/test/bytes/1.0.0", []byte("1500"), 4000); err != nil {
		t.Fatalf("an answer within the budget: %v", err)
	}
	// The next answer waits for its budget (1,000 bytes a second): a
	// request given less time than that fails, one given the time is
	// answered.
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = a.Request(short, b.ID(), "/mesh/test/bytes/1.0.0", []byte("1500"), 4000)
	stop()
	if err == nil {
		t.Error("an answer past the budget came before the budget allowed it")
	}
	if _, err := a.Request(ctx, b.ID(), "/mesh/test/bytes/1.0.0", []byte("1500"), 4000); err != nil {
		t.Fatalf("an answer that waits for its budget: %v", err)
	}
	if _, err := a.Request(ctx, b.ID(), "/mesh/test/bytes/1.0.0", []byte("3000"), 4000); err == nil {
		t.Error("an answer larger than the budget ever holds was sent")
	}
}
