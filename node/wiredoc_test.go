package node

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/testkit"
)

// TestDirectoryWireVectors: the directory's messages of docs/wire.md (12.6
// A directory batch), read from the document, are what the directory
// publishes and what a node takes or refuses.
func TestDirectoryWireVectors(t *testing.T) {
	t.Parallel()
	v := testkit.WireVectors(t, "../docs/wire.md", "12.6 A directory batch")
	var es []cmdlog.Entry
	for _, name := range []string{"entry 7", "entry 8", "entry 9"} {
		var e cmdlog.Entry
		if err := json.Unmarshal([]byte(testkit.Vector(t, v, name)), &e); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		es = append(es, e)
	}
	raws, seqs := encodeEntries(t, es)
	for i, raw := range raws {
		if want := testkit.Vector(t, v, []string{"entry 7", "entry 8", "entry 9"}[i]); string(raw) != want {
			t.Errorf("the directory encodes entry %d as %s, want %s", seqs[i], raw, want)
		}
	}
	bs := batches(raws, seqs)
	if len(bs) != 1 || string(bs[0].data) != testkit.Vector(t, v, "batch") {
		t.Fatalf("the directory publishes %d messages, the first %s; want the batch", len(bs), bs[0].data)
	}
	got, err := decodeBatch([]byte(testkit.Vector(t, v, "batch")))
	if err != nil || len(got) != 3 || got[2].Seq != 9 || string(got[0].Op) != string(es[0].Op) {
		t.Fatalf("the batch decodes as %+v, %v", got, err)
	}
	alone, err := decodeEntry([]byte(testkit.Vector(t, v, "alone")))
	if err != nil || alone[0].Seq != 7 || string(alone[0].Op) != string(es[0].Op) {
		t.Fatalf("the entry alone decodes as %+v, %v", alone, err)
	}
	invalid := 0
	for name, msg := range v {
		if !strings.HasPrefix(name, "invalid ") {
			continue
		}
		invalid++
		if es, err := decodeBatch([]byte(msg)); err == nil {
			t.Errorf("%s: taken (%d entries)", name, len(es))
		}
	}
	if invalid < 7 {
		t.Fatalf("%d invalid messages read from the document, want 7", invalid)
	}
}
