package registryapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/testkit"
)

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		body string
		want float64
	}{
		{`142.5`, 142.5}, {` {"usd": 99} `, 99}, {`{"usd":1e2,"other":1}`, 100},
		{`0`, 0}, {`-3`, 0}, {`{"price": 5}`, 0}, {`"142"`, 0}, {`{"usd":"1"}`, 0}, {``, 0}, {`nan`, 0},
	} {
		got, err := parseRate([]byte(c.body))
		if (err == nil) != (c.want > 0) || got != c.want {
			t.Errorf("%q: %v %v, want %v", c.body, got, err, c.want)
		}
	}
}

// TestSolUSDPolled: the rate follows the URL; a bad answer or one that
// does not come in time leaves the last good rate.
func TestSolUSDPolled(t *testing.T) {
	var mu sync.Mutex
	answer := "150.25"
	var hang atomic.Bool
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer polls.Add(1)
		if hang.Load() {
			<-r.Context().Done()
			return
		}
		mu.Lock()
		defer mu.Unlock()
		w.Write([]byte(answer))
	}))
	defer srv.Close()
	s := NewSolUSD(SolUSDConfig{URL: srv.URL, Interval: 5 * time.Millisecond, Timeout: 50 * time.Millisecond})
	if _, ok := s.Rate(time.Now()); ok {
		t.Fatal("a rate before any poll")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitRate := func(want float64) {
		t.Helper()
		testkit.Eventually(t, 5*time.Second, func() bool { r, _ := s.Rate(time.Now()); return r.USD == want }, "rate never %v", want)
	}
	morePolls := func() {
		t.Helper()
		n := polls.Load()
		testkit.Eventually(t, 5*time.Second, func() bool { return polls.Load() >= n+3 }, "no more polls")
	}
	waitRate(150.25)
	if r, _ := s.Rate(time.Now()); r.Source != "url" {
		t.Fatalf("source %q", r.Source)
	}
	mu.Lock()
	answer = "not a number"
	mu.Unlock()
	hang.Store(true)
	morePolls()
	hang.Store(false)
	morePolls()
	waitRate(150.25) // neither the hang nor the garbage replaced it
	mu.Lock()
	answer = `{"usd": 151}`
	mu.Unlock()
	waitRate(151)
}
