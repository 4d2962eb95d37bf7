package openapi

import (
	"context"
	"encoding/json"
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
