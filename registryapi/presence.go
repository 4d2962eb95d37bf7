package registryapi

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/mesh/store"
)

// Presence holds each agent's latest heartbeat. It is soft state, kept
// apart from the canonical log on purpose: a heartbeat every 5 minutes from
// every agent would be most of the log (288 entries per agent per day, each
// fsynced, published to every node and replayed by every new replica, for
// ever) for a value only ever read as "the latest". So the directory node
// records heartbeats here, numbered by a version counter, and flushes them
// to its store every few seconds (a restart keeps who was online); other
// nodes copy them with PresenceSince and MergePresence as they follow the
// directory. Reads take the later of the row's registration time and the
// agent's beat, and only a beat of the agent's current registration counts,
// so a stale or reordered beat can never make a deleted or re-registered id
// look alive.
type Presence struct {
	mu sync.Mutex // orders changes; reads of one beat (get) do without it
	// epoch names the directory run that numbered ver: versions of one run
	// mean nothing in another, so a cursor of another epoch gets everything.
	epoch uint64
	ver   uint64
	beats *beatShards
	// recent lists the ids beaten in version order, so that a follower's
	// catch-up costs what changed, not the whole map.
	recent []versioned
	// dirty ids await Flush (a deleted id flushes as a removal).
	dirty map[string]bool
	// gen counts changes of beats. full is the last full copy handed out,
	// encoded, and fullGen the gen it holds: followers that restart
	// together (or a peer asking with a bogus cursor) cost one copy, not
	// one each.
	gen     uint64
	full    []byte
	fullGen uint64
}

// Beat is an agent's latest heartbeat.
type Beat struct {
	ID     string    `json:"agent_id"`
	Reg    uint64    `json:"reg"`
	At     time.Time `json:"at"`
	Status string    `json:"status,omitempty"`
	Ver    uint64    `json:"ver"`
	// Live is what the directory's probes of the agent's endpoint found
	// (liveness.go); it travels with the beats.
	Live *Liveness `json:"live,omitempty"`
}

// PresenceChanges is what a follower receives: the beats changed since its
// cursor, or all of them when Full (the follower then drops what it had).
type PresenceChanges struct {
	Epoch uint64 `json:"epoch"`
	Ver   uint64 `json:"ver"`
	Full  bool   `json:"full,omitempty"`
	Beats []Beat `json:"beats"`
}

// PresenceHeader carries, on a heartbeat's answer, the presence cursor
// "<epoch>.<ver>" that holds the beat.
const PresenceHeader = "X-Mesh-Presence"

// FormatPresenceCursor encodes a cursor for PresenceHeader.
func FormatPresenceCursor(epoch, ver uint64) string {
	return strconv.FormatUint(epoch, 10) + "." + strconv.FormatUint(ver, 10)
}

// ParsePresenceCursor decodes a PresenceHeader value.
func ParsePresenceCursor(s string) (epoch, ver uint64, ok bool) {
	e, v, found := strings.Cut(s, ".")
	epoch, err1 := strconv.ParseUint(e, 10, 64)
	ver, err2 := strconv.ParseUint(v, 10, 64)
	return epoch, ver, found && err1 == nil && err2 == nil
}

type versioned struct {
	ver uint64
	id  string
}

// maxRecent bounds the catch-up index; a follower further behind gets a
// full copy.
const maxRecent = 1 << 16

func presenceKey(id string) []byte { return store.Key("p", id) }

var presencePrefix = []byte("p/")

func newPresence(epoch uint64) *Presence {
	return &Presence{epoch: epoch, beats: newBeatShards(0), dirty: map[string]bool{}}
}

// load reads the beats the directory flushed before a restart.
func (p *Presence) load(db *store.DB) error {
	return db.View(func(tx *store.Txn) error {
		return tx.Scan(presencePrefix, nil, func(_, v []byte) (bool, error) {
			var b Beat
			if err := json.Unmarshal(v, &b); err != nil {
				return false, err
			}
			b.Ver = 0 // versions of another run
			p.beats.put(b)
			return true, nil
		})
	})
}

