package registryapi

import (
	"crypto/sha256"
	"encoding/base64"
	"time"
	"unicode/utf8"
)

// Liveness is what the directory's probes of an agent's endpoint (a GET of
// its card, node/cardprobe.go) found, beyond its heartbeats: an agent may
// heartbeat while its endpoint is dead. The directory records it in
// Presence with the agent's beat, so it reaches the other nodes as beats
// do, and is dropped with them when the agent is deleted.
type Liveness struct {
	// Checked is the last probe; Reachable the last that read a card;
	// Failed the last that did not, and Reason why. Unix seconds, with
	// short names: the record travels in every copy of presence.
	Checked   int64  `json:"c"`
	Reachable int64  `json:"ok,omitempty"`
	Failed    int64  `json:"f,omitempty"`
	Reason    string `json:"r,omitempty"`
	// FailingSince is the first failure of the failures since the last
	// success; 0 while the last probe succeeded.
	FailingSince int64 `json:"fs,omitempty"`
	// Endpoint tags the endpoint probed (endpointTag): the record counts
	// only while the agent keeps that endpoint, so that an agent cannot
	// show a former endpoint's reachability for a new one.
	Endpoint string `json:"e,omitempty"`
}

// endpointTag is a short digest of an endpoint, for Liveness.Endpoint.
func endpointTag(endpoint string) string {
	sum := sha256.Sum256([]byte(endpoint))
	return base64.RawURLEncoding.EncodeToString(sum[:6])
}

// maxReasonLen bounds a failure's reason (it travels to every node).
const maxReasonLen = 200

// IsReachable reports whether the last probe read a card.
func (l *Liveness) IsReachable() bool { return l.FailingSince == 0 && l.Reachable != 0 }

// CheckedAt is the time of the last probe.
func (l *Liveness) CheckedAt() time.Time { return time.Unix(l.Checked, 0).UTC() }

// after returns l updated with a probe at at that failed with failure
// (nil: it read a card).
func (l Liveness) after(at time.Time, failure error) Liveness {
	l.Checked = at.Unix()
	if failure == nil {
		l.Reachable, l.FailingSince = l.Checked, 0
		return l
	}
	if l.FailingSince == 0 {
		l.FailingSince = l.Checked
	}
	l.Failed, l.Reason = l.Checked, truncate(failure.Error(), maxReasonLen)
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

// probe records a probe of endpoint of registration reg of agent id.
func (p *Presence) probe(id string, reg uint64, endpoint string, at time.Time, failure error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.beats.lookup(id)
	if !ok || b.Reg != reg {
		b = Beat{ID: id, Reg: reg}
	}
	l := Liveness{Endpoint: endpointTag(endpoint)}
	if b.Live != nil && b.Live.Endpoint == l.Endpoint {
		l = *b.Live
	}
	l = l.after(at.UTC(), failure)
	b.Live = &l
	p.putLocked(b)
}

// RecordProbe records, on the directory node, a probe at at of endpoint,
// the endpoint of registration reg of agent id (failure nil when it read
// a card), unless that registration is gone, or has another endpoint,
// since the probe began.
func (d *Directory) RecordProbe(id string, reg uint64, endpoint string, at time.Time, failure error) {
	if a, err := d.Agent(id); err == nil && a.Reg == reg && a.Endpoint == endpoint {
		d.presence.probe(id, reg, endpoint, at, failure)
	}
}

// Liveness returns the probes' record of a's current registration and
// endpoint.
func (d *Directory) Liveness(a *Agent) (Liveness, bool) {
	b, ok := d.presence.get(a.ID)
	if !ok || b.Reg != a.Reg || b.Live == nil || b.Live.Endpoint != endpointTag(a.Endpoint) {
		return Liveness{}, false
	}
	return *b.Live, true
}
