package registryapi

import (
	"time"
	"unicode/utf8"
)

// Liveness is what the directory's probes of an agent's endpoint (a GET of
// its card, node/cardprobe.go) found, beyond its heartbeats: an agent may
// heartbeat while its endpoint is dead. The directory records it in
// Presence with the agent's beat, so it reaches the other nodes as beats
// do, and is dropped with them when the agent is deleted.
type Liveness struct {
	// CheckedAt is the last probe; LastReachable the last that read a
	// card; LastFailure the last that did not, and Reason why.
	CheckedAt     time.Time `json:"checked_at"`
	LastReachable time.Time `json:"last_reachable,omitzero"`
	LastFailure   time.Time `json:"last_failure,omitzero"`
	Reason        string    `json:"reason,omitempty"`
	// FailingSince is the first failure of the failures since the last
	// success; zero while the last probe succeeded.
	FailingSince time.Time `json:"failing_since,omitzero"`
}

// maxReasonLen bounds a failure's reason (it travels to every node).
const maxReasonLen = 200

// Reachable reports whether the last probe read a card.
func (l *Liveness) Reachable() bool { return l.FailingSince.IsZero() && !l.LastReachable.IsZero() }

// after returns l updated with a probe at at that failed with reason
// (nil: it read a card).
func (l Liveness) after(at time.Time, failure error) Liveness {
	l.CheckedAt = at
	if failure == nil {
		l.LastReachable, l.FailingSince = at, time.Time{}
		return l
	}
	if l.FailingSince.IsZero() {
		l.FailingSince = at
	}
	l.LastFailure, l.Reason = at, truncate(failure.Error(), maxReasonLen)
	return l
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// probe records a probe of registration reg of agent id.
func (p *Presence) probe(id string, reg uint64, at time.Time, failure error) Liveness {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.beats[id]
	if !ok || b.Reg != reg {
		b = Beat{ID: id, Reg: reg}
	}
	var l Liveness
	if b.Live != nil {
		l = *b.Live
	}
	l = l.after(at.UTC(), failure)
	b.Live = &l
	p.putLocked(b)
	return l
}

// RecordProbe records, on the directory node, a probe at at of the
// endpoint of registration reg of agent id: failure nil when it read a
// card.
func (d *Directory) RecordProbe(id string, reg uint64, at time.Time, failure error) Liveness {
	return d.presence.probe(id, reg, at, failure)
}

// Liveness returns the probes' record of a's current registration.
func (d *Directory) Liveness(a *Agent) (Liveness, bool) {
	b, ok := d.presence.get(a.ID)
	if !ok || b.Reg != a.Reg || b.Live == nil {
		return Liveness{}, false
	}
	return *b.Live, true
}
