package registryapi

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/store"
)

// What the directory publishes in the DHT: for every agent with a signed
// registration its record, under its did and its agent id; and for a
// RecordTTL after a deletion, or after an agent moved to another key, a
// tombstone under each key whose record it made stale and nothing newer
// replaced.

// tombstone is a DHT record made stale: agent id lost did at seq.
type tombstone struct {
	DID string `json:"did"`
	Seq uint64 `json:"seq"`
	At  int64  `json:"at"` // the entry's clock, unix ns
}

func (t tombstone) live(now time.Time) bool {
	return now.Before(time.Unix(0, t.At).Add(RecordTTL))
}

// addTombstone records, in the state every replica computes alike, that
// the command made the DHT record of id under did stale. Tombstones older
// than RecordTTL by the command's clock are pruned; the store's TTL only
// collects garbage.
func addTombstone(tx *store.Txn, cmd *Command, id, did string) error {
	ts, err := getTombstones(tx, id)
	if err != nil {
		return err
	}
	ts = slices.DeleteFunc(ts, func(t tombstone) bool { return !t.live(cmd.Time()) || t.DID == did })
	ts = append(ts, tombstone{DID: did, Seq: cmd.Seq, At: cmd.At})
	b, err := json.Marshal(ts)
	if err != nil {
		return err
	}
	return tx.SetTTL(tombstoneKey(id), b, RecordTTL+time.Hour)
}

func getTombstones(tx *store.Txn, id string) ([]tombstone, error) {
	var ts []tombstone
	err := tx.GetJSON(tombstoneKey(id), &ts)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return ts, err
}

// Publication is one value to put in the DHT.
type Publication struct {
	Key   string
	Value []byte
}

// Publications returns what the directory publishes in the DHT about agent
// id, attested by dirKey at now: its record under both keys if it has one,
// and the tombstones still due. A tombstone is left out under a key that
// now holds a live record, which has a higher seq.
func (d *Directory) Publications(id string, dirKey ed25519.PrivateKey, now time.Time) ([]Publication, error) {
	var out []Publication
	add := func(key string) func(*AgentRecord, []byte, error) error {
		return func(_ *AgentRecord, val []byte, err error) error {
			if err == nil {
				out = append(out, Publication{Key: key, Value: val})
			}
			return err
		}
	}
	err := d.db.View(func(tx *store.Txn) error {
		a, err := getAgent(tx, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		live := err == nil && a.Registered() && a.hasRecord()
		if live {
			if err := fromLog(tx, a, true, false); err != nil {
				return err
			}
		}
		if live {
			_, val, err := NewRecord(*a.Record, a.recordSeq(), dirKey, now)
			if err != nil {
				return err
			}
			for _, key := range RecordKeys(a.DID, a.ID) {
				out = append(out, Publication{Key: key, Value: val})
			}
		}
		ts, err := getTombstones(tx, id)
		if err != nil {
			return err
		}
		var latest *tombstone
		for _, t := range ts {
			if !t.live(now) {
				continue
			}
			if !didHasRecord(tx, t.DID) {
				if err := add(DIDRecordKey(t.DID))(NewTombstone(t.DID, id, t.Seq, dirKey, now)); err != nil {
					return err
				}
			}
			if latest == nil || t.Seq > latest.Seq {
				latest = &t
			}
		}
		if !live && latest != nil {
			return add(IDRecordKey(id))(NewTombstone(latest.DID, id, latest.Seq, dirKey, now))
		}
		return nil
	})
	return out, err
}

// recordSeq is the seq of a's record; rows written before RecordSeq
// existed have their registration's.
func (a *Agent) recordSeq() uint64 {
	if a.RecordSeq == 0 {
		return a.Reg
	}
	return a.RecordSeq
}

// didHasRecord reports whether did is bound to an agent with a DHT record.
func didHasRecord(tx *store.Txn, did string) bool {
	pub, err := identity.PublicKeyFromDID(did)
	if err != nil {
		return false
	}
	id, err := tx.Get(pubkeyKey(hex.EncodeToString(pub)))
	if err != nil {
		return false
	}
	a, err := getAgent(tx, string(id))
	return err == nil && a.hasRecord()
}

// PublishedIDs returns, in id order, up to limit ids after `after` that the
// directory publishes something about: agents with a record and ids with
// tombstones. Paging through them keeps no read transaction open for long.
func (d *Directory) PublishedIDs(after string, limit int) ([]string, error) {
	var withRecord, withTombstones []string
	err := d.db.View(func(tx *store.Txn) error {
		if err := scanIDs(tx, "a", after, limit, &withRecord, func(v []byte) bool {
			var a Agent
			return json.Unmarshal(v, &a) == nil && a.Registered() && a.hasRecord()
		}); err != nil {
			return err
		}
		return scanIDs(tx, "t", after, limit, &withTombstones, func([]byte) bool { return true })
	})
	ids := append(withRecord, withTombstones...)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	return ids[:min(limit, len(ids))], err
}

// scanIDs appends to out up to limit ids after `after` among the keys
// <prefix>/<id> whose value keep accepts.
func scanIDs(tx *store.Txn, prefix, after string, limit int, out *[]string, keep func([]byte) bool) error {
	p := store.Key(prefix, "")
	var start []byte
	if after != "" {
		start = append(store.Key(prefix, after), 0) // the first key past after's
	}
	return tx.Scan(p, start, func(k, v []byte) (bool, error) {
		if keep(v) {
			*out = append(*out, string(k[len(p):]))
		}
		return len(*out) < limit, nil
	})
}
