package wall

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/storetest"
)

// updater proposes cluster patches at chosen entry times.
type updater struct {
	t   *testing.T
	cat *Catalog
	p   cmdlog.Proposer
	now time.Time // the next entry's time
}

func (u *updater) create(vis, name string) (*Cluster, string, string) {
	u.t.Helper()
	rec, s, token, admin, err := newCluster(vis, Meta{Name: name, Topic: "#t"}, u.now.UnixMilli())
	if err != nil {
		u.t.Fatal(err)
	}
	if _, err := u.propose(Op{Create: &s}); err != nil {
		u.t.Fatalf("create %s: %v", name, err)
	}
	return u.get(rec.ID), token, admin
}

func (u *updater) get(id string) *Cluster {
	u.t.Helper()
	cl, err := u.cat.Get(id)
	if err != nil {
		u.t.Fatal(err)
	}
	return cl
}

func (u *updater) propose(op Op) (Result, error) {
	return cmdlog.ResultAs[Result](u.p.Propose(context.Background(), Kind, u.now.UnixNano(), op))
}

// patch signs p against the cluster as it stands (g's credential) and
// proposes it, the old slug held for hold; it returns the signed action.
func (u *updater) patch(g *signer, p clusterPatch, hold time.Duration) (Result, Signed, error) {
	u.t.Helper()
	g.cl = u.get(g.cl.ID)
	var view clusterPatchView
	a, err := g.clusterPatch(p, &view)
	if err != nil {
		u.t.Fatal(err)
	}
	a.At, a.Rev = u.now.UnixMilli(), g.cl.Rev
	s, err := g.sign(a)
	if err != nil {
		u.t.Fatal(err)
	}
	res, err := u.propose(Op{Board: &s, SlugHold: int64(hold)})
	if err == nil && view.Token != nil {
		g.member, g.seal = *view.Token, newSealer(g.cl.ID, *view.Token)
	}
	return res, s, err
}

func named(name string) clusterPatch { return clusterPatch{name: &name} }

// TestRenameKeepsTheOldSlug: a renamed public cluster gets the slug of its
// new name; its former slug leads to it, and to no other cluster, for the
// hold the rename carries, then is free; a rename back reclaims it.
func TestRenameKeepsTheOldSlug(t *testing.T) {
	t.Parallel()
	cat, p := memCatalog(t)
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	u := &updater{t: t, cat: cat, p: p, now: start}
	clock := start
	cat.setClock(func() time.Time { return clock })
	cl, _, admin := u.create(Public, "Night Market")
	g := &signer{cl: cl, admin: admin}
	hold := 24 * time.Hour
	res, replay, err := u.patch(g, named("Day Market"), hold)
	if err != nil {
		t.Fatal(err)
	}
	if res.Cluster.Slug != "day-market" || res.Moved == nil || res.Moved.From != "night-market" || !res.Moved.Until.Equal(start.Add(hold)) {
		t.Fatalf("rename: slug %q, moved %+v", res.Cluster.Slug, res.Moved)
	}
	if _, err := u.propose(Op{Board: &replay, SlugHold: int64(hold)}); !errors.Is(err, ErrStale) {
		t.Fatalf("a replayed rename: %v", err)
	}
	for _, slug := range []string{"night-market", "day-market", cl.ID} {
		if got, err := cat.Lookup(slug); err != nil || got.ID != cl.ID || got.Meta.Name != "Day Market" {
			t.Fatalf("lookup %s: %v %v", slug, got, err)
		}
	}
	listed := func() (slugs []string) {
		cat.Public(func(c *Cluster) bool { slugs = append(slugs, c.Slug); return true })
		return slugs
	}
	if got := listed(); len(got) != 2 || got[1] != "day-market" {
		t.Fatalf("catalog after the rename: %v", got)
	}
	// Held: another cluster of that name gets another slug.
	other, _, _ := u.create(Public, "Night Market")
	if other.Slug != "night-market-2" {
		t.Fatalf("a held slug was given away: %q", other.Slug)
	}
	// Once the hold has passed, the former slug leads nowhere, and is free.
	clock, u.now = start.Add(hold), start.Add(hold)
	if _, err := cat.Lookup("night-market"); !errors.Is(err, ErrClusterNotFound) {
		t.Fatalf("a lapsed redirect: %v", err)
	}
	if third, _, _ := u.create(Public, "Night Market"); third.Slug != "night-market" {
		t.Fatalf("a lapsed slug was not given again: %q", third.Slug)
	}
	// A rename back to a name whose slug the cluster held reclaims it; a
	// rename to the same name keeps the slug.
	u.now = u.now.Add(time.Minute)
	if res, _, err := u.patch(g, named("Day  market!"), 0); err != nil || res.Cluster.Slug != "day-market" || res.Moved != nil {
		t.Fatalf("a rename to a name of the same slug: %v %+v", err, res)
	}
	if res, _, err := u.patch(g, named("Dusk"), 0); err != nil || res.Moved == nil || res.Moved.Until != nil {
		t.Fatalf("a rename held for ever: %v %+v", err, res.Moved)
	}
	if res, _, err := u.patch(g, named("Day Market"), 0); err != nil || res.Cluster.Slug != "day-market" {
		t.Fatalf("a rename back: %v %+v", err, res)
	}
	clock = clock.Add(1000 * time.Hour)
	if got, err := cat.Lookup("dusk"); err != nil || got.ID != cl.ID {
		t.Fatalf("a redirect held for ever: %v %v", got, err)
	}
}

