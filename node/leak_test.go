package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/testkit"
)

// refuseProto makes n reset every stream of proto: the libp2p call of
// another node to it fails.
func refuseProto(n *Node, proto string) {
	n.host.Libp2p().SetStreamHandler(protocol.ID(proto), func(s network.Stream) { s.Reset() })
}

// assertNoCause fails unless raw, an answer to a failed upstream call, is
// 503 directory_unavailable with its fixed detail and names none of the
// internals in secrets.
func assertNoCause(t *testing.T, what string, st int, raw []byte, detail string, secrets ...string) {
	t.Helper()
	if st != http.StatusServiceUnavailable || !bytes.Contains(raw, []byte(`"code":"directory_unavailable"`)) ||
		!bytes.Contains(raw, []byte(`"detail":"`+detail+`"`)) {
		t.Errorf("%s: %d %s, want 503 directory_unavailable with detail %q", what, st, raw, detail)
	}
	for _, s := range secrets {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("%s: the answer names %q: %s", what, s, raw)
		}
	}
}

// TestNoUpstreamCauseInAnswers: when a libp2p call behind a request
// fails, the client gets the fixed detail of directory_unavailable; the
// peer, its addresses, the protocol and the dial error go to the log only.
func TestNoUpstreamCauseInAnswers(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	var log testkit.Buffer
	b := m.joinWith(func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
	bootPeer := m.boot.host.ID().String()
	secrets := []string{bootPeer, "/ip4/", "127.0.0.1", "/mesh/", "reset"}

	cl := createCluster(t, b, `{}`)

	// A write forwarded to the directory (registry) and a proposal (wall).
	refuseProto(m.boot, forwardProto)
	refuseProto(m.boot, forwardSessionProto)
	resp, raw := send(t, b, "POST", "/v1/agents/register", `{"agent_id":"lost","capabilities":[],"endpoint":"https://l.example"}`)
	assertNoCause(t, "forwarded write", resp.StatusCode, raw, errNoDirectory.Detail, secrets...)
	refuseProto(m.boot, proposeProto)
	resp, raw = send(t, b, "POST", "/v1/clusters", `{}`)
	assertNoCause(t, "proposal", resp.StatusCode, raw, errNoDirectory.Detail, secrets...)
	if !strings.Contains(log.String(), bootPeer) {
		t.Errorf("the causes were not logged:\n%s", log.String())
	}

	// A history read on a node whose directory is gone: libp2p dials it
	// and fails, naming its addresses.
	m.boot.Close()
	resp, raw = send(t, b, "GET", "/v1/clusters/"+cl["cluster_id"].(string)+"/history", "", "X-Cluster-Token", cl["admin_token"].(string))
	assertNoCause(t, "history", resp.StatusCode, raw, "the directory node cannot be reached; retry later", secrets...)

	// /health says that catching up fails, not why.
	if b.replica.Sync(context.Background()) == nil {
		t.Fatal("a catch-up with the directory gone worked")
	}
	resp, raw = send(t, b, "GET", "/health", "")
	if !bytes.Contains(raw, []byte(`"error":"`+errCatchUp+`"`)) {
		t.Errorf("health: %s, want directory.error %q", raw, errCatchUp)
	}
	for _, s := range []string{"dial", "reset", "/mesh/"} { // it names peers and this node's addresses on purpose
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("health names %q: %s", s, raw)
		}
	}

	// A change of the quorum's members that the quorum did not take.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/v1/admin/quorum/members", nil)
	dialErr := fmt.Errorf("failed to dial %s: all dials failed: [/ip4/127.0.0.1/tcp/4001] %w", bootPeer, errors.New("connection refused"))
	httpx.WriteError(b.log, rec, req, b.changeMembers(rec, req, func(context.Context) error { return dialErr }))
	assertNoCause(t, "quorum change", rec.Code, rec.Body.Bytes(), errQuorumChange.Detail, secrets...)
}
