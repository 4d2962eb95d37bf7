package wall

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"

	"github.com/agentmesh/mesh/internal/httpx"
)

// A cluster's admin renames it, or turns it from public to private or
// back, with PATCH /v1/clusters/<id> (cluster_patch.go): a patch_cluster
// action signed by the admin key and naming the cluster's Rev, like the
// other admin writes (a replayed or concurrent one is refused, 409
// conflict). It carries the cluster's state after the change in the form
// the new visibility needs, made by the node that serves the request,
// which holds the admin token:
//
//   - a rename, the metadata: plain for a public cluster (Apply gives it
//     the slug of its new name, the former one redirecting: redirect.go),
//     sealed with the wire key for a private one;
//   - public → private, a new member token's verifier and wrap (the token
//     is in the answer, and nowhere else), the metadata and props sealed
//     with its wire key: the old token admits no more, and every node
//     closes the cluster's sockets, so that the rooms that follow seal
//     their traffic with the new key;
//   - private → public, the metadata and props in the open: the token
//     stays (the owner's credential on a public cluster), what was sealed
//     in the private period (its history) stays sealed, and every node
//     closes the cluster's sockets, so that the rooms that follow carry
//     plain traffic that token-less members read.
//
// A change of visibility is refused while the cluster has boards: their
// contents and keys are in the form of the visibility they were written
// under (sealed, HMAC keys), and a log entry cannot rewrite every post.

// Errors of cluster patches.
var (
	ErrBoardsPresent = httpx.E(http.StatusConflict, "boards_present",
		"the cluster has boards, whose contents are stored in the form of its visibility: delete them before changing it")
	ErrRecordV1 = httpx.E(http.StatusConflict, "record_unsupported",
		"this cluster was created by an earlier release (record v1): its visibility cannot change")
)

// Sealing purpose of a private cluster's metadata (Record.Sealed).
const sealMeta = "meta"

// updateCluster applies what a patch_cluster changes of the cluster
// itself (see the top of this file): nothing unless it renames it or
// changes its visibility.
func (b *boardTx) updateCluster() (*SlugMove, error) {
	a, cl := b.a, b.cl
	switch {
	case a.Visibility != "":
		if err := b.turn(); err != nil {
			return nil, err
		}
	case a.Rename:
		if err := b.setMeta(); err != nil {
			return nil, err
		}
	case a.Meta != nil || a.SealedMeta != "" || a.Verifier != "" || a.TokenWrap != "":
		return nil, ErrBadAction.With("a cluster patch carries metadata without a rename or a change of visibility")
	default:
		return nil, nil
	}
	if !cl.Public() {
		return nil, nil // a private cluster keeps its slug, unlisted
	}
	return reslug(b.tx, cl, slugBase(cl.Meta), b.e.At, b.hold)
}

// turn changes the cluster's visibility, as the action says.
func (b *boardTx) turn() error {
	a, cl := b.a, b.cl
	switch {
	case a.Visibility != Public && a.Visibility != Private || a.Visibility == cl.Visibility:
		return ErrBadAction.With("a cluster patch's visibility must change it")
	case cl.V != recordVersion:
		return ErrRecordV1
	case cl.Usage.Boards > 0:
		return ErrBoardsPresent
	}
	cl.Visibility = a.Visibility
	cl.Props, cl.SealedProps = nil, "" // the action brings them in the new form
	if cl.Public() {
		if a.Verifier != "" || a.TokenWrap != "" {
			return ErrBadAction.With("a cluster turning public keeps its token")
		}
		cl.Sealed = ""
		return b.setMeta()
	}
	wrap, err := base64.StdEncoding.DecodeString(a.TokenWrap)
	if next := (&Record{V: recordVersion, Verifier: a.Verifier}); next.memberPub() == nil || err != nil || len(wrap) == 0 {
		return ErrBadAction.With("a cluster turning private needs its new token's verifier and wrap")
	}
	cl.Verifier, cl.TokenWrap, cl.Meta = a.Verifier, a.TokenWrap, nil
	if err := joined(b.tx, cl); err != nil { // private clusters never expire
		return err
	}
	return b.setMeta()
}

// setMeta sets the cluster's metadata from the action, in the form of its
// visibility.
func (b *boardTx) setMeta() error {
	a, cl := b.a, b.cl
	switch {
	case a.Verifier != "" && a.Visibility == "", a.TokenWrap != "" && a.Visibility == "":
		return ErrBadAction.With("a rename keeps the cluster's token")
	case cl.Public() && (a.Meta == nil || a.SealedMeta != ""):
		return ErrBadAction.With("a public cluster's metadata is in the open")
	case !cl.Public() && (a.Meta != nil || a.SealedMeta == ""):
		return ErrBadAction.With("a private cluster's metadata is sealed")
	case cl.Public():
		if err := a.Meta.validate(); err != nil {
			return ErrBadAction.With("a cluster patch's metadata: %v", err)
		}
		cl.Meta = a.Meta
	default:
		cl.Sealed = a.SealedMeta
	}
	return nil
}

// ClusterUpdate is a committed rename or change of visibility.
type ClusterUpdate struct {
	ID string
	// Renamed: the name changed; Visibility: the new visibility, when it
	// changed ("" otherwise).
	Renamed    bool
	Visibility string
}

// OnUpdate registers fn to learn of every rename and change of
// visibility the log commits. fn must not block.
func (c *Catalog) OnUpdate(fn func(ClusterUpdate)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updated = append(c.updated, fn)
}

