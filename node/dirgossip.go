package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/p2p"
)

// The directory's gossip: what the directory (a quorum's leader) commits
// goes out on directoryTopic in batches, {"entries": [...]}, several
// entries to one message, so that one signature and one message carry
// all the entries that committed meanwhile: gossipsub signs each message
// and every node that gets it checks the signature, the node that
// publishes it included, which, one entry a message, cost a quorum about
// a fifth of its CPU. Nodes of releases before batches listen on
// legacyDirectoryTopic, one entry a message: the directory publishes
// there too while it knows a peer that subscribes to it and not to the
// batches (one of those releases).
const (
	directoryTopic       = "mesh/directory/2"
	legacyDirectoryTopic = "mesh/directory/1"
	// maxGossipEntries bounds the entries of a batch; maxCommandSize, its
	// bytes (an entry larger alone is left to the change feed).
	maxGossipEntries = 1000
)

// dirTopics are the directory's two topics, as joined by a node.
type dirTopics struct {
	batches, legacy *p2p.Topic
}

// Dropped is how many messages of both topics were dropped for reason.
func (t dirTopics) Dropped(reason string) uint64 {
	return t.batches.Dropped(reason) + t.legacy.Dropped(reason)
}

var (
	errNotDirectory = errors.New("directory change from a peer that does not run the directory")
	errBadChange    = errors.New("malformed directory change")
)

// joinDirectory joins the directory's topics. Messages pass when from
// accepts their origin; a replica (rep not nil) also checks their shape,
// ignores what it applied already and is offered the rest.
func (n *Node) joinDirectory(from func(peer.ID) bool, rep *cmdlog.Replica) error {
	join := func(name string, decode decoder) (*p2p.Topic, error) {
		cfg := p2p.TopicConfig{MaxSize: maxCommandSize, Validate: n.validateChanges(from, decode, rep != nil)}
		if rep != nil {
			cfg.Deliver = func(m p2p.Message) { rep.Offer(m.Value.([]cmdlog.Entry)) }
		}
		return n.host.Join(name, cfg)
	}
	var err error
	if n.dirTopics.batches, err = join(directoryTopic, decodeBatch); err != nil {
		return err
	}
	n.dirTopics.legacy, err = join(legacyDirectoryTopic, decodeEntry)
	return err
}

// decoder reads the entries of a message of a directory topic.
type decoder func([]byte) ([]cmdlog.Entry, error)

// validateChanges is the validator of a directory topic: the origin must
// pass from, and, on a replica, the message must decode, its entries
// going to Deliver unless all were applied already (p2p.ErrReplay).
//
// Before a node heard who runs the directory, it trusts its first
// bootstrap peer alone: a message from another origin is dropped without
// blaming the peer that relayed it. It may be the leader's, relayed by
// the follower the node joined through, and gossipsub would score that
// follower down (three such messages graylist it for seconds, ten for
// minutes, and no gossip of any topic comes from it meanwhile). The
// catch-up fetches the entries.
func (n *Node) validateChanges(from func(peer.ID) bool, decode decoder, replica bool) func(peer.ID, []byte) (any, error) {
	return func(origin peer.ID, data []byte) (any, error) {
		switch {
		case !from(origin) && !n.view.heardMembers():
			return nil, fmt.Errorf("%w: a directory change from %s, before this node heard who runs the directory", p2p.ErrIgnore, origin)
		case !from(origin):
			return nil, errNotDirectory
		case !replica:
			return nil, nil
		}
		return n.freshChanges(decode(data))
	}
}

// freshChanges is what a replica makes of a decoded message: the entries,
// or p2p.ErrReplay when it applied them all already.
func (n *Node) freshChanges(es []cmdlog.Entry, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	if es[len(es)-1].Seq <= n.clog.Seq() {
		return nil, p2p.ErrReplay
	}
	return es, nil
}

// decodeEntry reads a message of legacyDirectoryTopic: one entry.
func decodeEntry(data []byte) ([]cmdlog.Entry, error) {
	var e cmdlog.Entry
	if err := json.Unmarshal(data, &e); err != nil || e.Seq == 0 || e.Kind == "" {
		return nil, errBadChange
	}
	return []cmdlog.Entry{e}, nil
}

// decodeBatch reads a message of directoryTopic: 1 to maxGossipEntries
// entries of consecutive seqs, each with its kind.
func decodeBatch(data []byte) ([]cmdlog.Entry, error) {
	var b struct {
		Entries []cmdlog.Entry `json:"entries"`
	}
	if err := json.Unmarshal(data, &b); err != nil || len(b.Entries) == 0 || len(b.Entries) > maxGossipEntries {
		return nil, errBadChange
	}
	for i, e := range b.Entries {
		if e.Seq == 0 || e.Kind == "" || (i > 0 && e.Seq != b.Entries[i-1].Seq+1) {
			return nil, errBadChange
		}
	}
	return b.Entries, nil
}

