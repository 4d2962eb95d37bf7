package node

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
)

// entries makes committed entries of seqs from..to, each with an op of
// about size bytes.
func entries(from, to uint64, size int) []cmdlog.Entry {
	var es []cmdlog.Entry
	for s := from; s <= to; s++ {
		op, _ := json.Marshal(map[string]string{"pad": strings.Repeat("x", size)})
		es = append(es, cmdlog.Entry{Seq: s, At: int64(s), Kind: registryapi.Kind, Op: op})
	}
	return es
}

func encodeEntries(t *testing.T, es []cmdlog.Entry) (raws [][]byte, seqs []uint64) {
	t.Helper()
	for _, e := range es {
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		raws, seqs = append(raws, raw), append(seqs, e.Seq)
	}
	return raws, seqs
}

// TestGossipBatches: entries are packed into messages of consecutive
// seqs, at most maxGossipEntries and maxCommandSize bytes each, which
// decode to the same entries; an entry too large alone stands apart.
func TestGossipBatches(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		es    []cmdlog.Entry
		sizes []int // entries of each message
	}{
		{"one", entries(1, 1, 10), []int{1}},
		{"a gap splits", append(entries(1, 5, 10), entries(7, 8, 10)...), []int{5, 2}},
		{"the count splits", entries(1, maxGossipEntries+5, 1), []int{maxGossipEntries, 5}},
		{"the bytes split", entries(1, 5, 100<<10), []int{2, 2, 1}},
		{"too large alone", append(append(entries(1, 1, 10), entries(2, 2, 300<<10)...), entries(3, 3, 10)...), []int{1, 1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raws, seqs := encodeEntries(t, c.es)
			var sizes []int
			next := 0
			for _, b := range batches(raws, seqs) {
				sizes = append(sizes, b.entries)
				if b.seq != c.es[next].Seq {
					t.Errorf("a message's first seq %d, want %d", b.seq, c.es[next].Seq)
				}
				want := c.es[next : next+b.entries]
				next += b.entries
				if len(b.data) > maxCommandSize {
					if b.entries != 1 {
						t.Errorf("a message of %d entries has %d bytes", b.entries, len(b.data))
					}
					continue
				}
				got, err := decodeBatch(b.data)
				if err != nil {
					t.Fatalf("a message does not decode: %v", err)
				}
				for i := range got {
					if got[i].Seq != want[i].Seq || string(got[i].Op) != string(want[i].Op) {
						t.Errorf("entry %d decodes as seq %d, want %d", i, got[i].Seq, want[i].Seq)
					}
				}
			}
			if !slices.Equal(sizes, c.sizes) {
				t.Errorf("messages of %v entries, want %v", sizes, c.sizes)
			}
		})
	}
	for _, bad := range []string{`{"entries":[]}`, `{"entries":[{"seq":1,"kind":"agents"},{"seq":3,"kind":"agents"}]}`,
		`{"entries":[{"seq":2,"kind":"agents"},{"seq":1,"kind":"agents"}]}`, `{"entries":[{"seq":1}]}`, `{"seq":1,"kind":"agents"}`} {
		if _, err := decodeBatch([]byte(bad)); err == nil {
			t.Errorf("decodeBatch(%s) took it", bad)
		}
	}
}

// tap is a bare libp2p peer listening to directory topics, as a node of
// some release would.
type tap struct {
	id peer.ID
	mu sync.Mutex
	// got holds the messages of each topic, in arrival order.
	got map[string][][]byte
}

