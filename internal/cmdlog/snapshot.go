package cmdlog

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/agentmesh/mesh/store"
)

// Snapshots: the state of every machine at one seq, so that a node far
// behind (or new) installs it instead of replaying the log from 1, and the
// change log can be compacted behind it. A snapshot holds each machine's
// State keys with their expiry; node-local keys (heartbeats, histories,
// payments) are not in it.
//
// Format (zstd-compressed): "MESHSNAP1\n", a header (uvarint length,
// JSON), then records (uvarint key length, key, uvarint value length,
// value, uvarint expiry in Unix seconds), ended by a key length of 0.

const snapshotMagic = "MESHSNAP1\n"

// maxSnapshotKey and maxSnapshotValue bound a record read from a snapshot.
const (
	maxSnapshotKey   = 4 << 10
	maxSnapshotValue = 4 << 20
)

// ErrCompacted: the changes asked for were compacted behind a snapshot;
// the asker installs one.
var ErrCompacted = errors.New("cmdlog: changes compacted; install a snapshot")

// SnapshotHeader describes a snapshot.
type SnapshotHeader struct {
	Seq      uint64   `json:"seq"`
	Index    uint64   `json:"index"`
	Origin   string   `json:"origin"`
	Prefixes []string `json:"prefixes"`
	Created  int64    `json:"created"` // unix ns, for operators
}

// Snapshot is a consistent image of the log's state, taken by
// Log.Snapshot: writes go on while it is written out.
type Snapshot struct {
	Header SnapshotHeader
	tx     *store.Txn
	log    *Log // its machines inline what the state refers to in the change log
}

// Keys of the snapshot machinery.
//
//	m/first      seq of the first entry the change log still holds
//	m/restoring  a restore under way (the prefixes it replaces)
var (
	firstKey     = []byte("m/first")
	restoringKey = []byte("m/restoring")
)

