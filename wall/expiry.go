package wall

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/store"
)

// Public clusters nobody ever joins expire. The creation of a public
// cluster through a directory with a join window (Config.JoinWindow)
// carries its deadline, JoinBy, set by the directory whoever proposed it.
// The first time a node registers at the directory's rendezvous to serve
// the cluster (a socket joined it there, ghosts included), the directory
// logs that it was joined (Op.Joined), which clears the deadline. The
// directory sweeps the clusters whose deadline passed (SweepExpired),
// checks once more that none is being served, and logs their expiry
// (Op.Expire): every node drops the record; the id keeps a tombstone, as
// after a delete, and the slug, which no member ever used, is released.
// Private clusters and clusters created before deadlines existed never
// expire (their creations carry none).

// DefaultJoinWindow is how long a new public cluster waits for its first
// member: a week, for an event announced ahead.
const DefaultJoinWindow = 7 * 24 * time.Hour

// expireBatch bounds the clusters one expiry drops.
const expireBatch = 500

var (
	errJoined        = errors.New("wall: cluster already joined")
	errNothingDue    = errors.New("wall: no cluster to expire")
	errNotProposable = httpx.E(http.StatusForbidden, "not_proposable", "only cluster creations and deletions are accepted from other nodes")
)

// joinKey indexes a public cluster no node served yet by its deadline.
func joinKey(by int64, id string) []byte { return store.Key("w", "u", store.U64(uint64(by)), id) }

// awaitJoin gives cl, a new public cluster, its deadline (none when by is 0).
func awaitJoin(tx *store.Txn, cl *Cluster, by int64) error {
	cl.JoinBy = by
	if by == 0 {
		return nil
	}
	return tx.Set(joinKey(by, cl.ID), nil)
}

// joined clears cl's deadline.
func joined(tx *store.Txn, cl *Cluster) error {
	if cl.JoinBy == 0 {
		return nil
	}
	err := tx.Delete(joinKey(cl.JoinBy, cl.ID))
	cl.JoinBy = 0
	return err
}

func applyJoined(tx *store.Txn, id string) (Result, error) {
	cl, err := getCluster(tx, id)
	if err != nil {
		return Result{}, err
	}
	if cl.JoinBy == 0 {
		return Result{}, errJoined
	}
	if err := joined(tx, cl); err != nil {
		return Result{}, err
	}
	return Result{Cluster: cl}, tx.SetJSON(clusterKey(id), cl)
}

// applyExpire drops the clusters of ids still unjoined at e's time; one
// joined, deleted or not due since the expiry was proposed is skipped.
func applyExpire(tx *store.Txn, e *cmdlog.Entry, ids []string) (Result, error) {
	n := 0
	for _, id := range ids {
		cl, err := getCluster(tx, id)
		if errors.Is(err, ErrClusterNotFound) {
			continue
		}
		if err != nil {
			return Result{}, err
		}
		if cl.JoinBy == 0 || cl.JoinBy > e.At {
			continue
		}
		if err := removeCluster(tx, cl, e.At/int64(time.Millisecond), true); err != nil {
			return Result{}, err
		}
		n++
	}
	if n == 0 {
		return Result{}, errNothingDue
	}
	return Result{Expired: n}, nil
}

// due returns up to limit clusters whose join deadline is past at now.
func (c *Catalog) due(now time.Time, limit int) ([]string, error) {
	var ids []string
	err := c.db.View(func(tx *store.Txn) error {
		end := joinKey(now.UnixNano()+1, "") // deadlines up to now sort before
		return tx.Scan(store.Key("w", "u", ""), nil, func(k, _ []byte) (bool, error) {
			if string(k) >= string(end) {
				return false, nil
			}
			ids = append(ids, string(k[len(end):])) // after "w/u/<deadline>/"
			return len(ids) < limit, nil
		})
	})
	return ids, err
}

// joinBy is the deadline of a public cluster created at at.
func (s *Service) joinBy(at time.Time) int64 {
	if s.cfg.JoinWindow <= 0 {
		return 0
	}
	return at.Add(s.cfg.JoinWindow).UnixNano()
}

// MaxRecordSize bounds a signed record or admin action taken from another
// node: ample for what this release signs (a record is under 4 KiB), so
// that no peer makes the log keep a large blob. It is checked where a
// proposal enters, never in Apply: entries logged before it stay valid.
const MaxRecordSize = 16 << 10

// maxSigSize bounds a signature as proposed: base64 of 64 bytes.
const maxSigSize = 128

