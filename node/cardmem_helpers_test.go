package node

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/loadgen"
)

// registerWithCards registers n agents through node, each signed by a key
// of its own and handing over a full card of about size bytes, up to
// cardRequests at once; it returns the cards' bytes.
func registerWithCards(t testing.TB, node *Node, prefix string, n, size int) int64 {
	t.Helper()
	words := loadgen.NewWords(uint64(len(prefix)))
	var total int64
	cards := make([][]byte, n)
	for i := range cards {
		cards[i] = words.Card(agentName(prefix, i), size)
		total += int64(len(cards[i]))
	}
	inParallel(t, n, cardRequests, func(i int) error {
		id := agentName(prefix, i)
		body, sig := loadgen.Registration(id, identity.GenerateKey(), cards[i], node.cfg.Now())
		return wantStatus(node, "POST", loadgen.RegisterPath, string(body), 201, identity.SigHeaderName, sig)
	})
	return total
}

// readAgents reads each of the n agents registered under prefix from
// node, up to requests at once: its record and its public card, as
// clients and pages do.
func readAgents(t testing.TB, node *Node, prefix string, n, requests int) {
	t.Helper()
	inParallel(t, n, requests, func(i int) error {
		id := agentName(prefix, i)
		for _, path := range []string{"/v1/agents/" + id, "/agent/" + id} {
			if err := wantStatus(node, "GET", path, "", 200, "Accept", "application/json"); err != nil {
				return err
			}
		}
		return nil
	})
}

func agentName(prefix string, i int) string { return fmt.Sprintf("%s-%05d", prefix, i) }

// cardRequests is how many requests registerWithCards has under way at
// once: the node's work overlaps the client's round trips, on every core.
const cardRequests = 8

// inParallel calls do(i) for each i below n, at most limit at once, and
// fails t with the first error.
func inParallel(t testing.TB, n, limit int, do func(i int) error) {
	t.Helper()
	var g errgroup.Group
	g.SetLimit(limit)
	for i := range n {
		g.Go(func() error { return do(i) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// wantStatus sends a request to node, from any goroutine, and returns an
// error unless it is answered status.
func wantStatus(node *Node, method, path, body string, status int, hdr ...string) error {
	resp, raw, err := trySend(node, method, path, body, hdr...)
	if err == nil && resp.StatusCode != status {
		err = fmt.Errorf("%s %s: %d %s, want %d", method, path, resp.StatusCode, raw, status)
	}
	return err
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
