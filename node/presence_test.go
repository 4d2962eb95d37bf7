package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/p2p/net/swarm"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
)

// TestHeartbeatsSurviveDirectoryRestart: the directory flushes heartbeats
// when it stops, so an agent that heartbeated stays online across its
// restart, and a replica that follows it learns so too.
func TestHeartbeatsSurviveDirectoryRestart(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b := m.join()
	tok := m.token(b, "a1", m.register(b, "a1", identity.GenerateKey()))
	m.clock.Advance(registryapi.DefaultOnlineWindow - time.Minute)
	if st, v := call(t, b, "POST", "/v1/agents/me/heartbeat", "", "Authorization", "Bearer "+tok); st != 200 {
		t.Fatalf("heartbeat: %d %v", st, v)
	}
	m.boot = m.restart(m.boot)
	m.clock.Advance(5 * time.Minute) // past the registration's window, within the beat's
	for _, n := range []*Node{m.boot, b} {
		testkit.Eventually(t, 20*time.Second, func() bool { _, v := call(t, n, "GET", "/v1/agents/a1", ""); return v["online"] == true },
			"a heartbeat was lost with the directory's restart (node %s)", n.URL())

	}
}

// TestHeartbeatsAnsweredWhileStoppingAreKept: every heartbeat the
// directory answers 2xx while it stops is in its store when it starts
// again: one under way over HTTP as its server stops, and those other
// nodes forward to it meanwhile (once it takes no more requests, what is
// forwarded is refused, not answered and lost). A beat was lost only when
// it came in the moments between the last flush and the end of the p2p
// host, so the node stops a few times.
func TestHeartbeatsAnsweredWhileStoppingAreKept(t *testing.T) {
	t.Parallel()
	// As deployed, every write is synced: so is the last flush.
	m := newMeshWith(t, func(c *Config) { c.SyncWrites = true })
	const forwarded = 16 // agents whose beats another node forwards
	ids, toks := make([]string, forwarded+1), make([]string, forwarded+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("beat%d", i)
		toks[i] = m.token(m.boot, ids[i], m.register(m.boot, ids[i], identity.GenerateKey()))
	}
	relay := bareHost(t, m.boot)
	for range 3 {
		answered := stopWhileBeating(t, m, relay, toks)
		cfg := m.boot.cfg
		cfg.PublicURL = ""
		m.boot = startNode(t, cfg)
		for i, id := range ids {
			_, v := call(t, m.boot, "GET", "/v1/agents/"+id, "")
			seen, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(v["last_seen"]))
			if seen.Before(answered[i]) {
				t.Fatalf("%s: last seen %v after the restart, but a beat answered 2xx said %v", id, seen, answered[i])
			}
		}
	}
}

// stopWhileBeating stops m's directory while the agents of toks beat: the
// first over HTTP, its request under way as the server stops; the others
// forwarded by relay as a replica does, each beat after the answer to the
// one before, until one is not answered 2xx. It returns the last_seen of
// each agent's last beat answered 2xx.
func stopWhileBeating(t *testing.T, m *mesh, relay *p2p.Host, toks []string) []time.Time {
	t.Helper()
	n := m.boot
	var mu sync.Mutex
	answered := make([]time.Time, len(toks))
	answer := func(i int, body io.Reader) {
		var v struct {
			LastSeen time.Time `json:"last_seen"`
		}
		if err := json.NewDecoder(body).Decode(&v); err != nil {
			t.Error(err)
		}
		mu.Lock()
		answered[i] = v.LastSeen
		mu.Unlock()
	}

	// The handler reads the first agent's beat's body when the server asks
	// for it (100 Continue): it is under way before the node stops.
	conn, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"status":"stopping"}`
	fmt.Fprintf(conn, "POST /v1/agents/me/heartbeat HTTP/1.1\r\nHost: mesh\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", toks[0], len(body))
	rd := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(rd, nil); err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("the heartbeat's body was not asked for: %v %v", resp, err)
	}

	at, _ := p2p.ParseAddrs(n.P2PAddrs())
	// The round before dialled this node as it stopped: the swarm backs its
	// address off, and the node restarted at it is to be dialled now.
	relay.Libp2p().Network().(*swarm.Swarm).Backoff().Clear(n.PeerID())
	if err := relay.Connect(context.Background(), at[0]); err != nil {
		t.Fatal(err)
	}
	forward := func(i int) bool {
		m.clock.Advance(time.Millisecond) // each beat of an agent later than the one before
		req := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/v1/agents/me/heartbeat"}, Host: "mesh",
			Header: http.Header{"Authorization": {"Bearer " + toks[i]}}, ProtoMajor: 1, ProtoMinor: 1}
		var buf bytes.Buffer
		req.Write(&buf)
		raw, err := relay.Request(context.Background(), n.PeerID(), forwardProto, buf.Bytes(), maxForwardResp)
		if err != nil {
			return false
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			return false
		}
		answer(i, resp.Body)
		return true
	}
	var running, done sync.WaitGroup
	for i := 1; i < len(toks); i++ {
		running.Add(1)
		done.Go(func() {
			first := forward(i)
			running.Done()
			for first && forward(i) {
			}
		})
	}
	running.Wait()

	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	testkit.Eventually(t, 10*time.Second, func() bool {
		c, err := net.Dial("tcp", n.Addr())
		if err == nil {
			c.Close()
		}
		return err != nil
	}, "the HTTP server never stopped listening")

	io.WriteString(conn, body)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the heartbeat under way as the node stopped: %v %v", resp, err)
	}
	answer(0, resp.Body)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	done.Wait()
	return answered
}