// gossip publishes es, entries the directory committed in order: in
// batches, and, first, one a message while nodes of earlier releases
// listen.
func (p *publisher) gossip(ctx context.Context, es []cmdlog.Entry) {
	raws := make([][]byte, 0, len(es))
	seqs := make([]uint64, 0, len(es))
	for _, e := range es {
		if raw, err := json.Marshal(e); err == nil {
			raws, seqs = append(raws, raw), append(seqs, e.Seq)
		}
	}
	if p.legacyPeers() {
		for i, raw := range raws {
			p.publishGossip(ctx, p.topics.legacy, batch{data: raw, seq: seqs[i], entries: 1})
		}
	}
	for _, b := range batches(raws, seqs) {
		p.publishGossip(ctx, p.topics.batches, b)
	}
}

// publishGossip publishes b on t, unless it is too large for the topic:
// replicas fetch its entries from the change feed.
func (p *publisher) publishGossip(ctx context.Context, t *p2p.Topic, b batch) {
	if len(b.data) > maxCommandSize {
		p.n.log.Debug("a directory change too large for gossip", "seq", b.seq, "bytes", len(b.data))
		return
	}
	if err := t.Publish(ctx, b.data); err != nil {
		if ctx.Err() == nil {
			p.n.log.Warn("publishing a directory change failed", "seq", b.seq, "err", err)
		}
		return
	}
	p.gossiped.WithLabelValues(t.Name(), "messages").Inc()
	p.gossiped.WithLabelValues(t.Name(), "entries").Add(float64(b.entries))
}

// legacyPeers reports whether a peer subscribes to the directory's
// entries one a message and not to its batches: a node of an earlier
// release. It says so in the log, naming the peer, when that starts and
// ends: any peer that subscribes so keeps it going (at the cost, for
// every node, of the gossip of that release), and the operator learns
// who.
func (p *publisher) legacyPeers() bool {
	batches := map[peer.ID]bool{}
	for _, id := range p.topics.batches.Peers() {
		batches[id] = true
	}
	var older peer.ID
	for _, id := range p.topics.legacy.Peers() {
		if !batches[id] {
			older = id
			break
		}
	}
	switch was := p.legacy.Swap(older != ""); {
	case older != "" && !was:
		p.n.log.Info("publishing the directory's entries on "+legacyDirectoryTopic+" too, one a message: a peer reads that topic and not "+directoryTopic+" (a node of an earlier release)", "peer", older)
	case older == "" && was:
		p.n.log.Info("no peer reads " + legacyDirectoryTopic + " alone any more: the directory's entries go in batches only")
	}
	return older != ""
}

// batch is one message of a directory topic: the seq of its first entry
// and how many it carries.
type batch struct {
	data    []byte
	seq     uint64
	entries int
}

// batches packs raws, encoded entries of ascending seqs, into messages of
// directoryTopic: consecutive seqs each, at most maxGossipEntries and
// maxCommandSize bytes (an entry too large alone makes a message of its
// own, which publishGossip leaves out).
func batches(raws [][]byte, seqs []uint64) []batch {
	var out []batch
	start, size := 0, len(batchOpen)+len(batchClose)
	for i, raw := range raws {
		if i > start && (i-start == maxGossipEntries || size+1+len(raw) > maxCommandSize || seqs[i] != seqs[i-1]+1) {
			out = append(out, batch{data: encodeBatch(raws[start:i]), seq: seqs[start], entries: i - start})
			start, size = i, len(batchOpen)+len(batchClose)
		}
		if i > start {
			size++ // the comma
		}
		size += len(raw)
	}
	if start < len(raws) {
		out = append(out, batch{data: encodeBatch(raws[start:]), seq: seqs[start], entries: len(raws) - start})
	}
	return out
}

const batchOpen, batchClose = `{"entries":[`, `]}`

// encodeBatch is the message of directoryTopic that carries raws, in one
// allocation of its size: gossipsub keeps a message for a few heartbeats
// to serve IWANTs, and a directory's messages carry cards.
func encodeBatch(raws [][]byte) []byte {
	size := len(batchOpen) + len(raws) - 1 + len(batchClose)
	for _, raw := range raws {
		size += len(raw)
	}
	b := append(make([]byte, 0, size), batchOpen...)
	for i, raw := range raws {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, raw...)
	}
	return append(b, batchClose...)
}