// Proposed checks an operation another node proposes to the directory and
// returns it as the directory logs it: only a creation or a deletion
// (self-certifying: Apply checks the admin signature) of at most
// MaxRecordSize, and a public
// cluster's creation gets this directory's join deadline, whatever the
// proposer said. Joins and expiries are the directory's alone.
func (s *Service) Proposed(raw json.RawMessage, at time.Time) (Op, error) {
	var op Op
	if err := json.Unmarshal(raw, &op); err != nil {
		return Op{}, httpx.ErrInvalid.With("malformed cluster operation: %v", err)
	}
	writes := 0
	for _, set := range []bool{op.Create != nil, op.Delete != nil, op.Board != nil} {
		if set {
			writes++
		}
	}
	op.JoinBy, op.Quota, op.SlugHold = 0, nil, 0
	switch {
	case op.Joined != "" || op.Expire != nil || op.ExpirePosts != nil || op.Purge != nil || writes != 1:
		return Op{}, errNotProposable
	case op.Create != nil && (len(op.Create.Body) > MaxRecordSize || len(op.Create.Sig) > maxSigSize),
		op.Delete != nil && (len(op.Delete.Body) > MaxRecordSize || len(op.Delete.Sig) > maxSigSize):
		return Op{}, ErrBadRecord.With("a signed cluster record or action is at most %d bytes", MaxRecordSize)
	case op.Board != nil && (len(op.Board.Body) > MaxBoardOpSize || len(op.Board.Sig) > maxSigSize):
		return Op{}, ErrBadRecord.With("a signed board action is at most %d bytes", MaxBoardOpSize)
	case op.Create != nil:
		op.JoinBy = s.joinBy(at)
	case op.Board != nil:
		q := s.cfg.Quota
		op.Quota = &q
		if a, err := boardActionTarget(*op.Board); err == nil {
			op.SlugHold = s.slugHold(a.Op)
		}
	}
	return op, nil
}

// slugHold is the Op.SlugHold this directory stamps in a board action of
// kind op: its Config.SlugRedirect in a cluster patch.
func (s *Service) slugHold(op string) int64 {
	if op != ActPatchCluster {
		return 0
	}
	return int64(s.cfg.SlugRedirect)
}

// registeredAt learns, on a bootstrap node, of a new registration at its
// rendezvous under ns: a node now serves the cluster of a wall topic.
// Rooms register at every bootstrap node, so the one that orders the log
// logs it.
// It must not block: a cluster still awaiting its first member is
// logged as joined in the background.
func (s *Service) registeredAt(ns string) {
	id, ok := strings.CutPrefix(ns, topicPrefix)
	if !ok || !s.isDirectory() { // another member of a quorum: the leader's rendezvous saw it too
		return
	}
	cl, err := s.cfg.Catalog.Get(id)
	if err != nil || cl.JoinBy == 0 {
		return
	}
	s.joiningMu.Lock()
	defer s.joiningMu.Unlock()
	if s.joining[id] {
		return
	}
	s.joining[id] = true
	s.goroutine(func() {
		defer func() {
			s.joiningMu.Lock()
			delete(s.joining, id)
			s.joiningMu.Unlock()
		}()
		s.markJoined(s.ctx, id)
	})
}

// markJoined logs that cluster id was joined.
func (s *Service) markJoined(ctx context.Context, id string) {
	op := Op{Joined: id}
	_, err := s.cfg.Log.Propose(admission.Unmetered(ctx), Kind, s.now().UnixNano(), op)
	if err != nil && !errors.Is(err, errJoined) && !errors.Is(err, ErrClusterNotFound) && s.ctx.Err() == nil {
		s.log.Warn("recording a cluster's first member failed; the expiry sweep checks again", "cluster", id, "err", err)
	}
}

// SweepExpired logs, on the directory, the expiry of the public clusters
// whose join deadline is past (at most expireBatch at a time), and
// returns how many expired. A cluster being served meanwhile (its joined
// mark was lost) is logged as joined instead.
func (s *Service) SweepExpired(ctx context.Context) (int, error) {
	now := s.now()
	due, err := s.cfg.Catalog.due(now, expireBatch)
	if err != nil || len(due) == 0 {
		return 0, err
	}
	expire := due[:0]
	for _, id := range due {
		if s.cfg.Host.Serving(topicName(id)) {
			s.markJoined(ctx, id)
			continue
		}
		expire = append(expire, id)
	}
	if len(expire) == 0 {
		return 0, nil
	}
	res, err := cmdlog.ResultAs[Result](s.cfg.Log.Propose(admission.Unmetered(ctx), Kind, now.UnixNano(), Op{Expire: expire}))
	if errors.Is(err, errNothingDue) {
		return 0, nil
	}
	return res.Expired, err
}
