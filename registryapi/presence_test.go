package registryapi

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/storetest"
)

// TestHeartbeatsStayOutOfTheLog: heartbeats keep an agent online without
// adding a single entry to the canonical log.
func TestHeartbeatsStayOutOfTheLog(t *testing.T) {
	h := newHarness(t)
	_, tok := h.registerPlain("a1")
	seq := h.seq()
	for range 5 {
		h.clock.Advance(DefaultOnlineWindow - time.Second)
		r := h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(tok)...), 200, "")
		if _, _, ok := ParsePresenceCursor(r.hdr.Get(PresenceHeader)); !ok {
			t.Fatalf("heartbeat answer without a presence cursor: %q", r.hdr.Get(PresenceHeader))
		}
	}
	h.clock.Advance(DefaultOnlineWindow)
	if g := h.do("GET", "/v1/agents/a1", ""); g.body["online"] != true || g.str("last_seen") != h.clock.Now().Add(-DefaultOnlineWindow).Format(time.RFC3339) {
		t.Fatalf("after heartbeats: %s", g.raw)
	}
	if h.seq() != seq {
		t.Fatalf("heartbeats wrote %d log entries", h.seq()-seq)
	}
}

// TestHeartbeatOfAGoneRegistration: a token of a deleted registration, or
// of a former owner, gets 404, and an old beat never makes the new owner
// look alive.
func TestHeartbeatOfAGoneRegistration(t *testing.T) {
	h := newHarness(t)
	_, old := h.registerPlain("a1")
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(old)...), 200, "")
	h.want(h.do("DELETE", "/v1/agents/me", "", bearer(old)...), 200, "")
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(old)...), 404, "agent_not_found")

	h.clock.Advance(time.Hour)
	h.registerPlain("a1") // a new owner, registered now
	h.dir.presence.merge(PresenceChanges{Beats: []Beat{{ID: "a1", Reg: 1, At: h.clock.Now().Add(time.Minute)}}})
	a, _ := h.dir.Agent("a1")
	if got := h.dir.LastSeen(a); !got.Equal(a.LastSeen) {
		t.Fatalf("a beat of the former registration counted: %v", got)
	}
}

// TestPresenceFollower: a follower copies the directory's beats, first
// whole, then only what changed, and whole again when the directory
// restarted (new epoch) or it fell too far behind.
func TestPresenceFollower(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	dir, follower := newPresence(1), newPresence(0)
	sync := func() PresenceChanges {
		c := changesSince(t, dir)(follower.cursor())
		follower.merge(c)
		return c
	}
	for i := range 3 {
		dir.record(Beat{ID: fmt.Sprint("a", i), Reg: 1, At: now})
	}
	if c := sync(); !c.Full || len(c.Beats) != 3 {
		t.Fatalf("first copy: %+v", c)
	}
	dir.record(Beat{ID: "a1", Reg: 1, At: now.Add(time.Minute)})
	dir.record(Beat{ID: "a1", Reg: 1, At: now.Add(2 * time.Minute)})
	if c := sync(); c.Full || len(c.Beats) != 1 || !c.Beats[0].At.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("incremental copy: %+v", c)
	}
	if c := sync(); c.Full || len(c.Beats) != 0 {
		t.Fatalf("nothing new: %+v", c)
	}
	if c := changesSince(t, dir)(0, 0); !c.Full || len(c.Beats) != 3 {
		t.Fatalf("a full copy for a newcomer: %+v", c)
	}
	dir.forget("a2")
	if c := changesSince(t, dir)(0, 0); len(c.Beats) != 2 {
		t.Fatalf("a full copy after a delete still has it: %+v", c)
	}
	restarted := newPresence(2)
	restarted.beats = dir.beats
	dir = restarted
	if c := sync(); !c.Full || len(c.Beats) != 2 {
		t.Fatalf("after a directory restart: %+v", c)
	}
	if _, ok := follower.get("a2"); ok {
		t.Fatal("a full copy kept a beat the directory no longer has")
	}
	for i := range 2*maxRecent + 1 {
		dir.record(Beat{ID: fmt.Sprint("b", i%10), Reg: 1, At: now})
	}
	if c := sync(); !c.Full || len(c.Beats) != 12 {
		t.Fatalf("far behind: full %v, %d beats", c.Full, len(c.Beats))
	}
}

// changesSince decodes what p.since answers.
func changesSince(t *testing.T, p *Presence) func(epoch, ver uint64) PresenceChanges {
	return func(epoch, ver uint64) PresenceChanges {
		t.Helper()
		raw, err := p.since(epoch, ver)
		if err != nil {
			t.Fatal(err)
		}
		var c PresenceChanges
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
}

// TestPresenceFollowerAppliesADelete: a delete, applied from the log on
// the directory and on a follower alike, leaves the follower's cursor
// where the directory's numbering put it, so it misses no later beat.
func TestPresenceFollowerAppliesADelete(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	dir, follower := newPresence(1), newPresence(0)
	since := changesSince(t, dir)
	dir.record(Beat{ID: "a", Reg: 1, At: now})
	follower.merge(since(follower.cursor()))
	dir.record(Beat{ID: "b", Reg: 1, At: now})
	dir.forget("a")
	dir.record(Beat{ID: "c", Reg: 1, At: now})
	follower.forget("a")
	if c := since(follower.cursor()); c.Full || len(c.Beats) != 2 {
		t.Fatalf("after a delete the follower asked for %+v, want b and c", c)
	} else {
		follower.merge(c)
	}
	for _, id := range []string{"b", "c"} {
		if _, ok := follower.get(id); !ok {
			t.Fatalf("the follower lacks %s's beat", id)
		}
	}
	if _, ok := follower.get("a"); ok {
		t.Fatal("the follower kept a deleted agent's beat")
	}
}

// TestPresenceSurvivesDirectoryRestart: flushed beats come back when the
// directory reopens its store.
func TestPresenceSurvivesDirectoryRestart(t *testing.T) {
	db := storetest.DB(t)
	h := newHarnessOn(t, db)
	_, tok := h.registerPlain("a1")
	h.clock.Advance(DefaultOnlineWindow - time.Minute)
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(tok)...), 200, "")
	if err := h.dir.FlushPresence(); err != nil {
		t.Fatal(err)
	}

	log, err := cmdlog.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	reopened, err := NewDirectory(log)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := reopened.Agent("a1")
	if !reopened.Online(a, h.clock.Now().Add(DefaultOnlineWindow-time.Second), DefaultOnlineWindow) {
		t.Fatalf("the heartbeat was lost with the restart: last seen %v", reopened.LastSeen(a))
	}
}
