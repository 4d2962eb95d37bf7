package node

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/loadgen"
)

// registerWithCards registers n agents through node, each signed by a key
// of its own and handing over a full card of about size bytes; it returns
// the cards' bytes.
func registerWithCards(t testing.TB, node *Node, prefix string, n, size int) int64 {
	t.Helper()
	words := loadgen.NewWords(uint64(len(prefix)))
	var total int64
	for i := range n {
		id := fmt.Sprintf("%s-%05d", prefix, i)
		card := words.Card(id, size)
		total += int64(len(card))
		body, sig := loadgen.Registration(id, identity.GenerateKey(), card, node.cfg.Now())
		if st, v := call(t, node, "POST", loadgen.RegisterPath, string(body), identity.SigHeaderName, sig); st != 201 {
			t.Fatalf("register %s: %d %v", id, st, v)
		}
	}
	return total
}

// readAgents reads each of the n agents registered under prefix from
// node: its record and its public card, as clients and pages do.
func readAgents(t testing.TB, node *Node, prefix string, n int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("%s-%05d", prefix, i)
		for _, path := range []string{"/v1/agents/" + id, "/agent/" + id} {
			if st, v := call(t, node, "GET", path, "", "Accept", "application/json"); st != 200 {
				t.Fatalf("GET %s: %d %v", path, st, v)
			}
		}
	}
}

// peakHeap samples the live heap (in use after a collection) every
// 50 ms, or less often when a sample takes long, until stop is called,
// which returns the highest reading.
func peakHeap() (stop func() uint64) {
	done := make(chan struct{})
	peak := make(chan uint64)
	go func() {
		var hi uint64
		for {
			start := time.Now()
			hi = max(hi, heapInUse())
			// A sample is two full collections: at most a fifth of the
			// time goes to them, so that sampling does not starve what it
			// measures (under -race each sample outlasted the 50 ms, the
			// collections ran back to back, and the late joiner caught up
			// too slowly for its minute).
			wait := max(50*time.Millisecond, 4*time.Since(start))
			select {
			case <-done:
				peak <- hi
				return
			case <-time.After(wait):
			}
		}
	}()
	return func() uint64 { close(done); return <-peak }
}

// mappedResident is the resident bytes of the files under dir that this
// process maps (a node's stores: Badger writes and reads its value logs
// and tables through memory maps), from /proc/self/smaps: what ps counts
// of them in the node's resident set.
func mappedResident(t testing.TB, dir string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatalf("the resident set of mapped files: %v", err)
	}
	defer f.Close()
	var total int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) > 0 && !strings.HasSuffix(fields[0], ":"): // a mapping
			in = len(fields) >= 6 && strings.HasPrefix(fields[5], dir+"/")
		case in && len(fields) == 3 && fields[0] == "Rss:":
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatalf("smaps: %q", sc.Text())
			}
			total += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}
