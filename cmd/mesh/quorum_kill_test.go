package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
)

// getStatusJSON is GET url: its status and JSON body (0, nil when unreachable).
func getStatusJSON(url string) (int, map[string]any) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var v map[string]any
	json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v
}

// TestQuorumLeaderKilledUnderLoad: three `mesh node` processes run the
// directory as a quorum, an ordinary node in front. Under a steady write
// load the leader is killed (SIGKILL): writes resume with a new leader, no
// acknowledged write is lost on any node, and the killed node, started
// again, rejoins and catches up.
func TestQuorumLeaderKilledUnderLoad(t *testing.T) { // not parallel: it runs processes, against real-time bounds
	bin := buildMesh(t)
	q := startMeshQuorum(t, bin, 3, "--raft-heartbeat-timeout", "300ms", "--raft-election-timeout", "300ms", "--raft-leader-lease", "250ms")
	urls := q.urls
	ordURL, _, _ := startMeshNode(t, bin, "--listen", "/ip4/127.0.0.1/tcp/0", "--data", t.TempDir(),
		"--bootstrap", strings.Join(q.addrs, ","))
	leader := q.leader
	lead := leader([]int{0, 1, 2})

	// A steady load through the ordinary node and through each member.
	var mu sync.Mutex
	var acked []string
	var lastAck time.Time
	stop := make(chan struct{})
	var wg sync.WaitGroup
	load := func(name, base string) {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("%s-%d", name, i)
			resp, err := http.Post(base+"/v1/agents/register", "application/json",
				strings.NewReader(`{"agent_id":"`+id+`","capabilities":["x"],"endpoint":"https://`+id+`.example"}`))
			if err != nil {
				time.Sleep(20 * time.Millisecond) // the killed member's own HTTP
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				mu.Lock()
				acked, lastAck = append(acked, id), time.Now()
				mu.Unlock()
			}
		}
	}
	wg.Add(4)
	go load("ord", ordURL)
	for i := range 3 {
		go load("m"+strconv.Itoa(i), urls[i])
	}
	countAcked := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	testkit.Eventually(t, 20*time.Second, func() bool { return countAcked() >= 50 }, "the load made fewer than 50 writes")

	q.kill(lead)
	killed := time.Now()
	var rest []int
	for i := range 3 {
		if i != lead {
			rest = append(rest, i)
		}
	}
	newLead := leader(rest)
	before := countAcked()
	testkit.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return lastAck.After(killed) && len(acked) > before
	}, "writes did not resume after the leader was killed")
	mu.Lock()
	t.Logf("leader %d killed; %d leads; writes resumed %s after the kill", lead, newLead, lastAck.Sub(killed).Round(time.Millisecond))
	mu.Unlock()
	target := countAcked() + 50
	testkit.Eventually(t, 30*time.Second, func() bool { return countAcked() >= target },
		"writes stalled under the new leader: fewer than %d acknowledged", target)
	close(stop)
	wg.Wait()

	// The killed member comes back with its data and catches up.
	q.start(lead)
	_, h := getStatusJSON(urls[newLead] + "/health")
	head := h["directory"].(map[string]any)["seq"].(float64)
	for _, u := range append(urls, ordURL) {
		testkit.Eventually(t, 30*time.Second, func() bool {
			_, h := getStatusJSON(u + "/health")
			return h != nil && h["directory"].(map[string]any)["seq"].(float64) >= head
		}, "%s never caught up to seq %v", u, head)
	}
	// Every acknowledged write is on every node.
	for _, u := range append(urls, ordURL) {
		for _, id := range acked {
			if st, _ := getStatusJSON(u + "/v1/agents/" + id); st != http.StatusOK {
				t.Fatalf("acknowledged write %s missing on %s: %d", id, u, st)
			}
		}
	}
	t.Logf("%d acknowledged writes, all on every node", len(acked))

	// mesh quorum list, through an ordinary node, names the leader and the
	// three voters; remove takes a member's key.
	out, err := exec.Command(bin, "quorum", "list", "--json", "--node", ordURL).CombinedOutput()
	var view struct {
		Leader  string `json:"leader"`
		Members []struct {
			PeerID string `json:"peer_id"`
			Voter  bool   `json:"voter"`
		} `json:"members"`
	}
	if err != nil || json.Unmarshal(out, &view) != nil || len(view.Members) != 3 || view.Leader == "" {
		t.Fatalf("mesh quorum list: %v %s", err, out)
	}
	stranger := filepath.Join(t.TempDir(), "stranger.key")
	identity.WriteKey(stranger, identity.GenerateKey())
	victim := q.peerID(lead)
	if out, err := exec.Command(bin, "quorum", "remove", victim, "--node", ordURL, "--key", stranger).CombinedOutput(); err == nil || !strings.Contains(string(out), "not_admin") {
		t.Fatalf("a stranger's key removed a member: %v %s", err, out)
	}
	out, err = exec.Command(bin, "quorum", "remove", victim, "--json", "--node", ordURL, "--key", filepath.Join(q.dirs[newLead], "node.key")).CombinedOutput()
	if err != nil || strings.Count(string(out), "peer_id") != 2 {
		t.Fatalf("mesh quorum remove: %v %s", err, out)
	}
}
