package openapi

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestDocumentIsValidOpenAPI31: the served document is JSON, an OpenAPI
// 3.1 document that kin-openapi loads and validates, and every operation
// has an id, a summary and an error answer.
func TestDocumentIsValidOpenAPI31(t *testing.T) {
	if !json.Valid(JSON()) {
		t.Fatal("the document is not JSON")
	}
	doc, err := openapi3.NewLoader().LoadFromData(JSON())
	if err != nil {
		t.Fatal(err)
	}
	if !doc.IsOpenAPI31OrLater() || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == "" || op.Summary == "" {
				t.Errorf("%s %s: no operationId or summary", method, path)
			}
		}
	}
}

// codeCall matches a literal error code given to httpx.E in Go source.
var codeCall = regexp.MustCompile(`\bE\([^,()]+(?:\([^)]*\))?, *"([a-z0-9_]+)"`)

// TestEveryErrorCodeIsDocumented: the Error schema's code enum names
// exactly the codes the node's surfaces make (httpx.E with a literal code,
// in the packages a node serves), so a client can rely on the list.
func TestEveryErrorCodeIsDocumented(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(JSON())
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, c := range doc.Components.Schemas["Error"].Value.Properties["code"].Value.Enum {
		documented[c.(string)] = true
	}
	made := map[string]string{} // code to a file that makes it
	for _, dir := range []string{"node", "registryapi", "wall", "interop", "internal", "identity"} {
		err := filepath.WalkDir(filepath.Join("..", "..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			for _, m := range codeCall.FindAllSubmatch(src, -1) {
				made[string(m[1])] = path
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for code, path := range made {
		if !documented[code] {
			t.Errorf("error code %q (%s) is not in the Error schema's code enum", code, path)
		}
	}
	for code := range documented {
		if _, ok := made[code]; !ok {
			t.Errorf("documented error code %q is made nowhere", code)
		}
	}
}
