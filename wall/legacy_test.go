package wall

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/storetest"
	"github.com/agentmesh/mesh/internal/testkit"
)

// newClusterV1 makes a cluster as the release before record v2 did
// (`git show 572f1db^:wall/cluster.go`): version 1, the verifier an HKDF
// digest of the member token. Deployed logs hold such records.
func newClusterV1(t *testing.T, vis string, meta Meta) (s Signed, id, token, admin string) {
	t.Helper()
	admin, token = newSecret(adminPrefix), newSecret(tokenPrefix)
	key := adminKey(admin)
	pub := key.Public().(ed25519.PublicKey)
	rec := &Record{V: 1, ID: clusterID(pub), Admin: base64.StdEncoding.EncodeToString(pub), Visibility: vis, Created: 1}
	rec.Verifier = hex.EncodeToString(derive(token, rec.ID, "token verifier", 32))
	rec.TokenWrap = base64.StdEncoding.EncodeToString(newSealer(rec.ID, admin).seal("token wrap", []byte(token)))
	if vis == Public {
		rec.Meta = &meta
	} else {
		b, _ := json.Marshal(meta)
		rec.Sealed = base64.StdEncoding.EncodeToString(newSealer(rec.ID, token).seal("meta", b))
	}
	s, err := sign(key, recordTag, rec)
	if err != nil {
		t.Fatal(err)
	}
	return s, rec.ID, token, admin
}

func entry(t *testing.T, seq uint64, op Op) *cmdlog.Entry {
	t.Helper()
	b, err := json.Marshal(op)
	if err != nil {
		t.Fatal(err)
	}
	return &cmdlog.Entry{Seq: seq, At: time.Now().UnixNano(), Kind: Kind, Op: b}
}

// TestReplayV1Records: a fresh replica replays a log that begins with
// clusters the earlier release created (v1 records), applies what follows,
// and their tokens and admin tokens keep working.
func TestReplayV1Records(t *testing.T) {
	t.Parallel()
	log := storetest.Log(t)
	cat := NewCatalog(log)
	privV1, privID, privTok, privAdmin := newClusterV1(t, Private, Meta{Name: "old club"})
	pubV1, pubID, _, pubAdmin := newClusterV1(t, Public, Meta{Name: "old square"})
	_, v2, _, _, err := newCluster(Public, Meta{Name: "new square"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	del, _ := signAction(pubAdmin, ActionDelete, pubID, 2)
	for i, op := range []Op{{Create: &privV1}, {Create: &pubV1}, {Create: &v2}, {Delete: &del}} {
		if _, err := log.Commit(entry(t, uint64(i+1), op)); err != nil {
			t.Fatalf("entry %d: %v", i+1, err)
		}
	}
	cl, err := cat.Get(privID)
	if err != nil {
		t.Fatal(err)
	}
	for _, cred := range []string{privTok, privAdmin} {
		if tok, ok := cl.memberToken(cred); !ok || tok != privTok {
			t.Fatalf("a v1 cluster's credential %.5s… refused", cred)
		}
	}
	if _, ok := cl.memberToken(newSecret(tokenPrefix)); ok {
		t.Fatal("a v1 cluster took another token")
	}
	if cl.memberPub() != nil {
		t.Fatal("a v1 record's digest taken for a member key")
	}
	if _, err := cat.Get(pubID); !errors.Is(err, ErrClusterNotFound) {
		t.Fatalf("the deleted v1 cluster: %v", err)
	}
	if cl, err := cat.Lookup("new-square"); err != nil || cl.V != recordVersion {
		t.Fatalf("the v2 cluster after the v1 ones: %v %v", cl, err)
	}

	bad := privV1
	bad.Body = `{"v":3` + privV1.Body[len(`{"v":1`):]
	if _, err := OpenRecord(bad); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("an unknown version: %v", err)
	}
}

// TestV1ClusterOnTheWall: a v1 cluster admits sockets with its ck_ and ak_
// tokens, its history is served by the directory node (and refused,
// clearly, by the others, which cannot prove the token to it), and its
// admin token deletes it.
func TestV1ClusterOnTheWall(t *testing.T) {
	t.Parallel()
	dir := newHarness(t, nil)
	other := newHarness(t, func(c *Config) { c.Directory = dir.host.ID })
	s, id, tok, admin := newClusterV1(t, Private, Meta{Name: "old club"})
	for _, h := range []*harness{dir, other} {
		if _, err := h.svc.cfg.Log.Propose(context.Background(), Kind, time.Now().UnixNano(), Op{Create: &s}); err != nil {
			t.Fatal(err)
		}
	}
	m := dir.dial(id, vals("agent", "m", "token", tok)).listen()
	if w := m.next(KindWelcome); w["owner"] != true {
		t.Fatalf("welcome with the ck_ token: %v", w)
	}
	a := dir.dial(id, vals("agent", "a", "token", admin)).listen()
	a.next(KindWelcome)
	a.send("still works")
	if f := m.next(KindMessage); f["payload"] != "still works" {
		t.Fatalf("m got %v", f)
	}
	if _, resp, err := dir.tryDial(id, vals("agent", "x", "token", newSecret(tokenPrefix))); err == nil || resp.StatusCode != 401 {
		t.Fatalf("another token: %v %v", err, resp)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(dir.historyOf(id, admin)) == 2 }, "the directory does not serve a v1 cluster's history")
	if st, v := other.call("GET", "/v1/clusters/"+id+"/history", "", "X-Cluster-Token", tok); st != 409 || v["code"] != "history_at_directory" {
		t.Fatalf("another node's history of a v1 cluster: %d %v", st, v)
	}
	// The stream has no member key to check a reader against.
	raw := rawPeer(t, dir)
	q := historyRequest{Op: historyRead, Cluster: id, Limit: 10}
	q.sign(memberKey(id, tok), raw.ID(), time.Now())
	b, _ := json.Marshal(q)
	if resp, err := raw.Request(context.Background(), dir.host.ID(), historyProto, b, maxHistoryResp); err == nil {
		t.Fatalf("a stream read of a v1 cluster's history answered %q", resp)
	}
	if st, v := dir.call("DELETE", "/v1/clusters/"+id, "", "X-Cluster-Token", admin); st != 200 {
		t.Fatalf("delete with the ak_ token: %d %v", st, v)
	}
	if f := m.next(KindClosed); f["reason"] != causeDeleted.reason {
		t.Fatalf("closed frame: %v", f)
	}
}