// statePrefixes are the prefixes of the state a snapshot carries, sorted:
// the machines', the writes the log remembers and the nonces.
func (l *Log) statePrefixes() []string {
	out := []string{string(writePrefix), string(writeAgePrefix), string(noncePrefix)}
	for _, m := range l.machines {
		for _, p := range m.State() {
			out = append(out, string(p))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Snapshot captures the state as of the last committed entry. Call it
// where no commit runs concurrently (a consensus engine's FSM), or accept
// that the image is of some seq at or after the call. Release it with Close.
func (l *Log) Snapshot() (*Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	origin, err := l.Origin()
	if err != nil {
		return nil, err
	}
	return &Snapshot{
		Header: SnapshotHeader{Seq: l.Seq(), Index: l.Index(), Origin: origin,
			Prefixes: l.statePrefixes(), Created: time.Now().UnixNano()},
		tx:  l.db.ReadTxn(),
		log: l,
	}, nil
}

// Close releases the image.
func (s *Snapshot) Close() { s.tx.Discard() }

// WriteTo writes the snapshot to w.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	zw, err := zstd.NewWriter(cw, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(zw, 64<<10)
	hdr, _ := json.Marshal(s.Header)
	bw.WriteString(snapshotMagic)
	writeField(bw, hdr)
	var buf [binary.MaxVarintLen64]byte
	for _, p := range s.Header.Prefixes {
		err := s.tx.ScanExpiry([]byte(p), func(k, v []byte, exp uint64) error {
			v, err := s.log.inline(s.tx, k, v)
			if err != nil {
				return err
			}
			writeField(bw, k)
			writeField(bw, v)
			_, err = bw.Write(buf[:binary.PutUvarint(buf[:], exp)])
			return err
		})
		if err != nil {
			return cw.n, err
		}
	}
	bw.WriteByte(0)
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	err = zw.Close()
	return cw.n, err
}

func writeField(w *bufio.Writer, b []byte) {
	var buf [binary.MaxVarintLen64]byte
	w.Write(buf[:binary.PutUvarint(buf[:], uint64(len(b)))])
	w.Write(b)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ReadSnapshotHeader reads the header of a snapshot from r.
func ReadSnapshotHeader(r io.Reader) (SnapshotHeader, error) {
	var h SnapshotHeader
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return h, err
	}
	defer zr.Close()
	br := bufio.NewReader(zr)
	return readHeader(br)
}

func readHeader(br *bufio.Reader) (SnapshotHeader, error) {
	var h SnapshotHeader
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != snapshotMagic {
		return h, errors.Join(errors.New("cmdlog: not a snapshot"), err)
	}
	raw, err := readField(br, 64<<10)
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return h, fmt.Errorf("cmdlog: snapshot header: %w", err)
	}
	return h, nil
}

// Restore replaces the state with the snapshot read from r: the machines'
// state and the change log are dropped, the snapshot's keys loaded, and
// the log continues at its seq. A restore cut short (a crash, a bad
// stream) leaves the log empty (seq 0), never a mix. It must not run
// concurrently with commits.
func (l *Log) Restore(r io.Reader) (SnapshotHeader, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writesFrom, l.writes = unknownAt, nil // the snapshot's writes replace these
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return SnapshotHeader{}, err
	}
	defer zr.Close()
	br := bufio.NewReaderSize(zr, 64<<10)
	h, err := readHeader(br)
	if err != nil {
		return h, err
	}
	want := l.statePrefixes()
	if !slices.Equal(machinePrefixes(h.Prefixes), machinePrefixes(want)) {
		return h, fmt.Errorf("cmdlog: the snapshot holds state %v, this node's machines %v", h.Prefixes, want)
	}
	prefixes := append(want, string(logPrefix))
	if err := l.beginRestore(prefixes); err != nil {
		return h, err
	}
	if err := l.load(br, h.Prefixes); err != nil {
		return h, err
	}
	err = l.db.Update(func(tx *store.Txn) error {
		for k, v := range map[string][]byte{
			string(seqKey): []byte(store.U64(h.Seq)), string(indexKey): []byte(store.U64(h.Index)),
			string(firstKey): []byte(store.U64(h.Seq + 1)), string(originKey): []byte(h.Origin),
		} {
			if err := tx.Set([]byte(k), v); err != nil {
				return err
			}
		}
		return tx.Delete(restoringKey)
	})
	if err != nil {
		return h, err
	}
	l.seq.Store(h.Seq)
	l.index.Store(h.Index)
	for _, m := range l.machines {
		m.Restored()
	}
	l.signal()
	return h, nil
}

// machinePrefixes are prefixes without the writes the log remembers, which
// snapshots of earlier releases do not carry.
func machinePrefixes(prefixes []string) []string {
	return slices.DeleteFunc(slices.Clone(prefixes), func(p string) bool {
		return p == string(writePrefix) || p == string(writeAgePrefix)
	})
}

