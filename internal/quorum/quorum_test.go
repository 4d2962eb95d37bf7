package quorum

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/storetest"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/store"
)

// kv is a toy machine: {"k","v"} sets k to v; an empty k is refused.
type kv struct{}

type kvOp struct{ K, V string }

var errEmptyKey = errors.New("empty key")

func (kv) Apply(tx *store.Txn, e *cmdlog.Entry) (any, error) {
	var op kvOp
	if err := json.Unmarshal(e.Op, &op); err != nil {
		return nil, err
	}
	if op.K == "" {
		return nil, errEmptyKey
	}
	return op.V, tx.Set(store.Key("kv", op.K), []byte(op.V))
}
func (kv) Committed(*cmdlog.Entry, any) {}
func (kv) State() [][]byte              { return [][]byte{[]byte("kv/")} }
func (kv) Restored()                    {}

func get(t *testing.T, l *cmdlog.Log, k string) string {
	t.Helper()
	var v []byte
	err := l.DB().View(func(tx *store.Txn) error {
		var err error
		v, err = tx.Get(store.Key("kv", k))
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return string(v)
}

func newHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

type member struct {
	h   host.Host
	log *cmdlog.Log
	q   *Quorum
}

// newQuorum starts n members on loopback that know each other.
func newQuorum(t *testing.T, n int) []*member {
	t.Helper()
	ms, voters := newMembers(t, n)
	for _, m := range ms {
		m.q = start(t, m, voters, nil)
	}
	return ms
}

// newMembers makes n hosts and logs that know each other, not started.
func newMembers(t *testing.T, n int) ([]*member, []peer.ID) {
	t.Helper()
	ms := make([]*member, n)
	var voters []peer.ID
	for i := range ms {
		ms[i] = &member{h: newHost(t), log: storetest.Log(t)}
		ms[i].log.Handle("kv", kv{})
		voters = append(voters, ms[i].h.ID())
	}
	for _, a := range ms {
		for _, b := range ms {
			if a != b {
				a.h.Peerstore().AddAddrs(b.h.ID(), b.h.Addrs(), peerstore.PermanentAddrTTL)
			}
		}
	}
	return ms, voters
}

func start(t *testing.T, m *member, voters []peer.ID, tweak func(*Config)) *Quorum {
	t.Helper()
	// Raft's own timings: with 300 ms timeouts (a 250 ms lease), a leader
	// under -race on a loaded machine lost its lead in the middle of
	// TestConcurrentProposalsApplyInOrderOnceEverywhere.
	cfg := DefaultConfig()
	cfg.Host, cfg.Log, cfg.InMemory, cfg.Voters = m.h, m.log, true, voters
	if tweak != nil {
		tweak(&cfg)
	}
	q, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func leader(t *testing.T, ms []*member) *member {
	t.Helper()
	i := -1
	testkit.Eventually(t, 10*time.Second, func() bool {
		i = slices.IndexFunc(ms, func(m *member) bool { return m.q != nil && m.q.IsLeader() })
		return i >= 0
	}, "no leader elected")
	return ms[i]
}

func TestProposeReplicatesAndRefusesAlike(t *testing.T) {
	ms := newQuorum(t, 3)
	l := leader(t, ms)
	ctx := context.Background()
	for i := range 5 {
		res, err := l.q.Propose(ctx, "kv", int64(i), kvOp{fmt.Sprint("k", i), fmt.Sprint(i)})
		if err != nil || res != fmt.Sprint(i) {
			t.Fatalf("propose %d: %v %v", i, res, err)
		}
	}
	// A refused operation is refused on every member and takes no seq.
	if _, err := l.q.Propose(ctx, "kv", 9, kvOp{"", "x"}); !errors.Is(err, errEmptyKey) {
		t.Fatalf("refused op: %v", err)
	}
	if _, err := l.q.Propose(ctx, "kv", 10, kvOp{"last", "y"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		testkit.Eventually(t, 10*time.Second, func() bool { return m.log.Seq() == 6 }, "every member applied the entries")
		if get(t, m.log, "k3") != "3" || get(t, m.log, "last") != "y" {
			t.Fatalf("member %s misses entries", m.h.ID())
		}
		raw, _ := m.log.Changes(0, 10, 1<<20)
		var e cmdlog.Entry
		json.Unmarshal(raw[5], &e)
		if e.Seq != 6 || e.At != 10 {
			t.Fatalf("entry 6 on %s: %+v", m.h.ID(), e)
		}
	}
	// A follower does not order writes; it names the leader.
	l = leader(t, ms)
	for _, m := range ms {
		if m == l {
			continue
		}
		var nl *NotLeaderError
		if _, err := m.q.Propose(ctx, "kv", 1, kvOp{"f", "1"}); !errors.As(err, &nl) || (nl.Leader != l.h.ID() && nl.Leader != "") {
			t.Fatalf("propose on a follower: %v", err)
		}
	}
	l = leader(t, ms) // the same one, unless the machine was too slow for a heartbeat
	st := l.q.Status()
	if st.State != "Leader" || st.Leader != l.h.ID() || len(st.Members) != 3 || st.CommitIndex < 7 {
		t.Fatalf("status: %+v", st)
	}
}

func TestLeaderLossElectsAnother(t *testing.T) {
	ms := newQuorum(t, 3)
	l := leader(t, ms)
	if _, err := l.q.Propose(context.Background(), "kv", 1, kvOp{"a", "1"}); err != nil {
		t.Fatal(err)
	}
	l.q.Close()
	l.h.Close()
	var rest []*member
	for _, m := range ms {
		if m != l {
			rest = append(rest, m)
		}
	}
	nl := leader(t, rest)
	if _, err := nl.q.Propose(context.Background(), "kv", 2, kvOp{"b", "2"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range rest {
		testkit.Eventually(t, 10*time.Second, func() bool { return get(t, m.log, "a") == "1" && get(t, m.log, "b") == "2" }, "both applied")
	}
}

func TestRestartSkipsWhatWasApplied(t *testing.T) {
	// One member: its Raft log holds every entry, and its state has them
	// all; after a restart, Raft applies the log again, and the member
	// must not append those entries twice.
	dir := t.TempDir()
	h := newHost(t)
	db, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, _ := cmdlog.Open(db)
	l.Handle("kv", kv{})
	run := func() *Quorum {
		cfg := DefaultConfig()
		cfg.Host, cfg.Log, cfg.Dir, cfg.Voters = h, l, dir, []peer.ID{h.ID()}
		q, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Start(); err != nil {
			t.Fatal(err)
		}
		return q
	}
	q := run()
	testkit.Eventually(t, 10*time.Second, q.IsLeader, "a leader")
	for i := range 3 {
		if _, err := q.Propose(context.Background(), "kv", 1, kvOp{fmt.Sprint(i), "v"}); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	q = run()
	defer q.Close()
	testkit.Eventually(t, 10*time.Second, q.IsLeader, "a leader again")
	if _, err := q.Propose(context.Background(), "kv", 1, kvOp{"after", "v"}); err != nil {
		t.Fatal(err)
	}
	if l.Seq() != 4 {
		t.Fatalf("seq after restart: %d, want 4", l.Seq())
	}
}

func TestStrangersAreRefused(t *testing.T) {
	ms := newQuorum(t, 3)
	leader(t, ms)
	stranger := newHost(t)
	stranger.Peerstore().AddAddrs(ms[0].h.ID(), ms[0].h.Addrs(), peerstore.PermanentAddrTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := stranger.NewStream(ctx, ms[0].h.ID(), protocol.ID(RaftProtocol))
	if err != nil {
		t.Fatal(err)
	}
	// A vote request for a huge term: it must never reach Raft.
	tr := &transport{}
	if err := tr.send(s, rpcRequestVote, map[string]any{"Term": uint64(1 << 40)}); err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := s.Read(make([]byte, 1)); err == nil {
		t.Fatal("a stranger's RPC was answered")
	}
	if st := ms[0].q.Status(); st.Term >= 1<<40 {
		t.Fatalf("a stranger moved the term: %d", st.Term)
	}
}

func TestMigrationNeedsAQuorumOfOne(t *testing.T) {
	h, other := newHost(t), newHost(t)
	l := storetest.Log(t)
	l.Handle("kv", kv{})
	if _, err := cmdlog.NewLocal(l).Propose(context.Background(), "kv", 1, kvOp{"a", "1"}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Host, cfg.Log, cfg.InMemory, cfg.Voters = h, l, true, []peer.ID{h.ID(), other.ID()}
	q, _ := New(cfg)
	if err := q.Start(); !errors.Is(err, ErrMigrate) {
		t.Fatalf("a directory joined a new quorum of two: %v", err)
	}
}

func TestLateMemberInstallsASnapshot(t *testing.T) {
	ms, voters := newMembers(t, 3)
	small := func(c *Config) { c.TrailingLogs, c.SnapshotThreshold = 5, 1<<20 }
	ms[0].q, ms[1].q = start(t, ms[0], voters, small), start(t, ms[1], voters, small)
	l := leader(t, ms[:2])
	ctx := context.Background()
	for i := range 60 {
		if _, err := l.q.Propose(ctx, "kv", int64(i), kvOp{fmt.Sprint("k", i), fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range ms[:2] {
		testkit.Eventually(t, 10*time.Second, func() bool { return m.log.Seq() == 60 }, "the two members applied everything")
		if err := m.q.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	ms[2].q = start(t, ms[2], voters, small)
	testkit.Eventually(t, 10*time.Second, func() bool { return ms[2].log.Seq() == 60 }, "the late member caught up")
	if ms[2].log.First() != 61 {
		t.Fatalf("the late member replayed the log instead of installing a snapshot: first %d", ms[2].log.First())
	}
	if get(t, ms[2].log, "k0") != "0" || get(t, ms[2].log, "k59") != "59" {
		t.Fatal("the installed state misses entries")
	}
	if _, err := l.q.Propose(ctx, "kv", 99, kvOp{"after", "x"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return get(t, ms[2].log, "after") == "x" }, "the late member follows the log")
}

func TestDirectoryMovedIntoAQuorum(t *testing.T) {
	ms, _ := newMembers(t, 2)
	// A lone directory's log, before any quorum.
	for i := range 10 {
		if _, err := cmdlog.NewLocal(ms[0].log).Propose(context.Background(), "kv", 1, kvOp{fmt.Sprint("pre", i), "v"}); err != nil {
			t.Fatal(err)
		}
	}
	ms[0].q = start(t, ms[0], []peer.ID{ms[0].h.ID()}, nil)
	testkit.Eventually(t, 10*time.Second, ms[0].q.IsLeader, "the quorum of one leads")
	// A member started to join it, then added.
	ms[1].q = start(t, ms[1], nil, func(c *Config) { c.Known = []peer.ID{ms[0].h.ID()} })
	if err := ms[0].q.AddVoter(context.Background(), ms[1].h.ID()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return ms[1].log.Seq() == 10 }, "the new member installed the moved directory")
	if get(t, ms[1].log, "pre0") != "v" || get(t, ms[1].log, "pre9") != "v" {
		t.Fatal("the new member misses the directory's state from before the quorum")
	}
	if _, err := ms[0].q.Propose(context.Background(), "kv", 2, kvOp{"post", "w"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return get(t, ms[1].log, "post") == "w" }, "both apply new entries")
	if len(ms[0].q.Members()) != 2 {
		t.Fatalf("members: %v", ms[0].q.Members())
	}
}

// TestConcurrentProposalsApplyInOrderOnceEverywhere: many proposals at
// once, which Raft commits and the members apply in batches, some of
// them proposed twice as attempts of one write: every member holds the
// same log, each write exactly once, and a repeat returns what the first
// attempt produced.
func TestConcurrentProposalsApplyInOrderOnceEverywhere(t *testing.T) {
	ms := newQuorum(t, 3)
	l := leader(t, ms)
	const writers, each = 16, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("w%d-%d", w, i)
				ctx := context.Background()
				attempts := 1
				if i%5 == 0 { // an attempt of a write, then another
					ctx, attempts = cmdlog.WithWrite(ctx, cmdlog.Write{ID: key}), 2
				}
				for range attempts {
					res, err := l.q.Propose(ctx, "kv", time.Now().UnixNano(), kvOp{key, key})
					if err != nil {
						t.Errorf("propose %s: %v", key, err)
						return
					}
					if res != key && string(res.(json.RawMessage)) != `"`+key+`"` {
						t.Errorf("result of %s: %v", key, res)
					}
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	want := writers * each
	var logs [][]string
	for _, m := range ms {
		testkit.Eventually(t, 10*time.Second, func() bool { return m.log.Seq() >= uint64(want) }, "a member applied %d of %d", m.log.Seq(), want)
		raw, err := m.log.Changes(0, 2*want, 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		seen := map[string]bool{}
		for i, r := range raw {
			var e cmdlog.Entry
			var op kvOp
			if json.Unmarshal(r, &e) != nil || json.Unmarshal(e.Op, &op) != nil || e.Seq != uint64(i+1) {
				t.Fatalf("entry %d on %s: %s", i, m.h.ID(), r)
			}
			if seen[op.K] {
				t.Fatalf("%s applied twice on %s", op.K, m.h.ID())
			}
			seen[op.K] = true
			keys = append(keys, op.K)
		}
		if len(keys) != want {
			t.Fatalf("%s holds %d entries, want %d", m.h.ID(), len(keys), want)
		}
		logs = append(logs, keys)
	}
	for i := range logs[1:] {
		if !slices.Equal(logs[0], logs[i+1]) {
			t.Fatalf("members hold the writes in different orders")
		}
	}
}

// TestFollowersLearnCommitsAtOnce: a follower applies an entry as soon as
// the leader committed it, not at Raft's next AppendEntries (more entries,
// or CommitTimeout: an hour here): the leader sends it a commit notice.
func TestFollowersLearnCommitsAtOnce(t *testing.T) {
	ms, voters := newMembers(t, 3)
	for _, m := range ms {
		m.q = start(t, m, voters, func(c *Config) { c.CommitTimeout = time.Hour })
	}
	for i := range 3 {
		var l *member
		var err error
		testkit.Eventually(t, 10*time.Second, func() bool { // on the leader of now, on a loaded machine
			l = leader(t, ms)
			_, err = l.q.Propose(context.Background(), "kv", int64(i), kvOp{fmt.Sprint("k", i), "v"})
			return !errors.Is(err, ErrNotLeader)
		}, "no leader took the entry")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			testkit.Eventually(t, 20*time.Second, func() bool { return m.log.Seq() == l.log.Seq() },
				"a member is at seq %d, the leader at %d", m.log.Seq(), l.log.Seq())
		}
	}
}

// stuck is kv on a member whose machine stops at its first entry until
// released: its Raft stops taking AppendEntries once its queue to the
// machine is full, as a follower frozen (or cut off) would.
type stuck struct {
	kv
	release chan struct{}
}

func (s stuck) Apply(tx *store.Txn, e *cmdlog.Entry) (any, error) {
	<-s.release
	return s.kv.Apply(tx, e)
}

// TestAStuckFollowerHoldsNoWrite: with one follower that answers nothing
// (and an RPC timeout of an hour, so that its pipeline is never given
// up), the leader and the other follower go on committing and applying,
// one write after another, far past what the stuck follower's pipeline
// holds on its way: the leader's commit notices never wait for it.
func TestAStuckFollowerHoldsNoWrite(t *testing.T) {
	ms, voters := newMembers(t, 3)
	for _, m := range ms {
		m.q = start(t, m, voters, func(c *Config) { c.RPCTimeout = time.Hour })
	}
	l := leader(t, ms)
	if _, err := l.q.Propose(context.Background(), "kv", 0, kvOp{"k", "v"}); err != nil {
		t.Fatal(err)
	}
	var slow *member
	for _, m := range ms {
		if m != l {
			slow = m
			break
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return slow.log.Seq() == 1 }, "the follower did not apply the first entry")
	release := make(chan struct{})
	slow.log.Handle("kv", stuck{release: release})
	t.Cleanup(func() { close(release) }) // before the members close
	// A stuck Raft takes ~130 AppendEntries before it stops reading; a
	// pipeline holds 64 more on their way.
	const writes = 600
	for i := range writes {
		var err error
		testkit.Eventually(t, 30*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err = leader(t, ms).q.Propose(ctx, "kv", int64(i+1), kvOp{fmt.Sprint("k", i), "v"})
			return !errors.Is(err, ErrNotLeader)
		}, "no leader took write %d", i)
		if err != nil {
			t.Fatalf("write %d of %d with a follower stuck: %v", i, writes, err)
		}
	}
}
