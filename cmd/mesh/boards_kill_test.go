package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/testkit"
)

// send is a request with a JSON body (and a cluster token, if any): its
// status and JSON answer.
func send(t *testing.T, method, url, body, token string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("X-Cluster-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v
}

// TestBoardsSurviveKill: a post answered by a node is kept when that
// node and the directory are killed (SIGKILL) right after the answer:
// both serve it when they come back.
func TestBoardsSurviveKill(t *testing.T) { // not parallel: it runs processes, against real-time bounds
	bin := buildMesh(t)
	bootListen := "/ip4/127.0.0.1/tcp/" + strconv.Itoa(testkit.Port(t))
	bootDir, bDir := filepath.Join(t.TempDir(), "boot"), filepath.Join(t.TempDir(), "b")
	_, bootProc, bootOut := startMeshNode(t, bin, "--listen", bootListen, "--data", bootDir)
	boot := loopbackAddr(t, bootOut)
	bArgs := []string{"--listen", "/ip4/127.0.0.1/tcp/0", "--data", bDir, "--bootstrap", boot}
	bURL, bProc, _ := startMeshNode(t, bin, bArgs...)

	var cl map[string]any
	testkit.Eventually(t, 30*time.Second, func() bool { // b reaches the directory moments after it starts
		_, cl = send(t, "POST", bURL+"/v1/clusters", `{"visibility":"public"}`, "")
		return cl["cluster_id"] != nil
	}, "cannot create a cluster on b")
	path, admin := "/v1/clusters/"+cl["cluster_id"].(string), cl["admin_token"].(string)
	for _, w := range [][3]string{{"PATCH", "", `{"boards_enabled":true}`}, {"POST", "/boards", `{"slug":"kept"}`}} {
		if st, v := send(t, w[0], bURL+path+w[1], w[2], admin); st >= 300 {
			t.Fatalf("%s %s: %d %v", w[0], w[1], st, v)
		}
	}
	st, v := send(t, "POST", bURL+path+"/boards/kept/posts?agent=alice", `{"title":"survivor","ttl":"forever"}`, "")
	if st != 201 {
		t.Fatalf("post: %d %v", st, v)
	}
	bProc.Process.Kill()
	bootProc.Process.Kill()
	bProc.Wait()
	bootProc.Wait()

	id := v["post"].(map[string]any)["id"].(string)
	bootURL, _, _ := startMeshNode(t, bin, "--listen", bootListen, "--data", bootDir)
	bURL, _, _ = startMeshNode(t, bin, bArgs...)
	for _, u := range []string{bootURL, bURL} {
		if st, v := send(t, "GET", u+path+"/boards/kept/posts/"+id, "", ""); st != 200 || v["post"].(map[string]any)["title"] != "survivor" {
			t.Fatalf("after the kill, %s answered %d %v", u, st, v)
		}
	}
}
