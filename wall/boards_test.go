package wall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/store"
)

// FuzzDecodePost: whatever a post creation's body and agent, decodePost
// answers a client error or a post whose stored form (the JSON every
// node applies) decodes and passes the apply's check alike, and a
// hashtag scan of its text never fails.
func FuzzDecodePost(f *testing.F) {
	for _, s := range []string{
		`{"title":"Bike","body":"Red","ttl":"7d"}`,
		`{"title":"t","ttl":"forever","file":{"url":"https://example.org/a.png","mime":"image/png; q=1"}}`,
		`{"title":"t","ttl":"24h","props":{"where":{"lat":89.9,"lon":-180,"label":"pole"},"lang":"fr-CA"}}`,
		`{"title":"t","ttl":"1y","props":{"where":"none"}}`,
		`{"title":"t","ttl":"30d","props":null}`,
		`{"title":"t","ttl":"7d","props":{"entry":{"age_min":18}}}`,
		`{"title":"\u0000","ttl":"7d"}`,
		`{"title":"#market p_aaaaaaaaaaaaaaaaaaaaaaaa","ttl":"7d","file":{"url":"ftp://x","mime":"a/b"}}`,
		`[1,2]`, `null`, `{"title":1}`,
	} {
		f.Add("alice", []byte(s))
	}
	f.Fuzz(func(t *testing.T, agent string, body []byte) {
		pc, ttl, err := decodePost(agent, body)
		if err != nil {
			var e *httpx.Error
			if !errors.As(err, &e) || e.Status < 400 || e.Status >= 500 {
				t.Fatalf("%q: not a client error: %v", body, err)
			}
			return
		}
		if _, ok := ttls[ttl]; !ok {
			t.Fatalf("ttl %q passed", ttl)
		}
		stored, err := json.Marshal(pc)
		if err != nil {
			t.Fatal(err)
		}
		var back postContent
		if err := json.Unmarshal(stored, &back); err != nil {
			t.Fatalf("stored %s does not decode: %v", stored, err)
		}
		if err := back.validate(); err != nil {
			t.Fatalf("stored %s fails the apply's check: %v", stored, err)
		}
		if !reflect.DeepEqual(back, pc) {
			t.Fatalf("stored %s decodes as %+v, not %+v", stored, back, pc)
		}
		hashtags(pc.Title + " " + pc.Body)
	})
}