// record stores a heartbeat of the directory node and returns it numbered.
// The probes' record of the same registration stays.
func (p *Presence) record(b Beat) Beat {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.beats.lookup(b.ID); ok && old.Reg == b.Reg {
		b.Live = old.Live
	}
	return p.putLocked(b)
}

// putLocked stores b under a new version.
func (p *Presence) putLocked(b Beat) Beat {
	p.ver++
	p.gen++
	b.Ver = p.ver
	p.beats.put(b)
	p.dirty[b.ID] = true
	p.recent = append(p.recent, versioned{p.ver, b.ID})
	if len(p.recent) > 2*maxRecent {
		p.recent = append(p.recent[:0], p.recent[len(p.recent)-maxRecent:]...)
	}
	return b
}

// get returns the beat of id, if any.
func (p *Presence) get(id string) (Beat, bool) { return p.beats.get(id) }

// forget drops the beat of a deleted agent. It runs on every node, as
// each applies the delete from the log, so it leaves the cursor alone: on
// a follower ver is the directory's numbering, not its own.
func (p *Presence) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.beats.lookup(id); ok {
		p.beats.remove(id)
		p.dirty[id] = true
		p.gen++
	}
}

// since returns, encoded, the changes after a follower's cursor (epoch,
// ver). A full copy is encoded outside the lock (heartbeats go on) and
// kept until the beats change.
func (p *Presence) since(epoch, ver uint64) ([]byte, error) {
	p.mu.Lock()
	out := PresenceChanges{Epoch: p.epoch, Ver: p.ver, Beats: []Beat{}}
	oldest := p.ver + 1
	if len(p.recent) > 0 {
		oldest = p.recent[0].ver
	}
	if epoch == p.epoch && ver+1 >= oldest && ver <= p.ver {
		for _, r := range p.recent {
			if b, ok := p.beats.lookup(r.id); r.ver > ver && ok && b.Ver == r.ver {
				out.Beats = append(out.Beats, b) // the id's latest beat, once
			}
		}
		p.mu.Unlock()
		return json.Marshal(out)
	}
	if p.full != nil && p.fullGen == p.gen {
		full := p.full
		p.mu.Unlock()
		return full, nil
	}
	out.Full, out.Beats = true, slices.AppendSeq(out.Beats, p.beats.all())
	gen := p.gen
	p.mu.Unlock()
	full, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.gen == gen {
		p.full, p.fullGen = full, gen
	}
	p.mu.Unlock()
	return full, nil
}

// merge applies changes from the directory and moves the cursor.
func (p *Presence) merge(c PresenceChanges) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.Full {
		p.beats.replace(c.Beats)
	} else {
		for _, b := range c.Beats {
			p.beats.put(b)
		}
	}
	p.epoch, p.ver = c.Epoch, c.Ver
	p.gen++
}

// takeOver makes these beats the directory's own, on a member of a quorum
// that became its leader: a new epoch, so that every follower gets a full
// copy (their cursors number the former leader's beats), new beats
// numbered from there, and all of them written at the next flush.
func (p *Presence) takeOver(epoch uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch, p.ver, p.recent = epoch, 0, nil
	for b := range p.beats.all() {
		p.dirty[b.ID] = true
	}
	p.gen++
}

// cursor is how far a follower has merged.
func (p *Presence) cursor() (epoch, ver uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epoch, p.ver
}

