package redact

import (
	"errors"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		`getTransaction: Post "https://rpc.example.com/?api-key=s3cret": dial tcp 127.0.0.1:1: connect: connection refused`: `getTransaction: Post "https://rpc.example.com/?REDACTED": dial tcp 127.0.0.1:1: connect: connection refused`,
		"https://user:pw@rpc.example.com:8899/path":        "https://REDACTED@rpc.example.com:8899/path",
		"http://127.0.0.1:8899":                            "http://127.0.0.1:8899",
		"two: http://a/?k=1 and wss://u@b/x#frag":          "two: http://a/?REDACTED and wss://REDACTED@b/x#REDACTED",
		"no url here: 127.0.0.1:4001 /ip4/127.0.0.1/tcp/1": "no url here: 127.0.0.1:4001 /ip4/127.0.0.1/tcp/1",
		"broken http://u:p@%zz/?api-key=k":                 "broken http://REDACTED@%zz/?REDACTED",
		"HTTPS://H/?Key=1":                                 "https://H/?REDACTED",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q)\n = %q\nwant %q", in, got, want)
		}
	}
	if Error(nil) != "" || Error(errors.New("x http://h/?k=v")) != "x http://h/?REDACTED" {
		t.Error("Error")
	}
}

// FuzzString: whatever the text, a secret in a URL's query or userinfo
// never survives.
func FuzzString(f *testing.F) {
	for _, s := range []string{"http://h/?", "a://b@c", "x://?#", "http://[::1]:80/?k"} {
		f.Add(s, "SECRETVALUE")
	}
	f.Fuzz(func(t *testing.T, prefix, secret string) {
		// A credential is made of the characters a URL carries unescaped.
		if len(secret) < 4 || strings.Trim(secret, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~") != "" ||
			strings.Contains(prefix+" ", secret) {
			return
		}
		for _, s := range []string{prefix + " http://h.example/?k=" + secret, prefix + " https://" + secret + "@h.example/"} {
			if got := String(s); strings.Contains(got, secret) {
				t.Fatalf("String(%q) = %q keeps the secret", s, got)
			}
		}
	})
}