// TestBoardActionsAreSelfCertifying: the catalog applies a board action
// only with the signature its operation needs (admin key; member key on a
// private cluster), once (a replayed admin action or post creation is
// refused), and other nodes may propose no housekeeping.
func TestBoardActionsAreSelfCertifying(t *testing.T) {
	t.Parallel()
	cat, p := memCatalog(t)
	rec, s, token, admin, err := newCluster(Private, Meta{Name: "club"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := propose(p, Op{Create: &s}); err != nil {
		t.Fatal(err)
	}
	cl, _ := cat.Get(rec.ID)
	g := &signer{cl: cl, admin: admin, member: token, seal: newSealer(cl.ID, token)}
	now := func() int64 { return time.Now().UnixMilli() }
	apply := func(g *signer, a BoardAction) error {
		t.Helper()
		if a.At == 0 {
			a.At = now()
		}
		signed, err := g.sign(a)
		if err != nil {
			t.Fatal(err)
		}
		_, err = propose(p, Op{Board: &signed})
		return err
	}
	on := true
	patch := BoardAction{Op: ActPatchCluster, Boards: &on}
	stranger := &signer{cl: cl, admin: newSecret(adminPrefix), member: newSecret(tokenPrefix)}
	if err := apply(stranger, patch); !errors.Is(err, ErrBadAction) {
		t.Fatalf("a patch signed by another key: %v", err)
	}
	patch.At = now()
	signed, _ := g.sign(patch)
	if _, err := propose(p, Op{Board: &signed}); err != nil {
		t.Fatal(err)
	}
	if _, err := propose(p, Op{Board: &signed}); !errors.Is(err, ErrStale) {
		t.Fatalf("a replayed patch: %v", err)
	}
	g.cl, _ = cat.Get(rec.ID)
	board := BoardAction{Op: ActBoardCreate, Board: g.boardKey("b"), Rev: g.cl.Rev}
	g.pack(&board, sealBoard, boardContent{Slug: "b", Kind: "generic"})
	if err := apply(g, board); err != nil {
		t.Fatal(err)
	}
	post := BoardAction{Op: ActPostCreate, Board: g.boardKey("b"), Post: newPostID(), TTL: "7d"}
	g.pack(&post, sealPost, postContent{Author: "a", Title: "t"})
	if err := apply(stranger, post); !errors.Is(err, ErrBadAction) {
		t.Fatalf("a post signed by a stranger's member key: %v", err)
	}
	unsigned, _ := json.Marshal(BoardAction{V: 1, ID: cl.ID, Op: ActPostCreate, Board: post.Board, Post: post.Post, TTL: "7d", Sealed: post.Sealed, At: now()})
	if _, err := propose(p, Op{Board: &Signed{Body: string(unsigned)}}); !errors.Is(err, ErrBadAction) {
		t.Fatalf("an unsigned post on a private cluster: %v", err)
	}
	old := post
	old.At = now() - (replayWindow + time.Minute).Milliseconds()
	if err := apply(g, old); !errors.Is(err, ErrClockSkew) {
		t.Fatalf("a post creation older than the replay window: %v", err)
	}
	post.At = now()
	created, _ := g.sign(post)
	if _, err := propose(p, Op{Board: &created}); err != nil {
		t.Fatal(err)
	}
	if err := apply(g, BoardAction{Op: ActPostDelete, Board: post.Board, Post: post.Post, ByAuthor: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := propose(p, Op{Board: &created}); !errors.Is(err, ErrPostExists) {
		t.Fatalf("a replayed post creation after its deletion: %v", err)
	}

	svc := &Service{cfg: Config{Quota: Quota{Boards: 7}}}
	for _, op := range []Op{{ExpirePosts: []PostRef{{C: cl.ID, Post: post.Post}}}, {Purge: &Purge{C: cl.ID}}, {Board: &created, Purge: &Purge{}}} {
		raw, _ := json.Marshal(op)
		if _, err := svc.Proposed(raw, time.Now()); !errors.Is(err, errNotProposable) {
			t.Fatalf("proposed %s: %v", raw, err)
		}
	}
	raw, _ := json.Marshal(Op{Board: &created, Quota: &Quota{}})
	if op, err := svc.Proposed(raw, time.Now()); err != nil || op.Quota == nil || op.Quota.Boards != 7 {
		t.Fatalf("the directory's quota is not the one stamped: %+v %v", op.Quota, err)
	}
}

// TestBoardIdxQueryMatchesScan: a board index's pages (near a crowd,
// near sparse posts, with inherited locations, lang, expired posts,
// followed by their cursors) are what a scan of every post finds.
func TestBoardIdxQueryMatchesScan(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	b := newBoardIdx(boardRef{}, "1", nil)
	var all []*idxPost
	for i := range 6000 {
		p := &idxPost{id: fmt.Sprintf("p_%024d", i), created: int64(rng.IntN(3000))}
		switch i % 4 {
		case 0: // a crowd around (48, 2)
			p.props.Where = &Where{Lat: 48 + rng.Float64()*0.2, Lon: 2 + rng.Float64()*0.2}
		case 1: // spread over the world
			p.props.Where = &Where{Lat: rng.Float64()*180 - 90, Lon: rng.Float64()*360 - 180}
		case 2: // inherits the board's
			p.props.Lang = "fr"
		}
		if i%7 == 0 {
			p.until = 1000
		}
		b.put(p)
		all = append(all, p)
	}
	slices.SortFunc(all, func(x, y *idxPost) int { return cmpPost(y, x) })
	board := Props{Where: &Where{Lat: -30, Lon: 150}, Lang: "en"}
	for _, f := range []PostFilter{
		{Near: &Where{Lat: 48.1, Lon: 2.1}, Km: 5},
		{Near: &Where{Lat: 10, Lon: 10}, Km: 2000},
		{Near: &Where{Lat: -30.01, Lon: 150}, Km: 3},
		{Lang: "fr"},
		{},
	} {
		var want []string
		for _, p := range all {
			if (p.until == 0 || p.until > 1500) && f.Match(EffectiveProps(Props{}, board, p.props)) {
				want = append(want, p.id)
			}
		}
		var got []string
		var after *idxPost
		for {
			page, more := b.query([2]Props{{}, board}, f, after, 37, 1500)
			for _, p := range page {
				got = append(got, p.id)
			}
			if !more {
				break
			}
			after = page[len(page)-1]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%+v: %d posts, want %d", f, len(got), len(want))
		}
	}
}

// TestBoardIndexesAreBounded: a node's board indexes hold at most its
// limit of posts in all: reading another board drops the least recently
// read one's index (never the one being read, however large), and a
// board whose index went is read again in full, posts committed since
// included.
func TestBoardIndexesAreBounded(t *testing.T) {
	t.Parallel()
	cat, p, g := memCluster(t, Public)
	cat.SetIndexLimit(3)
	rec := g.cl
	apply := func(a BoardAction) {
		t.Helper()
		g.cl, _ = cat.Get(rec.ID)
		a.At, a.Rev = time.Now().UnixMilli(), g.cl.Rev
		signed, err := g.sign(a)
		if err == nil {
			_, err = propose(p, Op{Board: &signed})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	on := true
	apply(BoardAction{Op: ActPatchCluster, Boards: &on})
	post := func(slug string) {
		a := BoardAction{Op: ActPostCreate, Board: slug, Post: newPostID(), TTL: "7d"}
		g.pack(&a, sealPost, postContent{Author: "a", Title: "t"})
		apply(a)
	}
	for _, slug := range []string{"a", "b"} {
		a := BoardAction{Op: ActBoardCreate, Board: slug}
		g.pack(&a, sealBoard, boardContent{Slug: slug, Kind: "generic"})
		apply(a)
		post(slug)
		post(slug)
	}
	read := func(slug string) *boardIdx {
		t.Helper()
		var row boardRow
		if err := cat.db.View(func(tx *store.Txn) error { return tx.GetJSON(boardRowKey(rec.ID, slug), &row) }); err != nil {
			t.Fatal(err)
		}
		b, err := cat.boardIndex(rec.ID, &row, nil)
		if err != nil {
			t.Fatal(err)
		}
		b.mu.RUnlock()
		return b
	}
	held := func() []string {
		var keys []string
		for ref := range cat.index.boards {
			keys = append(keys, ref.key)
		}
		slices.Sort(keys)
		return keys
	}
	read("a")
	read("b")
	if got := held(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("indexes held after reading a then b: %v, want [b]", got)
	}
	post("a")
	if b := read("a"); b.size.Load() != 3 {
		t.Fatalf("board a read again: %d posts, want 3", b.size.Load())
	}
	if got := held(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("indexes held after reading a again: %v, want [a]", got)
	}
}

// TestDeletedPostStaysDeadForTheReplayWindow: a post creation may carry
// a time up to the replay window ahead of the entry's (its node's clock
// runs ahead), so its tombstone outlives that time by the window too: a
// copy of the creation replayed after the sweep of the deletion's first
// ten minutes is still refused.
func TestDeletedPostStaysDeadForTheReplayWindow(t *testing.T) {
	t.Parallel()
	cat, p, g := memCluster(t, Private)
	t0 := time.Now()
	at := func(d time.Duration, a BoardAction) (Signed, error) {
		t.Helper()
		g.cl, _ = cat.Get(g.cl.ID)
		if a.At == 0 {
			a.At = t0.Add(d).UnixMilli()
		}
		a.Rev = g.cl.Rev
		signed, err := g.sign(a)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cmdlog.ResultAs[Result](p.Propose(context.Background(), Kind, t0.Add(d).UnixNano(), Op{Board: &signed}))
		return signed, err
	}
	on := true
	board := BoardAction{Op: ActBoardCreate, Board: g.boardKey("b")}
	g.pack(&board, sealBoard, boardContent{Slug: "b", Kind: "generic"})
	post := BoardAction{Op: ActPostCreate, Board: board.Board, Post: newPostID(), TTL: "7d", At: t0.Add(9 * time.Minute).UnixMilli()}
	g.pack(&post, sealPost, postContent{Author: "a", Title: "t"})
	var created Signed
	for i, a := range []BoardAction{{Op: ActPatchCluster, Boards: &on}, board, post,
		{Op: ActPostDelete, Board: board.Board, Post: post.Post, ByAuthor: true}} {
		signed, err := at(time.Duration(i)*time.Millisecond, a)
		if err != nil {
			t.Fatalf("%s: %v", a.Op, err)
		}
		if a.Op == ActPostCreate {
			created = signed
		}
	}
	sweep := t0.Add(12 * time.Minute)
	refs, err := cat.duePosts(sweep, purgeBatch)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) > 0 {
		if _, err := p.Propose(context.Background(), Kind, sweep.UnixNano(), Op{ExpirePosts: refs}); err != nil {
			t.Fatal(err)
		}
	}
	replay := t0.Add(18 * time.Minute)
	_, err = cmdlog.ResultAs[Result](p.Propose(context.Background(), Kind, replay.UnixNano(), Op{Board: &created}))
	if !errors.Is(err, ErrPostExists) {
		t.Fatalf("a deleted post's creation replayed 18 minutes on (9 from its own time): %v, want post_exists", err)
	}
}

// TestMisSealedPrivatePostIsNeverShown: a member's software may seal
// anything as a post (the directory cannot read it): content that does
// not open as a valid post is never listed, and its id answers 404, not
// a server error; only the admin may delete it. A board frame sealed
// wrong (another board's slug, a bad title) is not sent to sockets.
func TestMisSealedPrivatePostIsNeverShown(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v := h.create(`{}`)
	id, token, admin := v["cluster_id"].(string), v["token"].(string), v["admin_token"].(string)
	base := "/v1/clusters/" + id
	for _, req := range [][3]string{{"PATCH", "", `{"boards_enabled":true}`}, {"POST", "/boards", `{"slug":"b"}`}} {
		if st, v := h.call(req[0], base+req[1], req[2], "x-cluster-token", admin); st/100 != 2 {
			t.Fatalf("%s %s: %d %v", req[0], req[1], st, v)
		}
	}
	watch := h.dial(id, vals("agent", "w", "token", token)).listen()
	watch.next(KindWelcome)
	cl, _ := h.cat.Get(id)
	g := &signer{cl: cl, member: token, seal: newSealer(id, token)}
	var bad []string
	for i, content := range []string{`not json`, `{"author":"a","title":"","body":"no title"}`, `{"author":"a b","title":"t"}`} {
		a := BoardAction{Op: ActPostCreate, Board: g.boardKey("b"), Post: newPostID(), TTL: "7d", At: time.Now().UnixMilli(),
			Sealed: sealString(g.seal, sealPost, []byte(content))}
		// and frames no member's node would seal: another board's slug,
		// an invalid one, a title out of bounds
		g.frame(&a, []frameInfo{{Slug: "other", Title: "t"}, {Slug: "B!"}, {Slug: "b", Title: strings.Repeat("x", maxTitle+1)}}[i])
		signed, err := g.sign(a)
		if err == nil {
			_, err = propose(h.svc.cfg.Log, Op{Board: &signed, Quota: &Quota{}})
		}
		if err != nil {
			t.Fatal(err)
		}
		bad = append(bad, a.Post)
	}
	tok := []string{"x-cluster-token", token}
	if st, v := h.call("POST", base+"/boards/b/posts?agent=alice", `{"title":"fine","ttl":"7d"}`, tok...); st != 201 {
		t.Fatalf("a valid post: %d %v", st, v)
	}
	if f := watch.next(KindBoard); f["slug"] != "b" || f["title"] != "fine" {
		t.Fatalf("the first board frame is %v, want the valid post's (the mis-sealed ones' frames are dropped)", f)
	}
	if st, v := h.call("GET", base+"/boards/b/posts", "", tok...); st != 200 || v["count"] != float64(1) {
		t.Fatalf("list: %d %v, want only the valid post", st, v)
	}
	for _, pid := range bad {
		if st, v := h.call("GET", base+"/boards/b/posts/"+pid, "", tok...); st != 404 || v["code"] != "post_not_found" {
			t.Fatalf("a mis-sealed post by id: %d %v, want 404 post_not_found", st, v)
		}
		if st, v := h.call("DELETE", base+"/boards/b/posts/"+pid+"?agent=a", "", tok...); st != 403 || v["code"] != "not_author" {
			t.Fatalf("a mis-sealed post deleted by a member: %d %v, want 403 not_author", st, v)
		}
		if st, v := h.call("DELETE", base+"/boards/b/posts/"+pid, "", "x-cluster-token", admin); st != 200 {
			t.Fatalf("a mis-sealed post deleted by the admin: %d %v", st, v)
		}
	}
}

// memCluster is a catalog holding a new cluster of visibility vis, and a
// signer with the cluster's credentials.
func memCluster(t *testing.T, vis string) (*Catalog, cmdlog.Proposer, *signer) {
	t.Helper()
	cat, p := memCatalog(t)
	rec, s, token, admin, err := newCluster(vis, Meta{Name: "club"}, 1)
	if err == nil {
		_, err = propose(p, Op{Create: &s})
	}
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := cat.Get(rec.ID)
	g := &signer{cl: cl, admin: admin}
	if vis != Public {
		g.member, g.seal = token, newSealer(rec.ID, token)
	}
	return cat, p, g
}

// TestDuePostsWhateverTheirTime: an expiry's key holds its time as 8 bytes,
// which may include a '/' (some nanosecond times do, such as the test
// clock's on 2026-11-28): the sweep still reads the post it names.
func TestDuePostsWhateverTheirTime(t *testing.T) {
	t.Parallel()
	cat, _ := memCatalog(t)
	until := int64(0x182F2F002F00002F)
	if err := cat.db.Update(func(tx *store.Txn) error {
		return tx.Set(expiryKey(until, "c1", "p1"), []byte("b1"))
	}); err != nil {
		t.Fatal(err)
	}
	refs, err := cat.duePosts(time.Unix(0, until), purgeBatch)
	want := []PostRef{{C: "c1", Post: "p1", Until: until, Board: "b1"}}
	if err != nil || !reflect.DeepEqual(refs, want) {
		t.Fatalf("due: %+v, %v; want %+v", refs, err, want)
	}
}