// beginRestore empties the log and drops prefixes, marking the store as
// being restored first: Open finishes the job after a crash.
func (l *Log) beginRestore(prefixes []string) error {
	mark, _ := json.Marshal(prefixes)
	err := l.db.Update(func(tx *store.Txn) error {
		for _, k := range [][]byte{seqKey, indexKey, firstKey} {
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
		return tx.Set(restoringKey, mark)
	})
	if err != nil {
		return err
	}
	l.seq.Store(0)
	l.index.Store(0)
	return dropPrefixes(l.db, prefixes)
}

func dropPrefixes(db *store.DB, prefixes []string) error {
	bs := make([][]byte, len(prefixes))
	for i, p := range prefixes {
		bs[i] = []byte(p)
	}
	return db.DropPrefix(bs...)
}

// load writes the snapshot's records, each under one of prefixes.
func (l *Log) load(br *bufio.Reader, prefixes []string) error {
	b := l.db.NewBatch()
	defer b.Cancel()
	now := uint64(time.Now().Unix())
	for {
		k, err := readField(br, maxSnapshotKey)
		if err != nil {
			return err
		}
		if len(k) == 0 {
			return b.Flush()
		}
		if !slices.ContainsFunc(prefixes, func(p string) bool { return len(k) >= len(p) && string(k[:len(p)]) == p }) {
			return fmt.Errorf("cmdlog: snapshot key %q outside the machines' state", k)
		}
		v, err := readField(br, maxSnapshotValue)
		if err != nil {
			return err
		}
		exp, err := binary.ReadUvarint(br)
		if err != nil {
			return err
		}
		if exp != 0 && exp <= now {
			continue // expired meanwhile: garbage the source had not collected yet
		}
		if err := b.Set(k, v, exp); err != nil {
			return err
		}
	}
}

func readField(br *bufio.Reader, max int) ([]byte, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, fmt.Errorf("cmdlog: snapshot: %w", noEOF(err))
	}
	if n > uint64(max) {
		return nil, fmt.Errorf("cmdlog: snapshot field of %d bytes (at most %d)", n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return nil, fmt.Errorf("cmdlog: snapshot: %w", noEOF(err))
	}
	return b, nil
}

// noEOF turns a clean end of stream inside a snapshot into a truncation.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// First is the seq of the oldest entry the change log holds (1 until
// compacted).
func (l *Log) First() uint64 {
	var first uint64
	l.db.View(func(tx *store.Txn) error {
		var err error
		first, err = GetU64(tx, firstKey)
		return err
	})
	return max(first, 1)
}

// Compact drops the change log's entries older than the last keep, which
// a node further behind gets as a snapshot instead. It keeps, below the
// first entry the change feed serves, those that a machine's state refers
// to (Referrer), until the machine releases them (Release). It runs under
// the commits' lock, a few entries at a time, so that no commit meets it
// on the keys it reads.
func (l *Log) Compact(keep uint64) error {
	seq := l.Seq()
	if seq <= keep {
		return nil
	}
	first, until := l.First(), seq-keep // drop [first, until]
	for first <= until {
		end := min(until, first+compactBatch-1)
		if err := l.compactRun(first, end); err != nil {
			return err
		}
		first = end + 1
	}
	return nil
}

// compactBatch is how many entries one transaction of Compact drops. It
// reads and decodes each (for its Referrer) while commits wait: an entry
// with a 30 KB card took 1.5 ms on a machine at load 21 (2 cores).
const compactBatch = 64

// compactRun drops the entries from first to end that no machine refers
// to, in one transaction. Two compactions may run at once (a quorum
// member's minute and its Raft snapshot's), and a restore may come
// between their batches: under the commits' lock it starts at the first
// entry the log holds now, stops at its last, and only ever raises first.
func (l *Log) compactRun(first, end uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.db.Update(func(tx *store.Txn) error {
		cur, err := GetU64(tx, firstKey)
		if err != nil {
			return err
		}
		first, end = max(first, cur, 1), min(end, l.seq.Load())
		if first > end {
			return nil
		}
		for s := first; s <= end; s++ {
			kept, err := l.referred(tx, s)
			if err != nil {
				return err
			}
			if !kept {
				if err := tx.Delete(logKey(s)); err != nil {
					return err
				}
			}
		}
		return tx.Set(firstKey, []byte(store.U64(end+1)))
	})
}

// recoverRestore finishes, at Open, a restore cut short: the log is empty
// and what it had begun to load is dropped.
func recoverRestore(db *store.DB) error {
	var mark []byte
	err := db.View(func(tx *store.Txn) error {
		var err error
		mark, err = tx.Get(restoringKey)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var prefixes []string
	if err := json.Unmarshal(mark, &prefixes); err != nil {
		return err
	}
	if err := dropPrefixes(db, prefixes); err != nil {
		return err
	}
	return db.Update(func(tx *store.Txn) error {
		for _, k := range [][]byte{seqKey, indexKey, firstKey, restoringKey} {
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}
