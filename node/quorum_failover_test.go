package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
)

// forwardAttempt sends, from n to the peer that leads q, an attempt of
// the write named by secret over the forward stream, as forward does, and
// returns the answer's status and body.
func forwardAttempt(t *testing.T, n *Node, q *quorumMesh, secret []byte, method, path, body string, hdr ...string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set(writeHeader, hex.EncodeToString(secret))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	var buf bytes.Buffer
	req.Write(&buf)
	leader := q.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := n.host.Request(ctx, leader.PeerID(), forwardProto, buf.Bytes(), maxForwardResp)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	var v map[string]any
	json.Unmarshal(b, &v)
	return resp.StatusCode, v
}

// TestAWriteSentAgainLandsOnce: a forwarding node that lost the answer to
// a write sends it again, to the leader then, maybe another: each write
// (an unsigned registration, whose api key the directory draws; one
// signed with a Mesh-Sig, whose nonce is single use) is applied once, and
// every attempt is answered as the first was, also by a leader elected
// after the first attempt.
func TestAWriteSentAgainLandsOnce(t *testing.T) { // not parallel: its Raft elections run in real time
	q := newQuorumMesh(t, 3, nil)
	ord := q.join(0, 1, 2)
	key := identity.GenerateKey()
	signed, _ := json.Marshal(map[string]any{"agent_id": "signed", "capabilities": []string{"x"},
		"endpoint": "https://signed.example", "pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))})
	sig := identity.Sign(key, "POST", "/v1/agents/register", signed, q.clock.Now())
	writes := []struct {
		secret []byte
		body   string
		hdr    []string
	}{
		{bytes.Repeat([]byte{1}, 32), `{"agent_id":"plain","capabilities":["x"],"endpoint":"https://plain.example"}`, nil},
		{bytes.Repeat([]byte{2}, 32), string(signed), []string{identity.SigHeaderName, sig}},
	}
	first := make([]map[string]any, len(writes))
	for i, w := range writes {
		st, v := forwardAttempt(t, ord, q, w.secret, "POST", "/v1/agents/register", w.body, w.hdr...)
		if st != 201 || v["api_key"] == nil {
			t.Fatalf("write %d: %d %v", i, st, v)
		}
		first[i] = v
	}
	seq := q.leader().clog.Seq()
	again := func() {
		t.Helper()
		for i, w := range writes {
			st, v := forwardAttempt(t, ord, q, w.secret, "POST", "/v1/agents/register", w.body, w.hdr...)
			if st != 201 || v["api_key"] != first[i]["api_key"] || v["registered_at"] != first[i]["registered_at"] {
				t.Fatalf("write %d sent again: %d %v, first %v", i, st, v, first[i])
			}
		}
		if l := q.leader(); l.clog.Seq() != seq || l.dir.AgentCount() != 2 {
			t.Fatalf("a write sent again was applied again: seq %d (was %d), %d agents", l.clog.Seq(), seq, l.dir.AgentCount())
		}
	}
	again()
	// The leader goes; the next one knows the writes too.
	old := q.leader()
	old.Close()
	for i, m := range q.members {
		if m == old {
			q.members[i] = nil
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return q.leader().clog.Seq() >= seq }, "the new leader lacks the writes")
	seq = q.leader().clog.Seq()
	again()
	// The api key drawn for the write works.
	q.boot = q.leader()
	q.token(ord, "plain", first[0]["api_key"].(string))
}