// TestVisibilityChanges: public → private issues a new member token (the
// old one admits no more), seals the metadata and props with it and
// leaves the catalog; private → public opens them and keeps the token. A
// change is refused while the cluster has boards, and in a malformed
// action.
func TestVisibilityChanges(t *testing.T) {
	t.Parallel()
	cat, p := memCatalog(t)
	u := &updater{t: t, cat: cat, p: p, now: time.Now()}
	var updates []ClusterUpdate
	cat.OnUpdate(func(up ClusterUpdate) { updates = append(updates, up) })
	cl, oldToken, admin := u.create(Public, "Square")
	g := &signer{cl: cl, admin: admin}
	lat := Props{Lang: "fr"}
	res, _, err := u.patch(g, clusterPatch{vis: Private, props: PropsPatch{Set: lat}, hasProps: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	cl = res.Cluster
	switch {
	case cl.Public(), cl.Meta != nil, cl.Props != nil, cl.checkToken(oldToken), !cl.checkToken(g.member), g.member == oldToken:
		t.Fatalf("made private: %+v", cl)
	}
	if tok, ok := cl.memberToken(admin); !ok || tok != g.member {
		t.Fatal("the admin token does not unwrap the new member token")
	}
	if m, err := openMeta(g.seal, cl); err != nil || m.Name != "Square" || m.Topic != "#t" {
		t.Fatalf("sealed metadata: %+v %v", m, err)
	}
	if g.cl = cl; g.clusterProps().Lang != "fr" {
		t.Fatalf("sealed props: %+v", g.clusterProps())
	}
	if _, err := cat.Lookup("square"); !errors.Is(err, ErrClusterNotFound) {
		t.Fatalf("a private cluster by its slug: %v", err)
	}
	// A private rename seals the new name.
	if res, _, err = u.patch(g, named("Hideout"), 0); err != nil {
		t.Fatal(err)
	}
	if m, _ := openMeta(g.seal, res.Cluster); m.Name != "Hideout" || res.Cluster.Meta != nil {
		t.Fatalf("a private rename: %+v", res.Cluster)
	}
	member := g.member
	if res, _, err = u.patch(g, clusterPatch{vis: Public}, time.Hour); err != nil {
		t.Fatal(err)
	}
	cl = res.Cluster
	if !cl.Public() || cl.Meta.Name != "Hideout" || cl.Sealed != "" || !cl.checkToken(member) || cl.Slug != "hideout" || res.Moved == nil || res.Moved.From != "square" {
		t.Fatalf("made public: %+v, moved %+v", cl, res.Moved)
	}
	if g.cl, g.seal = cl, nil; g.clusterProps().Lang != "fr" {
		t.Fatalf("props opened: %+v", g.clusterProps())
	}
	want := []ClusterUpdate{{ID: cl.ID, Visibility: Private}, {ID: cl.ID, Renamed: true}, {ID: cl.ID, Visibility: Public}}
	if len(updates) != len(want) {
		t.Fatalf("updates told: %+v", updates)
	}
	for i := range want {
		if updates[i] != want[i] {
			t.Fatalf("update %d: %+v, want %+v", i, updates[i], want[i])
		}
	}

	// Malformed patches, signed by the admin key all the same.
	bad := func(a BoardAction) error {
		t.Helper()
		g.cl = u.get(cl.ID)
		a.Op, a.At, a.Rev = ActPatchCluster, u.now.UnixMilli(), g.cl.Rev
		s, _ := g.sign(a)
		_, err := u.propose(Op{Board: &s})
		return err
	}
	for name, a := range map[string]BoardAction{
		"the same visibility":        {Visibility: Public, Meta: &Meta{Name: "x"}},
		"no visibility":              {Visibility: "secret"},
		"private without a verifier": {Visibility: Private, SealedMeta: "AAAA", TokenWrap: "AAAA"},
		"a sealed public rename":     {Rename: true, SealedMeta: "AAAA"},
		"a rename with a new token":  {Rename: true, Meta: &Meta{Name: "x"}, Verifier: cl.Verifier},
		"metadata without a change":  {Meta: &Meta{Name: "x"}},
		"a name over 80":             {Rename: true, Meta: &Meta{Name: string(make([]byte, 81))}},
	} {
		if err := bad(a); !errors.Is(err, ErrBadAction) {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Boards stand in the way of a change of visibility.
	on := true
	if _, _, err := u.patch(g, clusterPatch{boards: &on}, 0); err != nil {
		t.Fatal(err)
	}
	g.cl = u.get(cl.ID)
	board := BoardAction{Op: ActBoardCreate, Board: "b", Rev: g.cl.Rev, At: u.now.UnixMilli()}
	g.pack(&board, sealBoard, boardContent{Slug: "b", Kind: "generic"})
	s, _ := g.sign(board)
	if _, err := u.propose(Op{Board: &s}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := u.patch(g, clusterPatch{vis: Private}, 0); !errors.Is(err, ErrBoardsPresent) {
		t.Fatalf("a change of visibility with boards: %v", err)
	}
}

// TestSocketOfEarlierTerms: a socket admitted while its cluster was public
// (looked up before it was made private, entering after) starts no room
// under the former terms: it gets the closed frame naming the change and
// close 1000, like the cluster's other sockets. The PATCH answers the new
// token, with which sockets join.
func TestSocketOfEarlierTerms(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	created := h.create(`{"visibility":"public","name":"Open"}`)
	id := created["cluster_id"].(string)
	cl, err := h.cat.Get(id) // the connect's lookup, before the change
	if err != nil {
		t.Fatal(err)
	}
	st, v := h.call("PATCH", "/v1/clusters/"+id, `{"visibility":"private"}`, "X-Cluster-Token", created["admin_token"].(string))
	if st != 200 || v["token"] == nil {
		t.Fatalf("PATCH: %d %v", st, v)
	}
	h.lateSocketClosed(cl, causePrivate)
	if h.svc.room(id) != nil {
		t.Fatal("a room of the former terms runs")
	}
	h.dial(id, url.Values{"agent": {"ok"}, "token": {v["token"].(string)}}).listen().next(KindWelcome)
}

// TestSnapshotClosesRoomsOfChangedClusters: a node that catches up by
// installing a snapshot, in which its cluster was made private, closes
// the cluster's sockets as if it had applied the change itself.
func TestSnapshotClosesRoomsOfChangedClusters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	created := h.create(`{"visibility":"public","name":"Open"}`)
	id := created["cluster_id"].(string)
	member := h.dial(id, url.Values{"agent": {"a"}}).listen()
	member.next(KindWelcome)

	// The directory's log, where the cluster was made private since.
	dir := storetest.Log(t)
	cat, p := NewCatalog(dir), cmdlog.NewLocal(dir)
	cl, _ := h.cat.Get(id)
	u := &updater{t: t, cat: cat, p: p, now: time.Now()}
	if _, err := u.propose(Op{Create: &cl.Signed}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := u.patch(&signer{cl: cl, admin: created["admin_token"].(string)}, clusterPatch{vis: Private}, 0); err != nil {
		t.Fatal(err)
	}
	buf := storetest.Snapshot(t, dir)
	if _, err := h.log.Restore(buf); err != nil {
		t.Fatal(err)
	}
	if f := member.next(KindClosed); f["reason"] != causePrivate.reason {
		t.Fatalf("closed frame: %v", f)
	}
}
