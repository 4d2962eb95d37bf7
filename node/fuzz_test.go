package node

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/storetest"
)

// FuzzServeForward: a forwarded request is untrusted bytes from a peer. Any
// input yields a well-formed HTTP response, never a 5xx or a panic.
func FuzzServeForward(f *testing.F) {
	f.Add([]byte("POST /v1/agents/register HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n{\"agent_id\":\"f\"}"))
	f.Add([]byte("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte("GARBAGE"))
	f.Add([]byte("GET /v1/clusters/c_lobby/ws?agent=x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"))
	f.Add([]byte("POST /v1/agents/register HTTP/1.1\r\nHost: x\r\nX-Mesh-Origin-Url: https://u:p@x\r\nX-Mesh-Client: 10.0.0.1\r\nContent-Length: 2\r\n\r\n{}"))
	cfg := testConfig(f, "")
	cfg.InMemory = true
	cfg.Budgets = admission.Config{} // the fuzzer sends faster than any budget
	n, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { n.Close() })
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := n.serveForward(context.Background(), peer.ID("fuzzer"), raw)
		if err != nil {
			t.Fatalf("serveForward: %v", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
		if err != nil {
			t.Fatalf("unparseable response %q: %v", out, err)
		}
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusSwitchingProtocols {
			t.Fatalf("%q -> %d", raw, resp.StatusCode)
		}
	})
}

// FuzzValidateCommand: directory changes from the network never panic
// the validators of either directory topic, whatever the bytes.
func FuzzValidateCommand(f *testing.F) {
	f.Add([]byte(`{"seq":1,"at":1,"heartbeat":{"agent_id":"a","reg":1}}`))
	f.Add([]byte(`{"seq":-1}`))
	f.Add([]byte(`{"entries":[{"seq":1,"at":1,"kind":"agents","op":{}},{"seq":2,"at":1,"kind":"agents","op":{}}]}`))
	f.Add([]byte(`{"entries":[]}`))
	n := &Node{role: RoleNode}
	n.clog = storetest.Log(f)
	n.view = newDirView(n, []peer.AddrInfo{{ID: "directory"}}, nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, decode := range []decoder{decodeBatch, decodeEntry} {
			validate := n.validateChanges(n.view.isDirectoryPeer, decode, true)
			validate(n.view.directory(), data)
			validate(peer.ID("other"), data)
		}
	})
}
