package wall

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/storetest"
)

func TestRecordsAreSelfCertifying(t *testing.T) {
	t.Parallel()
	rec, signed, token, admin, err := newCluster(Private, Meta{Name: "secret club"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenRecord(signed)
	if err != nil || got.ID != rec.ID || got.Meta != nil || got.Sealed == "" {
		t.Fatalf("OpenRecord: %+v, %v", got, err)
	}
	if strings.Contains(signed.Body, "secret club") {
		t.Fatal("a private cluster's name is readable in its record")
	}
	// Credentials: the member token, and the admin token through the wrap.
	if tok, ok := got.memberToken(token); !ok || tok != token {
		t.Fatal("member token refused")
	}
	if tok, ok := got.memberToken(admin); !ok || tok != token {
		t.Fatal("admin token does not unwrap the member token")
	}
	_, _, otherTok, otherAdmin, _ := newCluster(Private, Meta{}, 1)
	for _, bad := range []string{"", otherTok, otherAdmin, "ck_" + token[3:10], admin + "x"} {
		if _, ok := got.memberToken(bad); ok {
			t.Fatalf("credential %q accepted", bad)
		}
	}
	if !isAdminOf(admin, rec.ID) || isAdminOf(otherAdmin, rec.ID) || isAdminOf(token, rec.ID) {
		t.Fatal("isAdminOf")
	}

	// Forgeries: a changed body, a record of another admin under this id.
	tampered := signed
	tampered.Body = strings.Replace(signed.Body, `"private"`, `"public"`, 1)
	if _, err := OpenRecord(tampered); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("tampered record: %v", err)
	}
	// A name that is not UTF-8, signed by the admin: refused rather than
	// opened with U+FFFD in its place.
	pubRec, _, _, pubAdmin, _ := newCluster(Public, Meta{Name: "ok"}, 1)
	body, _ := json.Marshal(pubRec)
	body = bytes.Replace(body, []byte(`"name":"ok"`), []byte("\"name\":\"o\xffk\""), 1)
	badText := Signed{Body: string(body), Sig: base64.StdEncoding.EncodeToString(ed25519.Sign(adminKey(pubAdmin), append([]byte(recordTag), body...)))}
	if _, err := OpenRecord(badText); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("record whose name is not UTF-8: %v", err)
	}
	other, otherSigned, _, _, _ := newCluster(Public, Meta{Name: "x"}, 1)
	swapped := otherSigned
	swapped.Body = strings.Replace(otherSigned.Body, other.ID, rec.ID, 1)
	if _, err := OpenRecord(swapped); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("record claiming another id: %v", err)
	}
}

func TestSealer(t *testing.T) {
	t.Parallel()
	a, b := newSealer("c_1", "ck_a"), newSealer("c_1", "ck_b")
	box := a.seal("topic", []byte("hello"))
	if got, err := a.open("topic", box); err != nil || string(got) != "hello" {
		t.Fatalf("open: %q %v", got, err)
	}
	if _, err := b.open("topic", box); err == nil {
		t.Fatal("another token opened the box")
	}
	if _, err := a.open("roster request", box); err == nil {
		t.Fatal("a box opened for another purpose")
	}
	if _, err := newSealer("c_2", "ck_a").open("topic", box); err == nil {
		t.Fatal("a box opened for another cluster")
	}
}

func memCatalog(t *testing.T) (*Catalog, cmdlog.Proposer) {
	t.Helper()
	log := storetest.Log(t)
	return NewCatalog(log), cmdlog.NewLocal(log)
}

func propose(p cmdlog.Proposer, op Op) (Result, error) {
	return cmdlog.ResultAs[Result](p.Propose(context.Background(), Kind, time.Now().UnixNano(), op))
}

func TestCatalog(t *testing.T) {
	t.Parallel()
	cat, p := memCatalog(t)
	var deleted []string
	cat.OnDelete(func(id string) { deleted = append(deleted, id) })
	create := func(vis, name string) (*Record, Signed, string) {
		t.Helper()
		rec, s, _, admin, err := newCluster(vis, Meta{Name: name}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := propose(p, Op{Create: &s}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return rec, s, admin
	}
	slug := func(id string) string {
		cl, err := cat.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		return cl.Slug
	}
	a, aSigned, aAdmin := create(Public, "Night Market!")
	b, _, _ := create(Public, "night  market")
	c, _, _ := create(Public, "Lobby")
	d, _, _ := create(Public, "")
	priv, _, _ := create(Private, "hidden")
	for id, want := range map[string]string{a.ID: "night-market", b.ID: "night-market-2", c.ID: "lobby-2", d.ID: "cluster", priv.ID: ""} {
		if got := slug(id); got != want {
			t.Errorf("slug of %s = %q, want %q", id, got, want)
		}
	}
	if _, err := propose(p, Op{Create: &aSigned}); !errors.Is(err, ErrClusterExists) {
		t.Fatalf("same record twice: %v", err)
	}
	// Lookup by slug or id finds public clusters only.
	if cl, err := cat.Lookup("night-market-2"); err != nil || cl.ID != b.ID {
		t.Fatalf("lookup by slug: %v %v", cl, err)
	}
	if _, err := cat.Lookup(priv.ID); !errors.Is(err, ErrClusterNotFound) {
		t.Fatalf("private lookup: %v", err)
	}
	if cl, err := cat.Lookup(LobbySlug); err != nil || cl.ID != LobbyID {
		t.Fatalf("lobby: %v %v", cl, err)
	}
	var listed []string
	cat.Public(func(cl *Cluster) bool { listed = append(listed, cl.Slug); return true })
	if strings.Join(listed, ",") != "lobby,cluster,lobby-2,night-market,night-market-2" {
		t.Fatalf("catalog order: %v", listed)
	}

	// Deletion: only a valid admin signature; then the id is gone for good.
	forged, _ := signAction(newSecret(adminPrefix), ActionDelete, a.ID, 2)
	if _, err := propose(p, Op{Delete: &forged}); !errors.Is(err, ErrBadAction) {
		t.Fatalf("delete signed by another key: %v", err)
	}
	del, _ := signAction(aAdmin, ActionDelete, a.ID, 2)
	if _, err := propose(p, Op{Delete: &del}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Get(a.ID); !errors.Is(err, ErrClusterNotFound) || len(deleted) != 1 || deleted[0] != a.ID {
		t.Fatalf("after delete: %v, listeners saw %v", err, deleted)
	}
	if _, err := propose(p, Op{Delete: &del}); !errors.Is(err, ErrClusterNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := propose(p, Op{Create: &aSigned}); !errors.Is(err, ErrClusterExists) {
		t.Fatalf("re-creating a deleted cluster: %v", err)
	}
	if _, err := cat.Lookup("night-market"); !errors.Is(err, ErrClusterNotFound) {
		t.Fatalf("the deleted cluster's slug still resolves: %v", err)
	}
	if e, _, _ := create(Public, "Night Market"); slug(e.ID) != "night-market-3" {
		t.Fatalf("a slug was reused: %s", slug(e.ID))
	}
}
