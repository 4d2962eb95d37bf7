package wall

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentmesh/mesh/internal/clock"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/store"
)

// Kind is the cmdlog entry kind of cluster operations.
const Kind = "clusters"

// Op is one cluster operation in the canonical log. Exactly one of
// Create, Delete, Joined and Expire is set. Creates and deletes are
// self-certifying (signed by the cluster's admin key), so the directory
// accepts them from any node (Service.Proposed); joins and expiries are
// the directory's own bookkeeping (see expiry.go).
type Op struct {
	Create *Signed `json:"create,omitempty"`
	// JoinBy (Unix ns), with the creation of a public cluster, is when it
	// expires unless a node serves it first; the directory sets it.
	JoinBy int64    `json:"join_by,omitempty"`
	Delete *Signed  `json:"delete,omitempty"`
	Joined string   `json:"joined,omitempty"`
	Expire []string `json:"expire,omitempty"`
	// Board is a board or post write (boards.go), Quota the directory's
	// quotas it is applied under (set by the directory whoever proposed
	// it).
	Board *Signed `json:"board,omitempty"`
	Quota *Quota  `json:"quota,omitempty"`
	// SlugHold (ns), with a patch_cluster, is how long a renamed public
	// cluster's former slug keeps leading to it (redirect.go; 0: for
	// ever); the directory sets it.
	SlugHold int64 `json:"slug_hold,omitempty"`
	// ExpirePosts and Purge are the directory's housekeeping of boards
	// (boards_expiry.go).
	ExpirePosts []PostRef `json:"expire_posts,omitempty"`
	Purge       *Purge    `json:"purge,omitempty"`
}

// Surface names the write op is, for the directory's write budget
// (internal/admission).
func (op Op) Surface() string {
	switch {
	case op.Create != nil:
		return "cluster_create"
	case op.Delete != nil:
		return "cluster_delete"
	case op.Joined != "":
		return "cluster_joined"
	case op.Expire != nil:
		return "cluster_expire"
	case op.Board != nil:
		return boardSurface(*op.Board)
	case op.ExpirePosts != nil || op.Purge != nil:
		return "post_expire"
	}
	return Kind
}

// Result is what applying an Op produced.
type Result struct {
	Cluster *Cluster `json:"cluster,omitempty"`
	// Expired counts the clusters an expiry dropped, or the posts.
	Expired int `json:"expired,omitempty"`
	// Board and Post are what a board action made or changed.
	Board *boardRow `json:"board,omitempty"`
	Post  *postRow  `json:"post,omitempty"`
	// Moved is what a rename did to a public cluster's slug.
	Moved *SlugMove `json:"moved,omitempty"`
}

// Cluster is a cluster as the catalog holds it.
type Cluster struct {
	Record
	// Slug is a public cluster's permanent unique slug, assigned by the
	// directory when it applied the creation.
	Slug string `json:"slug,omitempty"`
	// CreatedAt is when the directory applied the creation.
	CreatedAt time.Time `json:"created_at"`
	// JoinBy (Unix ns) is when a public cluster expires unless a node
	// serves it first; 0 once one did, or when it never expires.
	JoinBy int64 `json:"join_by,omitempty"`
	// Signed is the record as its admin signed it.
	Signed Signed `json:"signed"`
	// Rev counts the admin actions applied to the cluster's boards and
	// settings (boards.go); Record.Boards and Record.Props are as the
	// last patch set them.
	Rev int64 `json:"rev,omitempty"`
	// SealedProps is a private cluster's props, sealed with its wire key
	// (a public one's are Record.Props).
	SealedProps string `json:"sealed_props,omitempty"`
	// Usage is what the cluster's boards hold.
	Usage Usage `json:"usage,omitzero"`
}

// Public reports whether the cluster is listed and tokenless to join.
func (c *Cluster) Public() bool { return c.Visibility == Public }

// The lobby: a well-known public cluster every node serves without a
// record in the log. It has no admin key and cannot be deleted.
const (
	LobbyID   = "c_lobby"
	LobbySlug = "lobby"
)

