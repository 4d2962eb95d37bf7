package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/wall"
)

// loopbackAddr reads, from a starting node's output, its libp2p address
// on loopback TCP.
func loopbackAddr(t *testing.T, out interface {
	Scan() bool
	Text() string
}) string {
	t.Helper()
	for out.Scan() {
		if a, ok := strings.CutPrefix(strings.TrimSpace(out.Text()), "addr  "); ok && strings.HasPrefix(a, "/ip4/127.0.0.1/tcp/") {
			return a
		}
	}
	t.Fatal("node printed no loopback address")
	return ""
}

// TestKilledNodeMembersGoOffline: when a node is killed (SIGKILL, no
// goodbye), the members it served go offline for everyone else within the
// presence timeout.
func TestKilledNodeMembersGoOffline(t *testing.T) { // not parallel: it runs processes, against real-time bounds
	bin := buildMesh(t)
	loop := []string{"--listen", "/ip4/127.0.0.1/tcp/0"}
	_, _, bootOut := startMeshNode(t, bin, append(loop, "--data", filepath.Join(t.TempDir(), "boot"))...)
	boot := loopbackAddr(t, bootOut)
	bURL, _, _ := startMeshNode(t, bin, append(loop, "--data", filepath.Join(t.TempDir(), "b"), "--bootstrap", boot)...)
	cURL, cProc, _ := startMeshNode(t, bin, append(loop, "--data", filepath.Join(t.TempDir(), "c"), "--bootstrap", boot)...)

	var id string
	testkit.Eventually(t, 30*time.Second, func() bool { // b reaches the directory moments after it starts
		resp, err := http.Post(bURL+"/v1/clusters", "application/json", strings.NewReader(`{"visibility":"public"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct {
			ID string `json:"cluster_id"`
		}
		json.NewDecoder(resp.Body).Decode(&v)
		id = v.ID
		return id != ""
	}, "cannot create a cluster on b")
	ws := func(base, agent string) *wall.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := wall.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/v1/clusters/"+id+"/ws?agent="+agent)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	next := func(c *wall.Client, kind string, within time.Duration) wall.Frame {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		for {
			f, err := c.Next(ctx)
			if err != nil {
				t.Fatalf("waiting for %s: %v", kind, err)
			}
			if f.Kind == kind {
				return f
			}
		}
	}
	alice := ws(bURL, "alice")
	next(alice, wall.KindWelcome, 10*time.Second)
	bob := ws(cURL, "bob")
	next(bob, wall.KindWelcome, 10*time.Second)
	if p := next(alice, wall.KindPresence, 10*time.Second); p.Agent != "bob" || p.Status != "online" {
		t.Fatalf("alice saw %+v", p)
	}

	cProc.Process.Kill()
	killed := time.Now()
	bound := wall.DefaultPresenceTimeout + 2*wall.DefaultBeatInterval
	p := next(alice, wall.KindPresence, bound+5*time.Second)
	if p.Agent != "bob" || p.Status != "offline" {
		t.Fatalf("after the kill alice saw %+v", p)
	}
	t.Logf("bob went offline %s after his node was killed (bound %s)", time.Since(killed).Round(100*time.Millisecond), bound)
}
