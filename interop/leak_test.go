package interop

import (
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/interop/soltest"
)

// TestNoRPCCauseInAnswers: whatever goes wrong with the chain RPC behind a
// payment check (refused connection, RPC error, HTTP 500, no answer), the
// 402 carries the fixed detail of its code and names neither the RPC's
// URL, nor its address, nor the API key in it; the cause is logged with
// the key redacted.
func TestNoRPCCauseInAnswers(t *testing.T) {
	t.Parallel()
	const key, password = "k3y-0f-the-operator", "pr0xy-passw0rd"
	for _, c := range []struct {
		name  string
		fail  func(h *harness, rpc *httptest.Server)
		error string // the sentinel whose detail the client gets
	}{
		{"connection refused", func(_ *harness, rpc *httptest.Server) { rpc.Close() }, ErrRPC.Detail},
		{"rpc error", func(h *harness, _ *httptest.Server) { h.chain.Fail("getTransaction", soltest.RPCError) }, ErrRPC.Detail},
		{"http 500", func(h *harness, _ *httptest.Server) { h.chain.Fail("getTransaction", soltest.HTTP500) }, ErrRPC.Detail},
		{"no answer", func(h *harness, _ *httptest.Server) { h.chain.Fail("getTransaction", soltest.Hang) }, ErrRPCTimeout.Detail},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The agent reaches the chain through a proxy it names with
			// credentials, as an operator names a hosted RPC provider.
			var rpc *httptest.Server
			var rpcURL string
			h := newManualHarness(t, func(pc *PaymentConfig) {
				target, _ := url.Parse(pc.RPCURL)
				proxy := httputil.NewSingleHostReverseProxy(target)
				proxy.ErrorLog = stdlog.New(io.Discard, "", 0) // "no answer" cancels its requests
				rpc = httptest.NewServer(proxy)
				t.Cleanup(rpc.Close)
				rpcURL = strings.Replace(rpc.URL, "://", "://operator:"+password+"@", 1) + "/?api-key=" + key
				pc.RPCURL, pc.RPCTimeout = rpcURL, rpcTimeoutShort
			})
			var log testkit.Buffer
			h.agent.paywall.log = slog.New(slog.NewTextHandler(&log, nil))
			n := h.challenge()
			sig := h.pay(NewWallet(), testPrice, n)
			c.fail(h, rpc)
			r := h.withProof(sig, n)
			if r.status != 402 || r.body["detail"] != c.error {
				t.Fatalf("got %d %s, want 402 with detail %q", r.status, r.raw, c.error)
			}
			answer := fmt.Sprint(r.header) + r.raw
			for _, s := range []string{key, password, "api-key", strings.TrimPrefix(rpc.URL, "http://"), "127.0.0.1"} {
				if strings.Contains(answer, s) {
					t.Errorf("the answer names %q: %v %s", s, r.header, r.raw)
				}
			}
			logged := log.String()
			if strings.Contains(logged, key) || strings.Contains(logged, password) || !strings.Contains(logged, "getTransaction") {
				t.Errorf("the log of the cause is unredacted or missing:\n%s", logged)
			}
		})
	}
}