var lobby = &Cluster{
	Record: Record{V: recordVersion, ID: LobbyID, Visibility: Public, Meta: &Meta{
		Name: "Lobby", Topic: "#public",
		Description: "The open lobby: a public cluster every node serves. Say hello.",
	}},
	Slug: LobbySlug,
}

// Catalog is the cluster catalog: the cmdlog Machine of Kind and its reads.
type Catalog struct {
	db *store.DB
	// now is the clock of reads (a redirect's lapse), the wall's
	// (Config.Clock, set by New); Apply reads only the entry's time.
	now func() time.Time

	mu       sync.Mutex
	deleted  []func(id string)
	board    []func(BoardEvent)
	updated  []func(ClusterUpdate)
	restored []func()

	index boardIndexes // public boards' posts, in memory (boards_index.go)
}

var _ cmdlog.Machine = (*Catalog)(nil)

// NewCatalog returns the catalog kept in log's store and registers it.
func NewCatalog(log *cmdlog.Log) *Catalog {
	c := &Catalog{db: log.DB(), now: clock.Real{}.Now}
	c.index.reset()
	log.Handle(Kind, c)
	return c
}

// setClock sets the clock reads go by (a slug redirect's lapse).
func (c *Catalog) setClock(now func() time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

func (c *Catalog) clock() time.Time {
	c.mu.Lock()
	now := c.now
	c.mu.Unlock()
	return now()
}

// OnDelete registers fn to learn of every cluster deletion the log commits
// (on this node, whoever proposed it). fn must not block.
func (c *Catalog) OnDelete(fn func(id string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deleted = append(c.deleted, fn)
}

// Key layout of the catalog in the store:
//
//	w/c/<id>    Cluster
//	w/s/<slug>  id of the cluster holding slug (kept after deletion: slugs are permanent)
//	w/sr/<slug> a renamed cluster's former slug (redirect.go)
//	w/t/<id>    tombstone of a deleted cluster: the id can never be created again
//	w/u/<join by ns 8B>/<id>  public cluster no node served yet
func clusterKey(id string) []byte { return store.Key("w", "c", id) }
func slugKey(slug string) []byte  { return store.Key("w", "s", slug) }
func tombKey(id string) []byte    { return store.Key("w", "t", id) }

// Apply implements cmdlog.Machine.
func (c *Catalog) Apply(tx *store.Txn, e *cmdlog.Entry) (any, error) {
	var op Op
	if err := json.Unmarshal(e.Op, &op); err != nil {
		return nil, fmt.Errorf("wall: decode op %d: %w", e.Seq, err)
	}
	switch {
	case op.Create != nil:
		return applyCreate(tx, e, *op.Create, op.JoinBy)
	case op.Delete != nil:
		return applyDelete(tx, *op.Delete)
	case op.Joined != "":
		return applyJoined(tx, op.Joined)
	case op.Expire != nil:
		return applyExpire(tx, e, op.Expire)
	case op.Board != nil:
		return applyBoard(tx, e, *op.Board, op.Quota, op.SlugHold)
	case op.ExpirePosts != nil:
		return applyExpirePosts(tx, e, op.ExpirePosts)
	case op.Purge != nil:
		return applyPurge(tx, *op.Purge)
	}
	return nil, httpx.ErrInvalid.With("cluster op has no operation")
}

// Committed implements cmdlog.Machine: deletions and expiries reach
// OnDelete listeners.
func (c *Catalog) Committed(e *cmdlog.Entry, _ any) {
	var op Op
	if json.Unmarshal(e.Op, &op) != nil {
		return
	}
	if op.Board != nil || op.ExpirePosts != nil {
		c.boardCommitted(e, &op)
		return
	}
	var gone []string
	switch {
	case op.Delete != nil:
		if id, err := actionTarget(*op.Delete); err == nil {
			gone = append(gone, id)
		}
	case op.Expire != nil:
		for _, id := range op.Expire {
			// An expiry skips a cluster served since it was proposed.
			if _, err := c.Get(id); errors.Is(err, ErrClusterNotFound) {
				gone = append(gone, id)
			}
		}
	}
	if len(gone) == 0 {
		return
	}
	c.mu.Lock()
	fns := c.deleted
	c.mu.Unlock()
	for _, id := range gone {
		c.index.dropCluster(id)
		for _, fn := range fns {
			fn(id)
		}
	}
}

// State implements cmdlog.Machine: records, slugs, tombstones and the
// join deadlines of public clusters; histories (w/h/, w/hn/) are kept by
// bootstrap nodes for themselves.
func (c *Catalog) State() [][]byte {
	return append([][]byte{[]byte("w/c/"), []byte("w/s/"), []byte("w/sr/"), []byte("w/t/"), []byte("w/u/")}, boardPrefixes...)
}

// Restored implements cmdlog.Machine: the boards' indexes are dropped
// (they are built again from the store when read), and the OnRestore
// listeners learn that any cluster may have changed.
func (c *Catalog) Restored() {
	c.index.reset()
	c.mu.Lock()
	fns := c.restored
	c.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// OnRestore registers fn to learn of every snapshot installed, which may
// have deleted clusters or changed them in any way. fn must not block.
func (c *Catalog) OnRestore(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.restored = append(c.restored, fn)
}

func applyCreate(tx *store.Txn, e *cmdlog.Entry, s Signed, joinBy int64) (Result, error) {
	r, err := OpenRecord(s)
	if err != nil {
		return Result{}, err
	}
	for _, k := range [][]byte{clusterKey(r.ID), tombKey(r.ID)} {
		if ok, err := tx.Has(k); err != nil || ok {
			return Result{}, errors.Join(err, ErrClusterExists)
		}
	}
	cl := &Cluster{Record: *r, CreatedAt: e.Time(), Signed: s}
	if r.Visibility == Public {
		if cl.Slug, err = claimSlug(tx, r.ID, slugBase(r.Meta), e.At); err != nil {
			return Result{}, err
		}
		if err := awaitJoin(tx, cl, joinBy); err != nil {
			return Result{}, err
		}
	}
	return Result{Cluster: cl}, tx.SetJSON(clusterKey(r.ID), cl)
}

func applyDelete(tx *store.Txn, s Signed) (Result, error) {
	id, err := actionTarget(s)
	if err != nil {
		return Result{}, err
	}
	cl, err := getCluster(tx, id)
	if err != nil {
		return Result{}, err
	}
	a, err := openAction(s, &cl.Record)
	if err != nil {
		return Result{}, err
	}
	if a.Op != ActionDelete {
		return Result{}, httpx.ErrInvalid.With("unknown admin action %q", a.Op)
	}
	return Result{Cluster: cl}, removeCluster(tx, cl, a.At, false)
}

// removeCluster deletes cl for good: its id gets a tombstone (at, Unix
// ms, the time of the action), and its slug is released only when
// releaseSlug is set (a cluster nobody ever served).
func removeCluster(tx *store.Txn, cl *Cluster, at int64, releaseSlug bool) error {
	if err := joined(tx, cl); err != nil {
		return err
	}
	if releaseSlug && cl.Slug != "" {
		if err := tx.Delete(slugKey(cl.Slug)); err != nil {
			return err
		}
	}
	if err := tx.Delete(clusterKey(cl.ID)); err != nil {
		return err
	}
	if err := dropBoards(tx, cl.ID); err != nil {
		return err
	}
	return tx.Set(tombKey(cl.ID), []byte(strconv.FormatInt(at, 10)))
}

// claimSlug gives id the slug base, or base-2, base-3... whichever is
// free first at at (ns; slugFree). A cluster's slug is never released
// (but for a cluster that expired unjoined), and a renamed cluster's
// former slug leads to it for a while (redirect.go), so a link to one
// never leads to another cluster meanwhile.
func claimSlug(tx *store.Txn, id, base string, at int64) (string, error) {
	for n := 1; ; n++ {
		slug := base
		if n > 1 {
			slug = base + "-" + strconv.Itoa(n)
		}
		if slug == LobbySlug {
			continue
		}
		free, err := slugFree(tx, slug, id, at)
		if err != nil {
			return "", err
		}
		if free {
			return slug, tx.Set(slugKey(slug), []byte(id))
		}
	}
}

// slugBase makes a slug from the cluster's name (or topic): lower case
// letters, digits and single dashes, at most 48 bytes.
func slugBase(m *Meta) string {
	src := m.Name
	if strings.TrimSpace(src) == "" {
		src = m.Topic
	}
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(src) {
		switch {
		case r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		default:
			dash = true
		}
		if b.Len() >= 48 {
			break
		}
	}
	if b.Len() == 0 {
		return "cluster"
	}
	return b.String()
}

func getCluster(tx *store.Txn, id string) (*Cluster, error) {
	var cl Cluster
	err := tx.GetJSON(clusterKey(id), &cl)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrClusterNotFound
	}
	return &cl, err
}

// Get returns cluster id (the lobby included), or ErrClusterNotFound for
// an unknown or deleted one.
func (c *Catalog) Get(id string) (*Cluster, error) {
	if id == LobbyID {
		return lobby, nil
	}
	if !strings.HasPrefix(id, idPrefix) || len(id) > 64 {
		return nil, ErrClusterNotFound
	}
	var cl *Cluster
	err := c.db.View(func(tx *store.Txn) error {
		var err error
		cl, err = getCluster(tx, id)
		return err
	})
	return cl, err
}

// Lookup returns a public cluster by id, slug or a former slug that still
// redirects to it (redirect.go); private and unknown ones are both
// ErrClusterNotFound, so a private id cannot be probed.
func (c *Catalog) Lookup(idOrSlug string) (*Cluster, error) {
	id := idOrSlug
	if !strings.HasPrefix(idOrSlug, idPrefix) {
		if idOrSlug == LobbySlug {
			return lobby, nil
		}
		err := c.db.View(func(tx *store.Txn) error {
			v, err := tx.Get(slugKey(idOrSlug))
			if !errors.Is(err, store.ErrNotFound) {
				id = string(v)
				return err
			}
			r, err := getRedirect(tx, idOrSlug)
			if err == nil && !r.live(c.clock().UnixNano()) {
				err = store.ErrNotFound
			}
			id = r.ID
			return err
		})
		if errors.Is(err, store.ErrNotFound) || len(idOrSlug) > 64 {
			return nil, ErrClusterNotFound
		}
		if err != nil {
			return nil, err
		}
	}
	cl, err := c.Get(id)
	if err == nil && !cl.Public() {
		return nil, ErrClusterNotFound
	}
	return cl, err
}

// Resolve returns a cluster by id (Get), or a public one by slug (private
// clusters have none). A slug never starts with the id prefix ("c_": no
// underscore), so neither is taken for the other.
func (c *Catalog) Resolve(idOrSlug string) (*Cluster, error) {
	if strings.HasPrefix(idOrSlug, idPrefix) {
		return c.Get(idOrSlug)
	}
	return c.Lookup(idOrSlug)
}

// Public calls fn for the lobby, then every public cluster in slug order,
// until fn returns false.
func (c *Catalog) Public(fn func(*Cluster) bool) error {
	if !fn(lobby) {
		return nil
	}
	return c.db.View(func(tx *store.Txn) error {
		return tx.Scan(store.Key("w", "s", ""), nil, func(_, v []byte) (bool, error) {
			cl, err := getCluster(tx, string(v))
			if errors.Is(err, ErrClusterNotFound) {
				return true, nil // deleted; the slug stays reserved
			}
			if err != nil {
				return false, err
			}
			if !cl.Public() {
				return true, nil // made private: it keeps its slug, unlisted
			}
			return fn(cl), nil
		})
	})
}

// Limits on cluster metadata.
const (
	maxNameLen        = 80
	maxTopicLen       = 64
	maxDescriptionLen = 500
)

func (m *Meta) validate() error {
	for _, f := range []struct {
		name, v string
		max     int
	}{{"name", m.Name, maxNameLen}, {"topic", m.Topic, maxTopicLen}, {"description", m.Description, maxDescriptionLen}} {
		if err := checkField(f.name, f.v, f.max, false, false); err != nil {
			return err
		}
	}
	return nil
}