// flush writes the changed beats to db, a bounded batch per transaction.
func (p *Presence) flush(db *store.DB) error {
	p.mu.Lock()
	batch := make(map[string]*Beat, len(p.dirty))
	for id := range p.dirty {
		if b, ok := p.beats.lookup(id); ok {
			batch[id] = &b
		} else {
			batch[id] = nil
		}
	}
	clear(p.dirty)
	p.mu.Unlock()
	ids := slices.Collect(maps.Keys(batch))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 1000)]
		err := db.Update(func(tx *store.Txn) error {
			for _, id := range chunk {
				if err := writeBeat(tx, id, batch[id]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil { // the rest waits for the next flush
			p.mu.Lock()
			for _, id := range ids {
				p.dirty[id] = true
			}
			p.mu.Unlock()
			return err
		}
		ids = ids[len(chunk):]
	}
	return nil
}

func writeBeat(tx *store.Txn, id string, b *Beat) error {
	if b == nil {
		return tx.Delete(presenceKey(id))
	}
	return tx.SetJSON(presenceKey(id), b)
}

// Heartbeat records that registration reg of agent id is alive at now (on
// the directory node), or returns ErrAgentNotFound when that registration
// is gone.
func (d *Directory) Heartbeat(id string, reg uint64, now time.Time, status string) (Beat, error) {
	a, err := d.Agent(id)
	if err != nil {
		return Beat{}, err
	}
	if a.Reg != reg {
		return Beat{}, ErrAgentNotFound
	}
	return d.presence.record(Beat{ID: id, Reg: reg, At: now.UTC(), Status: status}), nil
}

// LastSeen is when a was last heard of: its latest heartbeat of this
// registration, or the registration itself.
func (d *Directory) LastSeen(a *Agent) time.Time {
	_, seen := d.presenceOf(a.ID, a.Reg, a.LastSeen, time.Now, 0)
	return seen
}

// presenceOf is Online and LastSeen of agent id, registration reg, whose
// row was last seen at lastSeen, from one read of its beat; now is read
// only for an agent that has beaten (most reads are of agents that have
// not).
func (d *Directory) presenceOf(id string, reg uint64, lastSeen time.Time, now func() time.Time, window time.Duration) (online bool, seen time.Time) {
	b, ok := d.presence.get(id)
	ok = ok && b.Reg == reg
	online = ok && reg != 0 && !b.At.IsZero() && now().Sub(b.At) <= window
	if ok && b.At.After(lastSeen) {
		return online, b.At
	}
	return online, lastSeen
}

// LastBeat is a's latest heartbeat of its current registration; false
// when it sent none (a registration alone is no heartbeat).
func (d *Directory) LastBeat(a *Agent) (time.Time, bool) {
	return d.lastBeat(a.ID, a.Reg)
}

func (d *Directory) lastBeat(id string, reg uint64) (time.Time, bool) {
	b, ok := d.presence.get(id)
	if !ok || reg == 0 || b.Reg != reg || b.At.IsZero() {
		return time.Time{}, false
	}
	return b.At, true
}

// Online reports whether a is registered and heartbeated within window of
// now: registering is not being online (docs/api.md, Online).
func (d *Directory) Online(a *Agent, now time.Time, window time.Duration) bool {
	return d.online(a.ID, a.Reg, now, window)
}

func (d *Directory) online(id string, reg uint64, now time.Time, window time.Duration) bool {
	at, ok := d.lastBeat(id, reg)
	return ok && now.Sub(at) <= window
}

// PresenceSince returns, encoded, the heartbeats a follower at cursor
// (epoch, ver) lacks (PresenceChanges; see Presence).
func (d *Directory) PresenceSince(epoch, ver uint64) ([]byte, error) {
	return d.presence.since(epoch, ver)
}

// MergePresence applies heartbeats copied from the directory node.
func (d *Directory) MergePresence(c PresenceChanges) { d.presence.merge(c) }

// TakeOverPresence makes the heartbeats this node copied its own: it became
// the leader of the directory's quorum, and records beats from now on.
func (d *Directory) TakeOverPresence() { d.presence.takeOver(uint64(time.Now().UnixNano())) }

// PresenceCursor is how far this node has copied the directory's heartbeats.
func (d *Directory) PresenceCursor() (epoch, ver uint64) { return d.presence.cursor() }

// FlushPresence writes the heartbeats recorded since the last flush to the
// store, so that a directory node that restarts still knows who is online.
func (d *Directory) FlushPresence() error { return d.presence.flush(d.db) }

// onlineDoc is Online for an indexed row.
func (d *Directory) onlineDoc(doc *searchDoc, now time.Time, window time.Duration) bool {
	return doc.registered && d.online(doc.id, doc.reg, now, window)
}
