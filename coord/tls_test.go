package coord_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/testkit"
)

// bundle writes a self-signed certificate for localhost and its key into
// one PEM file, and returns a pool that trusts it.
func bundle(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pemb := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})...)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pemb, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// TestHTTPSWithABundle: a certificate bundle in .coord/tls.pem makes the
// daemon serve HTTPS under the certificate's name.
func TestHTTPSWithABundle(t *testing.T) {
	t.Parallel()
	dir := project(t)
	pool := bundle(t, filepath.Join(dir, ".coord", "tls.pem"))
	h := start(t, dir, nil)
	if !strings.HasPrefix(h.url, "https://localhost:") {
		t.Fatalf("endpoint %s", h.url)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	res, err := c.Get(h.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
}

// TestCloseLeavesNoGoroutines: a daemon with sockets open, a cron running,
// a chat turn under way and its site watcher waiting stops everything it
// started.
func TestCloseLeavesNoGoroutines(t *testing.T) { // not parallel: it counts the process's goroutines
	before := runtime.NumGoroutine()
	dir := project(t)
	(&harness{t: t, dir: dir}).write("cluster.yaml", strings.Replace(cronCluster, "%s", "test-box", 1))
	h := start(t, dir, withSite("http://127.0.0.1:1", filepath.Join(t.TempDir(), "mesh")))
	h.socket()
	ws := h.socket()
	h.advanceUntil("stuck to run", func() bool {
		var r runs
		h.get("/crons/stuck/runs", &r)
		return len(r.Runs) > 0
	})
	h.send("c1", "hang", http.StatusOK)
	ws.next("conv.stream.delta")
	if err := h.d.Close(); err != nil {
		t.Fatal(err)
	}
	h.d.Close()
	http.DefaultClient.CloseIdleConnections()
	testkit.Eventually(t, 10*time.Second, func() bool { return runtime.NumGoroutine() <= before+2 }, "timed out waiting for goroutines to end")
}
