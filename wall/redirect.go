package wall

import (
	"errors"
	"strings"
	"time"

	"github.com/agentmesh/mesh/store"
)

// A renamed public cluster gets a new slug, made from its new name as at
// creation, and its former slug keeps leading to it (a redirect) for the
// window the directory stamps in the rename (Op.SlugHold, the directory's
// Config.SlugRedirect): every JSON path takes it as the cluster's id or
// slug, a page answers 301 to the new slug. Meanwhile no other cluster is
// given it; once the window has passed it answers 404 and the next
// cluster whose name makes it may take it. A cluster made private keeps
// its slug (unlisted, 404 to lookups) for the day it turns public again.
//
//	w/sr/<slug>  slugRedirect: a former slug of a renamed public cluster

// DefaultSlugRedirect is how long node.DefaultConfig keeps an old slug
// leading to its renamed cluster: a season of links in print and chats.
const DefaultSlugRedirect = 90 * 24 * time.Hour

func redirectKey(slug string) []byte { return store.Key("w", "sr", slug) }

// slugRedirect is a former slug of cluster ID.
type slugRedirect struct {
	ID string `json:"id"`
	// Until (ns) is when the redirect lapses; 0: never.
	Until int64 `json:"until,omitempty"`
}

func (r *slugRedirect) live(now int64) bool { return r.Until == 0 || now < r.Until }

// SlugMove is what a rename did to a public cluster's slug: From now
// leads to it, until Until (nil: for ever).
type SlugMove struct {
	From  string     `json:"from"`
	Until *time.Time `json:"until"`
}

func getRedirect(tx *store.Txn, slug string) (*slugRedirect, error) {
	var r slugRedirect
	return &r, tx.GetJSON(redirectKey(slug), &r)
}

// slugFree reports whether slug may be given to cluster id at at (ns): no
// cluster holds it, and no other cluster's live redirect does. A lapsed
// redirect, or one of id's own, is dropped as the slug is taken.
func slugFree(tx *store.Txn, slug, id string, at int64) (bool, error) {
	if taken, err := tx.Has(slugKey(slug)); err != nil || taken {
		return false, err
	}
	r, err := getRedirect(tx, slug)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return true, nil
	case err != nil:
		return false, err
	case r.ID != id && r.live(at):
		return false, nil
	}
	return true, tx.Delete(redirectKey(slug))
}

// reslug gives public cluster cl the slug of base, as at creation, at at
// (ns), unless its slug is made from base already; its former slug then
// redirects to it for hold (0: for ever).
func reslug(tx *store.Txn, cl *Cluster, base string, at, hold int64) (*SlugMove, error) {
	if cl.Slug != "" && madeFrom(cl.Slug, base) {
		return nil, nil
	}
	slug, err := claimSlug(tx, cl.ID, base, at)
	if err != nil {
		return nil, err
	}
	old := cl.Slug
	cl.Slug = slug
	if old == "" {
		return nil, nil
	}
	r := slugRedirect{ID: cl.ID}
	move := &SlugMove{From: old}
	if hold > 0 {
		r.Until = at + hold
		t := time.Unix(0, r.Until).UTC()
		move.Until = &t
	}
	if err := tx.Delete(slugKey(old)); err != nil {
		return nil, err
	}
	return move, tx.SetJSON(redirectKey(old), r)
}

// madeFrom reports whether slug is what claimSlug makes of base: base, or
// base-<n>.
func madeFrom(slug, base string) bool {
	if slug == base {
		return true
	}
	n, ok := strings.CutPrefix(slug, base+"-")
	return ok && n != "" && strings.Trim(n, "0123456789") == ""
}
