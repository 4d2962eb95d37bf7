package pages

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentmesh/mesh/internal/npmtest"
)

// maxPeerGzip bounds the page's peer (peer.js) as a browser fetches it,
// gzipped: what a phone downloads when its visitor joins.
const maxPeerGzip = 250_000

// TestPeerBundleServedGzipped: the bundle the node embeds goes to a
// browser gzipped, within maxPeerGzip, and as it is to a client that
// takes no gzip. (.ci/run checks that it is what its sources build.)
func TestPeerBundleServedGzipped(t *testing.T) {
	raw, err := fs.ReadFile(staticFS, "peer.js")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /assets/wall/{file}", serveStatic)
	get := func(enc string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/assets/wall/peer.js", nil)
		if enc != "" {
			req.Header.Set("Accept-Encoding", enc)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	rec := get("gzip, deflate, br")
	if rec.Code != 200 || rec.Header().Get("Content-Encoding") != "gzip" || rec.Header().Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	t.Logf("peer.js: %d bytes, %d gzipped", len(raw), rec.Body.Len())
	if rec.Body.Len() > maxPeerGzip {
		t.Fatalf("peer.js is %d bytes gzipped, over %d", rec.Body.Len(), maxPeerGzip)
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(zr); err != nil || !bytes.Equal(b, raw) {
		t.Fatalf("the gzipped bundle does not open to the bundle: %v", err)
	}
	if rec := get(""); rec.Header().Get("Content-Encoding") != "" || !bytes.Equal(rec.Body.Bytes(), raw) {
		t.Fatalf("without gzip: %v, %d bytes", rec.Header(), rec.Body.Len())
	}
}

// TestPeerMessageIDs: the page's gossipsub (@libp2p/gossipsub, from the
// bundle's lockfile) names messages as the nodes do (docs/wire.md 12.1,
// p2p.MessageID): its default msgIdFnStrictSign, read from the package's
// own source, gives the vector's id.
func TestPeerMessageIDs(t *testing.T) {
	npmtest.Require(t, "peer", "@libp2p/gossipsub")
	script := `
import { pathToFileURL } from 'node:url'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
const { msgIdFnStrictSign } = await import(pathToFileURL('node_modules/@libp2p/gossipsub/dist/src/utils/msgIdFn.js').href)
const key = await generateKeyPairFromSeed('Ed25519', Uint8Array.from({ length: 32 }, (_, i) => i))
const from = peerIdFromPrivateKey(key)
const id = msgIdFnStrictSign({ type: 'signed', from, key: key.publicKey, sequenceNumber: 1n })
console.log(from.toString(), Buffer.from(id).toString('hex'))
`
	cmd := exec.Command("node", "--input-type=module", "-e", script)
	cmd.Dir = "peer"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	const want = "12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB 0801122003a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b80000000000000001"
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("@libp2p/gossipsub names the vector's message %q, want %q", got, want)
	}
}
