package quorum

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/agentmesh/mesh/store"
)

// logStore is Raft's log and stable store on a Badger store of its own
// (see docs/architecture.md for why Badger rather than raft-boltdb).
//
//	l/<index 8B>  a Raft log entry (encodeLog)
//	s/<key>       a stable value (current term, last vote)
//
// The store's SyncWrites decides whether each write is fsynced before it
// returns, as for the directory's own state.
type logStore struct {
	db *store.DB

	mu          sync.Mutex // orders writes, and guards first and last
	first, last uint64     // 0, 0 when empty
	recent      recentLogs // the entries stored last, read back from memory
}

var (
	_ raft.LogStore    = (*logStore)(nil)
	_ raft.StableStore = (*logStore)(nil)
)

var (
	raftLogPrefix    = []byte("l/")
	raftStablePrefix = []byte("s/")
)

func raftLogKey(i uint64) []byte { return store.Key("l", store.U64(i)) }

// maxBatchBytes bounds the entries written in one Badger transaction (a
// transaction holds at most 15% of a memtable).
const maxBatchBytes = 1 << 20

// deleteBatch is how many entries one transaction of DeleteRange removes.
const deleteBatch = 1000

func openLogStore(db *store.DB) (*logStore, error) {
	s := &logStore{db: db}
	err := db.View(func(tx *store.Txn) error {
		var first []byte
		err := tx.Scan(raftLogPrefix, nil, func(k, _ []byte) (bool, error) {
			first = append([]byte(nil), k...)
			return false, nil
		})
		if err != nil || first == nil {
			return err
		}
		last, _, err := tx.Last(raftLogPrefix)
		if err != nil {
			return err
		}
		s.first = binary.BigEndian.Uint64(first[len(raftLogPrefix):])
		s.last = binary.BigEndian.Uint64(last[len(raftLogPrefix):])
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("quorum: open the raft log: %w", err)
	}
	return s, nil
}

// FirstIndex implements raft.LogStore.
func (s *logStore) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, nil
}

// LastIndex implements raft.LogStore.
func (s *logStore) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, nil
}

// GetLog implements raft.LogStore.
func (s *logStore) GetLog(index uint64, l *raft.Log) error {
	if held, ok := s.recent.get(index); ok {
		*l = *held
		return nil
	}
	var v []byte
	err := s.db.View(func(tx *store.Txn) error {
		var err error
		v, err = tx.Get(raftLogKey(index))
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	return decodeLog(v, l)
}

// StoreLog implements raft.LogStore.
func (s *logStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore. Large batches take several
// transactions, written in order: a crash between them leaves a prefix of
// the batch, which Raft treats as a shorter log.
func (s *logStore) StoreLogs(logs []*raft.Log) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(logs) > 0 {
		n, size := 0, 0
		for n < len(logs) && (n == 0 || size+len(logs[n].Data) <= maxBatchBytes) {
			size += len(logs[n].Data) + len(logs[n].Extensions)
			n++
		}
		batch := logs[:n]
		err := s.db.Update(func(tx *store.Txn) error {
			for _, l := range batch {
				if err := tx.Set(raftLogKey(l.Index), encodeLog(l)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("quorum: store raft log: %w", err)
		}
		for _, l := range batch {
			if s.first == 0 || l.Index < s.first {
				s.first = l.Index
			}
			s.last = max(s.last, l.Index)
		}
		s.recent.add(batch)
		logs = logs[n:]
	}
	return nil
}

// DeleteRange implements raft.LogStore: it removes the entries from min to
// max inclusive (the prefix compacted behind a snapshot, or a suffix a new
// leader overwrote).
func (s *logStore) DeleteRange(lo, hi uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recent.clear()
	for i := lo; i <= hi; {
		end := min(hi, i+deleteBatch-1)
		err := s.db.Update(func(tx *store.Txn) error {
			for j := i; j <= end; j++ {
				if err := tx.Delete(raftLogKey(j)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("quorum: delete raft log %d-%d: %w", lo, hi, err)
		}
		if end == ^uint64(0) {
			break
		}
		i = end + 1
	}
	switch {
	case lo <= s.first && hi >= s.last:
		s.first, s.last = 0, 0
	case lo <= s.first:
		s.first = hi + 1
	case hi >= s.last:
		s.last = lo - 1
	}
	return nil
}

// Set implements raft.StableStore.
func (s *logStore) Set(key, val []byte) error {
	return s.db.Update(func(tx *store.Txn) error {
		return tx.Set(append(append([]byte(nil), raftStablePrefix...), key...), val)
	})
}

// Get implements raft.StableStore: a missing key reads as empty.
func (s *logStore) Get(key []byte) ([]byte, error) {
	var v []byte
	err := s.db.View(func(tx *store.Txn) error {
		var err error
		v, err = tx.Get(append(append([]byte(nil), raftStablePrefix...), key...))
		if errors.Is(err, store.ErrNotFound) {
			v, err = []byte{}, nil
		}
		return err
	})
	return v, err
}

// SetUint64 implements raft.StableStore.
func (s *logStore) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 implements raft.StableStore: a missing key reads as 0.
func (s *logStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil || len(v) == 0 {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("quorum: corrupt stable value %q", key)
	}
	return binary.BigEndian.Uint64(v), nil
}

// encodeLog lays out a Raft entry: index, term (8 bytes each), type (1),
// appended-at (8, Unix ns; 0 when unknown), then data and extensions, each
// prefixed with its length (uvarint).
func encodeLog(l *raft.Log) []byte {
	b := make([]byte, 0, 25+2*binary.MaxVarintLen64+len(l.Data)+len(l.Extensions))
	b = binary.BigEndian.AppendUint64(b, l.Index)
	b = binary.BigEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	return append(b, l.Extensions...)
}

var errCorruptLog = errors.New("quorum: corrupt raft log entry")

func decodeLog(b []byte, l *raft.Log) error {
	if len(b) < 25 {
		return errCorruptLog
	}
	l.Index = binary.BigEndian.Uint64(b)
	l.Term = binary.BigEndian.Uint64(b[8:])
	l.Type = raft.LogType(b[16])
	l.AppendedAt = time.Time{}
	if at := int64(binary.BigEndian.Uint64(b[17:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	b = b[25:]
	var err error
	if l.Data, b, err = lenPrefixed(b); err != nil {
		return err
	}
	if l.Extensions, b, err = lenPrefixed(b); err != nil {
		return err
	}
	if len(b) != 0 {
		return errCorruptLog
	}
	return nil
}

func lenPrefixed(b []byte) (field, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, errCorruptLog
	}
	if n == 0 {
		return nil, b[k:], nil
	}
	return b[k : k+int(n)], b[k+int(n):], nil
}