// bareHost is a libp2p host of the mesh's own, no node, connected to n.
func bareHost(t *testing.T, n *Node) *p2p.Host {
	t.Helper()
	h, err := p2p.New(p2p.Config{Key: identity.GenerateKey(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	infos, _ := p2p.ParseAddrs(n.P2PAddrs())
	if err := h.Connect(context.Background(), infos[0]); err != nil {
		t.Fatal(err)
	}
	return h
}

func newTap(t *testing.T, to *Node, topics ...string) *tap {
	t.Helper()
	h := bareHost(t, to)
	tp := &tap{id: h.ID(), got: map[string][][]byte{}}
	for _, name := range topics {
		if _, err := h.Join(name, p2p.TopicConfig{Deliver: func(m p2p.Message) {
			tp.mu.Lock()
			tp.got[name] = append(tp.got[name], m.Data)
			tp.mu.Unlock()
		}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range topics {
		testkit.Eventually(t, 10*time.Second, func() bool { return slices.Contains(to.host.TopicPeers(name), tp.id) },
			"the directory never saw the tap on %s", name)
	}
	return tp
}

// messages waits for count messages of topic and returns them.
func (tp *tap) messages(t *testing.T, topic string, count int) [][]byte {
	t.Helper()
	var got [][]byte
	testkit.Eventually(t, 10*time.Second, func() bool {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		got = slices.Clone(tp.got[topic])
		return len(got) >= count
	}, "the tap got %d messages on %s, want %d", len(got), topic, count)
	return got
}

// TestDirectoryGossip: the directory publishes what commits together in
// one message of mesh/directory/2; while a peer listens only to
// mesh/directory/1 (a node of an earlier release), it publishes there
// too, one entry a message, and not otherwise, and its log names that
// peer.
func TestDirectoryGossip(t *testing.T) {
	t.Parallel()
	var log testkit.Buffer
	m := newMeshWith(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
	gossiped := func(topic, unit string) float64 {
		return metric(t, m.boot, fmt.Sprintf(`mesh_directory_gossip_total{topic=%q,unit=%q}`, topic, unit))
	}
	newer := newTap(t, m.boot, directoryTopic, legacyDirectoryTopic)
	ctx := context.Background()
	m.boot.publisher.gossip(ctx, entries(1001, 1020, 10))
	got := newer.messages(t, directoryTopic, 1)
	es, err := decodeBatch(got[0])
	if err != nil || len(es) != 20 || es[0].Seq != 1001 {
		t.Fatalf("the batch: %d entries from seq %v, %v; want 20 from 1001", len(es), es, err)
	}
	// Published before the batch, had it been.
	if n := gossiped(legacyDirectoryTopic, "messages"); n != 0 {
		t.Fatalf("%v messages published one entry each with no older node listening", n)
	}

	older := newTap(t, m.boot, legacyDirectoryTopic)
	m.boot.publisher.gossip(ctx, entries(1021, 1040, 10))
	var seqs []uint64
	for _, raw := range older.messages(t, legacyDirectoryTopic, 20) {
		es, err := decodeEntry(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		seqs = append(seqs, es[0].Seq)
	}
	slices.Sort(seqs)
	if seqs[0] != 1021 || seqs[19] != 1040 || len(slices.Compact(seqs)) != 20 {
		t.Fatalf("the older node got seqs %v, want 1021..1040", seqs)
	}
	newer.messages(t, directoryTopic, 2)
	if !strings.Contains(log.String(), "peer="+older.id.String()) {
		t.Errorf("the log does not name the peer that reads %s alone:\n%s", legacyDirectoryTopic, log.String())
	}
	for series, want := range map[[2]string]float64{
		{directoryTopic, "messages"}: 2, {directoryTopic, "entries"}: 40,
		{legacyDirectoryTopic, "messages"}: 20, {legacyDirectoryTopic, "entries"}: 20,
	} {
		if n := gossiped(series[0], series[1]); n != want {
			t.Errorf("mesh_directory_gossip_total %v: %v, want %v", series, n, want)
		}
	}
}

// TestReplicaTakesGossip: a node whose directory no longer serves its
// change feed gets the directory's writes by gossip alone. (One at a
// time: gossipsub checks signatures on several workers, so messages
// may overtake each other, and a node fetches what it missed from the
// feed.)
func TestReplicaTakesGossip(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	n := m.join()
	m.boot.host.Libp2p().RemoveStreamHandler(protocol.ID(changesProto))
	for i := range 5 {
		id := fmt.Sprintf("gossiped-%d", i)
		m.register(m.boot, id, identity.GenerateKey())
		testkit.Eventually(t, 10*time.Second, func() bool { return n.clog.Seq() == m.boot.clog.Seq() },
			"%s never reached the node: it is at seq %d, the directory at %d", id, n.clog.Seq(), m.boot.clog.Seq())
	}
}
