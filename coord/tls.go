package coord

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"os"
)

// loadBundle reads a PEM file holding a certificate chain and its private
// key. No file is no TLS (nil, nil). names are the certificate's DNS
// names; the first is the host the daemon is served under.
func loadBundle(path string) (*tls.Certificate, []string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	cert, err := tls.X509KeyPair(b, b)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	return &cert, leaf.DNSNames, nil
}
