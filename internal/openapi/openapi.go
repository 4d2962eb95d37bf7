// Package openapi holds the OpenAPI 3.1 document of a node's HTTP API, the
// machine-readable reference every node serves at GET /openapi.json.
//
// openapi.yaml is the source of truth, embedded here; node/openapi_test.go
// sends each documented operation to a real node and validates the
// answers against it, and fails when a route the node registers is not in
// it (or it lists one the node does not serve).
package openapi

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"go.yaml.in/yaml/v3"
)

//go:embed openapi.yaml
var source []byte

// document is the document as JSON, made once.
var document = mustJSON(source)

// mustJSON turns the YAML source into JSON. The source is embedded, and
// tests load it, so a failure is a build mistake: it stops the program.
func mustJSON(src []byte) []byte {
	var v any
	if err := yaml.Unmarshal(src, &v); err != nil {
		panic(fmt.Sprintf("openapi.yaml: %v", err))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("openapi.yaml as JSON: %v", err))
	}
	return buf.Bytes()
}

// JSON returns the document as JSON. Callers must not modify it.
func JSON() []byte { return document }

// Handler serves the document as application/json.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("X-Content-Type-Options", "nosniff")
		w.Write(document)
	})
}
