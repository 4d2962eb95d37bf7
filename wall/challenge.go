package wall

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
)

// Connect challenges. A proof of key (proof.go) signs a challenge that the
// node it is presented to issued (GET /v1/clusters/{id}/challenge), so a
// proof is good at that node only: the member record that carries it to
// other nodes (readable by any peer on a public cluster's topic) cannot
// open a socket elsewhere, and the node's nonce memory refuses it at home.
// A challenge is the time it was issued and a MAC of it and the cluster
// id under a key the node draws at start: the node keeps no state for it,
// and a restart voids what it issued before.

// challengeLife is how long a challenge is taken after it was issued.
const challengeLife = identity.ClockTolerance

// maxChallenge bounds a challenge as a member record carries it.
const maxChallenge = 64

// challenger issues and checks connect challenges.
type challenger struct{ key []byte }

func newChallenger() challenger {
	key := make([]byte, 32)
	rand.Read(key)
	return challenger{key: key}
}

func (c challenger) mac(cluster string, at int64) []byte {
	m := hmac.New(sha256.New, c.key)
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(at))
	m.Write([]byte("mesh wall challenge\n" + cluster + "\n"))
	m.Write(ts[:])
	return append(ts[:], m.Sum(nil)[:16]...)
}

// issue returns a challenge for cluster as of now.
func (c challenger) issue(cluster string, now time.Time) string {
	return base64.RawURLEncoding.EncodeToString(c.mac(cluster, now.Unix()))
}

// check fails unless ch is a challenge this node issued for cluster within
// challengeLife of now.
func (c challenger) check(cluster, ch string, now time.Time) error {
	b, err := base64.RawURLEncoding.DecodeString(ch)
	if err != nil || len(b) != 24 {
		return ErrBadChallenge
	}
	at := int64(binary.BigEndian.Uint64(b[:8]))
	if !hmac.Equal(b, c.mac(cluster, at)) {
		return ErrBadChallenge
	}
	if age := now.Sub(time.Unix(at, 0)); age > challengeLife || age < -time.Second {
		return ErrBadChallenge.With("the challenge was issued %ds ago: challenges last %ds, fetch another", int64(age/time.Second), int64(challengeLife/time.Second))
	}
	return nil
}

type challengeResponse struct {
	ClusterID string    `json:"cluster_id"`
	Challenge string    `json:"challenge"`
	ExpiresAt time.Time `json:"expires_at"`
}

// challenge answers GET /v1/clusters/{id}/challenge: a challenge for a
// proof of key on this node. A private cluster's is given only to a token
// holder (token or admin token, as for a connect): to anyone else its id
// answers as an unknown one does, so that a leaked id cannot be confirmed.
func (s *Service) challenge(w http.ResponseWriter, r *http.Request) error {
	cl, err := s.cluster(r.Context(), r.PathValue("id"), false)
	if err != nil {
		return err
	}
	if _, ok := cl.memberToken(clusterToken(r)); !cl.Public() && !ok {
		return ErrClusterNotFound
	}
	now := s.now()
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, challengeResponse{ClusterID: cl.ID, Challenge: s.challenges.issue(cl.ID, now),
		ExpiresAt: now.Add(challengeLife).UTC().Truncate(time.Second)})
	return nil
}
