package wall

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/agentmesh/mesh/internal/httpx"
)

// FuzzDecodePost: whatever a post creation's body and agent, decodePost
// answers a client error or a post whose stored form (the JSON every
// node applies) decodes and passes the apply's check alike, and a
// hashtag scan of its text never fails.
func FuzzDecodePost(f *testing.F) {
	for _, s := range []string{
		`{"title":"Bike","body":"Red","ttl":"7d"}`,
		`{"title":"t","ttl":"forever","file":{"url":"https://example.org/a.png","mime":"image/png; q=1"}}`,
		`{"title":"t","ttl":"24h","props":{"where":{"lat":89.9,"lon":-180,"label":"pole"},"lang":"fr-CA"}}`,
		`{"title":"t","ttl":"1y","props":{"where":"none"}}`,
		`{"title":"t","ttl":"30d","props":null}`,
		`{"title":"t","ttl":"7d","props":{"entry":{"age_min":18}}}`,
		`{"title":"\u0000","ttl":"7d"}`,
		`{"title":"#market p_aaaaaaaaaaaaaaaaaaaaaaaa","ttl":"7d","file":{"url":"ftp://x","mime":"a/b"}}`,
		`[1,2]`, `null`, `{"title":1}`,
	} {
		f.Add("alice", []byte(s))
	}
	f.Fuzz(func(t *testing.T, agent string, body []byte) {
		pc, ttl, err := decodePost(agent, body)
		if err != nil {
			var e *httpx.Error
			if !errors.As(err, &e) || e.Status < 400 || e.Status >= 500 {
				t.Fatalf("%q: not a client error: %v", body, err)
			}
			return
		}
		if _, ok := ttls[ttl]; !ok {
			t.Fatalf("ttl %q passed", ttl)
		}
		stored, err := json.Marshal(pc)
		if err != nil {
			t.Fatal(err)
		}
		var back postContent
		if err := json.Unmarshal(stored, &back); err != nil {
			t.Fatalf("stored %s does not decode: %v", stored, err)
		}
		if err := back.validate(); err != nil {
			t.Fatalf("stored %s fails the apply's check: %v", stored, err)
		}
		if !reflect.DeepEqual(back, pc) {
			t.Fatalf("stored %s decodes as %+v, not %+v", stored, back, pc)
		}
		hashtags(pc.Title + " " + pc.Body)
	})
}