// tellUpdate tells the OnUpdate listeners of committed patch a, if it
// renamed the cluster or changed its visibility.
func (c *Catalog) tellUpdate(a *BoardAction) {
	if !a.Rename && a.Visibility == "" {
		return
	}
	c.mu.Lock()
	fns := c.updated
	c.mu.Unlock()
	for _, fn := range fns {
		fn(ClusterUpdate{ID: a.ID, Renamed: a.Rename, Visibility: a.Visibility})
	}
}

// KindClusterUpdated is the frame of a rename or change of visibility.
const KindClusterUpdated = "cluster_updated"

type clusterUpdatedFrame struct {
	Kind    string   `json:"kind"`
	Cluster string   `json:"cluster"`
	Changed []string `json:"changed"` // "name", "visibility"
	// Name is null where this node cannot read it: a cluster just turned
	// private (sealed with its new token, which no socket here holds).
	Name       *string `json:"name"`
	Slug       *string `json:"slug"` // a public cluster's
	Visibility string  `json:"visibility"`
}

func visibilityCause(vis string) *closeCause {
	if vis == Public {
		return causePublic
	}
	return causePrivate
}

// clusterUpdated tells the cluster's sockets on this node of update u (a
// cluster_updated frame) and, when its visibility changed, closes them
// all (the frame before, a closed frame naming the change): the old token
// admits no more (public → private) or the traffic is no longer sealed
// (private → public), so the room starts anew, under the new rules, with
// the sockets that connect again.
//
// The room here may be of the new terms already: a socket admitted under
// them found the old room and closed it (enter) before this ran. That
// room's sockets connected after the change, and are left alone.
func (s *Service) clusterUpdated(u ClusterUpdate) {
	cl, err := s.cfg.Catalog.Get(u.ID)
	if err != nil {
		return // deleted since
	}
	s.mu.Lock()
	r := s.rooms[u.ID]
	s.mu.Unlock()
	if r == nil {
		return
	}
	<-r.ready
	stale := !sameTerms(r.cl, cl)
	if u.Visibility != "" && !stale {
		return
	}
	f := clusterUpdatedFrame{Kind: KindClusterUpdated, Cluster: cl.ID, Changed: []string{}, Visibility: cl.Visibility}
	if u.Renamed {
		f.Changed = append(f.Changed, "name")
	}
	if u.Visibility != "" {
		f.Changed = append(f.Changed, "visibility")
	}
	if m, ok := r.meta(cl); ok {
		f.Name = &m.Name
	}
	if cl.Public() {
		f.Slug = &cl.Slug
	}
	data := text(encodeFrame(f))
	r.mu.Lock()
	for sk := range r.sockets {
		sk.send(data)
	}
	r.mu.Unlock()
	if stale {
		s.shut(r, visibilityCause(cl.Visibility))
	}
}

// meta is cluster cl's metadata as room r reads it: a private cluster's
// only while the room holds its current token.
func (r *room) meta(cl *Cluster) (Meta, bool) {
	if cl.Public() {
		return *cl.Meta, true
	}
	m, err := openMeta(r.seal, cl)
	return m, err == nil
}

// openMeta opens private cluster cl's metadata with seal.
func openMeta(seal *sealer, cl *Cluster) (Meta, error) {
	var m Meta
	if seal == nil || cl.Sealed == "" {
		return m, errUnseal
	}
	return m, unpack(seal, sealMeta, nil, cl.Sealed, &m)
}

// sealedMeta seals m with seal, as a private cluster's record holds it.
func sealedMeta(seal *sealer, m Meta) string {
	b, _ := json.Marshal(m)
	return sealString(seal, sealMeta, b)
}

// wrapToken seals member token with the admin token's key, as
// Record.TokenWrap holds it.
func wrapToken(id, admin, token string) string {
	return base64.StdEncoding.EncodeToString(newSealer(id, admin).seal("token wrap", []byte(token)))
}

// errTermsChanged: a socket was admitted under a visibility (and member
// token) the cluster has left since.
var errTermsChanged = errors.New("wall: the cluster's visibility changed since the socket was admitted")

// sameTerms reports whether a and b admit sockets alike: the same
// visibility and member token.
func sameTerms(a, b *Cluster) bool { return a.Visibility == b.Visibility && a.Verifier == b.Verifier }

// closeStale settles which of room r and a socket admitted under cl's
// terms is of the cluster's earlier terms: the room is closed (nil: enter
// again), or the socket is refused (errTermsChanged).
func (s *Service) closeStale(r *room, cl *Cluster) error {
	cur, err := s.cfg.Catalog.Get(cl.ID)
	switch {
	case err != nil:
		return err
	case !sameTerms(cur, cl):
		return errTermsChanged
	}
	s.shut(r, visibilityCause(cur.Visibility))
	<-r.done
	return nil
}

// recheckRooms closes, after a snapshot was installed, the rooms of
// clusters it deleted or whose visibility it changed: the entries that
// did so were not applied here one by one, so no hook closed them.
func (s *Service) recheckRooms() {
	s.mu.Lock()
	rooms := slices.Collect(maps.Values(s.rooms))
	s.mu.Unlock()
	for _, r := range rooms {
		<-r.ready
		switch cl, err := s.cfg.Catalog.Get(r.cl.ID); {
		case errors.Is(err, ErrClusterNotFound):
			s.shut(r, causeDeleted)
		case err == nil && !sameTerms(r.cl, cl):
			s.shut(r, visibilityCause(cl.Visibility))
		}
	}
}

// termsCause is why a socket of cluster id's earlier terms is closed.
func (s *Service) termsCause(id string) *closeCause {
	cl, err := s.cfg.Catalog.Get(id)
	if err != nil {
		return causeDeleted
	}
	return visibilityCause(cl.Visibility)
}
