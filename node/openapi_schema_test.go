package node

import (
	"fmt"

	"github.com/getkin/kin-openapi/openapi3"
)

// undocumented returns the fields of v (a decoded JSON answer) that its
// schema s does not name, as JSON pointers under at: what the node sends
// that the document does not say. A schema naming no property (free-form
// data) takes any field.
func undocumented(s *openapi3.Schema, v any, at string) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		props := properties(s)
		if len(props) == 0 {
			return nil
		}
		for k, fv := range v {
			ps, ok := props[k]
			if !ok {
				out = append(out, at+"/"+k)
				continue
			}
			out = append(out, undocumented(ps, fv, at+"/"+k)...)
		}
	case []any:
		if items := itemsOf(s); items != nil {
			for i, ev := range v {
				out = append(out, undocumented(items, ev, fmt.Sprintf("%s/%d", at, i))...)
			}
		}
	}
	return out
}

// subschemas are s and the schemas it is combined with.
func subschemas(s *openapi3.Schema) []*openapi3.Schema {
	all := []*openapi3.Schema{s}
	for _, refs := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf, {s.Then, s.Else}} {
		for _, r := range refs {
			if r != nil && r.Value != nil {
				all = append(all, subschemas(r.Value)...)
			}
		}
	}
	return all
}

// properties are the properties s and its subschemas name.
func properties(s *openapi3.Schema) map[string]*openapi3.Schema {
	props := map[string]*openapi3.Schema{}
	for _, sub := range subschemas(s) {
		for k, p := range sub.Properties {
			if _, seen := props[k]; !seen && p.Value != nil {
				props[k] = p.Value
			}
		}
	}
	return props
}

// itemsOf is the item schema of s or of its subschemas (nil: none).
func itemsOf(s *openapi3.Schema) *openapi3.Schema {
	for _, sub := range subschemas(s) {
		if sub.Items != nil && sub.Items.Value != nil {
			return sub.Items.Value
		}
	}
	return nil
}
