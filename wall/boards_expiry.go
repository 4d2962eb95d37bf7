package wall

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/store"
)

// Posts whose TTL elapsed are never read (every node filters them with
// its own clock), and their storage is reclaimed on every node by the
// directory's sweeps: every minute the node that orders the log logs the
// expiry of the posts (and post tombstones) whose time is past by its
// clock (Op.ExpirePosts), and the purge of the posts of deleted boards
// (Op.Purge), in batches. Apply checks each against the entry's time and
// the state, so every node drops the same rows.

// PostRef names a post (or a tombstone, Board empty) due to expire.
type PostRef struct {
	C     string `json:"c"`
	Post  string `json:"p"`
	Until int64  `json:"u"`
	Board string `json:"b,omitempty"`
}

// Purge drops posts of a deleted board (BID) of cluster C.
type Purge struct {
	C     string   `json:"c"`
	BID   string   `json:"bid"`
	Posts []string `json:"posts"`
}

// purgeBatch bounds the posts one expiry or purge drops.
const purgeBatch = 500

func applyExpirePosts(tx *store.Txn, e *cmdlog.Entry, refs []PostRef) (Result, error) {
	n := 0
	for _, ref := range refs {
		ok, err := expirePost(tx, e, ref)
		if err != nil {
			return Result{}, err
		}
		if ok {
			n++
		}
	}
	if n == 0 {
		return Result{}, errNothingDue
	}
	return Result{Expired: n}, nil
}

// expirePost drops what ref names if it is still due at e's time.
func expirePost(tx *store.Txn, e *cmdlog.Entry, ref PostRef) (bool, error) {
	xk := expiryKey(ref.Until, ref.C, ref.Post)
	if has, err := tx.Has(xk); err != nil || !has || ref.Until > e.At {
		return false, err
	}
	if ref.Board == "" { // a tombstone
		return true, errors.Join(tx.Delete(xk), tx.Delete(postTombKey(ref.C, ref.Post)))
	}
	post, err := getPost(tx, ref.C, ref.Post)
	if errors.Is(err, ErrPostNotFound) {
		return true, tx.Delete(xk)
	}
	if err != nil {
		return false, err
	}
	cl, err := getCluster(tx, ref.C)
	if errors.Is(err, ErrClusterNotFound) {
		return true, removePost(tx, ref.C, nil, nil, post)
	}
	if err != nil {
		return false, err
	}
	var board *boardRow
	if err := tx.GetJSON(boardRowKey(ref.C, post.Board), &board); err != nil && !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	if board != nil && board.BID != post.BID {
		board = nil // a deleted board's post: only its cluster counts it
	}
	if err := removePost(tx, ref.C, cl, board, post); err != nil {
		return false, err
	}
	return true, tx.SetJSON(clusterKey(cl.ID), cl)
}

func applyPurge(tx *store.Txn, p Purge) (Result, error) {
	if has, err := tx.Has(deadKey(p.C, p.BID)); err != nil || !has {
		return Result{}, errors.Join(err, errNothingDue)
	}
	cl, err := getCluster(tx, p.C) // nil: the cluster is gone too
	if err != nil && !errors.Is(err, ErrClusterNotFound) {
		return Result{}, err
	}
	for _, id := range p.Posts {
		post, err := getPost(tx, p.C, id)
		if errors.Is(err, ErrPostNotFound) || err == nil && post.BID != p.BID {
			continue
		}
		if err != nil {
			return Result{}, err
		}
		if err := removePost(tx, p.C, cl, nil, post); err != nil {
			return Result{}, err
		}
	}
	if cl != nil {
		if err := tx.SetJSON(clusterKey(cl.ID), cl); err != nil {
			return Result{}, err
		}
	}
	left := false
	err = tx.Scan(store.Key("w", "bl", p.C, p.BID, ""), nil, func(_, _ []byte) (bool, error) {
		left = true
		return false, nil
	})
	if err != nil || left {
		return Result{Expired: len(p.Posts)}, err
	}
	return Result{Expired: len(p.Posts)}, tx.Delete(deadKey(p.C, p.BID))
}

// duePosts returns up to limit posts and tombstones due at now.
func (c *Catalog) duePosts(now time.Time, limit int) ([]PostRef, error) {
	var refs []PostRef
	end := store.Key("w", "bx", store.U64(uint64(now.UnixNano())+1))
	err := c.db.View(func(tx *store.Txn) error {
		return tx.Scan(store.Key("w", "bx", ""), nil, func(k, v []byte) (bool, error) {
			if string(k) >= string(end) {
				return false, nil
			}
			// w/bx/<until: 8 bytes, which may hold a '/'>/<cluster>/<post>
			rest := string(k[len("w/bx/"):])
			if len(rest) < 9 {
				return true, nil
			}
			until, _ := store.ParseU64(rest[:8])
			c, post, _ := strings.Cut(rest[9:], "/")
			refs = append(refs, PostRef{C: c, Post: post, Until: int64(until), Board: string(v)})
			return len(refs) < limit, nil
		})
	})
	return refs, err
}

// duePurge returns the next batch of posts of a deleted board, if any.
func (c *Catalog) duePurge(limit int) (*Purge, error) {
	var p *Purge
	err := c.db.View(func(tx *store.Txn) error {
		k, err := firstKey(tx, store.Key("w", "bd", ""))
		if err != nil || k == nil {
			return err
		}
		cl, bid, _ := strings.Cut(string(k[len("w/bd/"):]), "/")
		p = &Purge{C: cl, BID: bid, Posts: []string{}}
		prefix := store.Key("w", "bl", cl, bid, "")
		return tx.Scan(prefix, nil, func(k, _ []byte) (bool, error) {
			p.Posts = append(p.Posts, string(k[len(prefix):]))
			return len(p.Posts) < limit, nil
		})
	})
	return p, err
}

// firstKey returns a copy of the first key with prefix (nil: none).
func firstKey(tx *store.Txn, prefix []byte) ([]byte, error) {
	var key []byte
	err := tx.Scan(prefix, nil, func(k, _ []byte) (bool, error) {
		key = append([]byte(nil), k...)
		return false, nil
	})
	return key, err
}

// SweepBoards logs, on the directory, the expiry of the posts whose TTL
// passed and the purge of deleted boards' posts (a batch of each), and
// returns how many posts went.
func (s *Service) SweepBoards(ctx context.Context) (int, error) {
	ctx = admission.Unmetered(ctx)
	now := s.now()
	n := 0
	refs, err := s.cfg.Catalog.duePosts(now, purgeBatch)
	if err == nil && len(refs) > 0 {
		n, err = s.proposeSweep(ctx, now, Op{ExpirePosts: refs})
	}
	if err != nil {
		return n, err
	}
	p, err := s.cfg.Catalog.duePurge(purgeBatch)
	if err != nil || p == nil {
		return n, err
	}
	m, err := s.proposeSweep(ctx, now, Op{Purge: p})
	return n + m, err
}

func (s *Service) proposeSweep(ctx context.Context, now time.Time, op Op) (int, error) {
	res, err := cmdlog.ResultAs[Result](s.cfg.Log.Propose(ctx, Kind, now.UnixNano(), op))
	if errors.Is(err, errNothingDue) {
		return 0, nil
	}
	return res.Expired, err
}
