package wall

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/nonces"
)

// Proof of key on connect (docs/api.md, "Proving a did"). A client that
// connects with a did may prove it holds the did's key: a Mesh-Sig (v1)
// over GET, the socket's path without its query, and as the body its
// handle, a line feed and a challenge the node issued (challenge.go),
// which the connect names in its query parameter challenge. It travels in the upgrade request's Mesh-Sig header, or, from
// a browser, which cannot set headers, in the query parameter sig. The
// node checks it (time and nonce too) before the upgrade, and the socket's
// welcome and presence frames say did_verified. The proof travels on with
// the member to other nodes, each of which checks the signature again
// (not its time: a member may have connected hours before a node asks for
// the roster), so a node can claim a verified did only for a key that
// signed for that handle in that cluster.

// maxProof bounds a proof: a Mesh-Sig header value.
const maxProof = 512

// DefaultProofNonces bounds the connect proofs' nonces a node remembers
// (Tuning.ProofNonces): each is kept identity.NonceMemory.
const DefaultProofNonces = 100_000

// proofNoncesPerClient is the share of the proofs' nonces (of all) one
// client address (httpx.AddrKey) may hold, so that no crowd short of a
// thousand addresses can make every signed connect wait: a thousandth
// (100 signed connects in 4 minutes of the default).
func proofNoncesPerClient(all int) int { return max(all/1000, 1) }

// SignConnect returns the proof that key's did is the did of the socket of
// handle in cluster clusterID, for the node that issued challenge: the
// value of a connect request's Mesh-Sig header, or of its query parameter
// sig (the connect also names the challenge).
func SignConnect(key ed25519.PrivateKey, clusterID, handle, challenge string, now time.Time) string {
	return identity.Sign(key, http.MethodGet, proofPath(clusterID), connectBody(handle, challenge), now)
}

// connectBody is the body a connect proof signs.
func connectBody(handle, challenge string) []byte { return []byte(handle + "\n" + challenge) }

// proofPath is the path a connect proof signs: the socket's, by id.
func proofPath(clusterID string) string { return "/v1/clusters/" + clusterID + "/ws" }

// proofMemory remembers the proofs that verified on this node (their
// digests, at most maxVerifiedProofs, all forgotten at once past it), so
// that the members another node sends at every roster exchange, up to
// maxRoster of them, cost a lookup each, not a signature verification: a
// node fetches a roster whenever its digest looks stale, and a rogue node
// can make it look so at every beat.
type proofMemory struct {
	mu     sync.Mutex
	m      map[[sha256.Size]byte]struct{}
	verify func(pub ed25519.PublicKey, msg, sig []byte) bool // ed25519.Verify; tests count its calls
}

func newProofMemory() *proofMemory {
	return &proofMemory{m: map[[sha256.Size]byte]struct{}{}, verify: ed25519.Verify}
}

// maxVerifiedProofs bounds the proofs remembered as verified.
const maxVerifiedProofs = 100_000

// check checks that proof is did's signature for handle in cluster and
// challenge: everything but its time and whose challenge it is.
func (pm *proofMemory) check(proof, challenge, cluster, handle, did string) (identity.SigHeader, error) {
	if len(proof) > maxProof || len(challenge) > maxChallenge {
		return identity.SigHeader{}, fmt.Errorf("proof longer than %d bytes or challenge longer than %d", maxProof, maxChallenge)
	}
	h, err := identity.ParseSigHeader(proof)
	switch {
	case err != nil:
		return h, err
	case h.Bound:
		return h, fmt.Errorf("sign %s, not %s", identity.SigVersion, identity.SigVersionBound)
	case identity.DIDFromPublicKey(h.Pubkey) != did:
		return h, errDIDMismatch
	case pm.has(cluster, handle, challenge, proof):
	case !pm.verify(h.Pubkey, identity.SigningString(http.MethodGet, proofPath(cluster), connectBody(handle, challenge), h.TS, h.Nonce), h.Sig):
		return h, fmt.Errorf("the signature does not verify over GET %s with the body %q", proofPath(cluster), connectBody(handle, challenge))
	default:
		pm.add(cluster, handle, challenge, proof)
	}
	return h, nil
}

// proofKey names proof for handle and challenge in cluster: the proof
// holds the key and what it signed but for those three.
func proofKey(cluster, handle, challenge, proof string) [sha256.Size]byte {
	return sha256.Sum256([]byte(cluster + "\x00" + handle + "\x00" + challenge + "\x00" + proof))
}

func (pm *proofMemory) has(cluster, handle, challenge, proof string) bool {
	k := proofKey(cluster, handle, challenge, proof)
	pm.mu.Lock()
	defer pm.mu.Unlock()
	_, ok := pm.m[k]
	return ok
}

func (pm *proofMemory) add(cluster, handle, challenge, proof string) {
	k := proofKey(cluster, handle, challenge, proof)
	pm.mu.Lock()
	defer pm.mu.Unlock()
	if len(pm.m) >= maxVerifiedProofs {
		clear(pm.m)
	}
	pm.m[k] = struct{}{}
}

var errDIDMismatch = errors.New("the proof is signed by another key than the did's")

// proveKey checks the connect request's proof, if any, for join j, and
// notes it in j: signature, challenge and time. Its nonce is claimed only
// once the request is sure to become a socket (claimProof), so that
// requests that never could (a plain GET, a wrong token, a full room)
// cost the nonce memory nothing. A client already holding its share of
// the nonces is refused before the signature is checked. A proof without
// a did names the signer's did.
func (s *Service) proveKey(r *http.Request, cl *Cluster, j *joinQuery) error {
	proof, err := proofOf(r)
	if err != nil || proof == "" {
		return err
	}
	now := s.now()
	if s.proofNonces.ScopeFull(httpx.AddrKey(httpx.ClientIP(r)), now) {
		return errClientNonces(s.cfg.ProofNonces)
	}
	if j.did == "" {
		if h, err := identity.ParseSigHeader(proof); err == nil {
			j.did = identity.DIDFromPublicKey(h.Pubkey)
		}
	}
	challenge := r.URL.Query().Get("challenge")
	if challenge == "" {
		return ErrBadChallenge.With("a proof of key signs a challenge of this node, named by ?challenge=: fetch one with GET /v1/clusters/%s/challenge", cl.ID)
	}
	h, err := s.proofs.check(proof, challenge, cl.ID, j.agent, j.did)
	switch {
	case errors.Is(err, errDIDMismatch):
		return ErrDIDMismatch.With("the proof is signed by %s, not by the key of did %s", identity.DIDFromPublicKey(h.Pubkey), j.did)
	case err != nil:
		return ErrBadProof.With("proof of key: %v", err)
	}
	if err := s.challenges.check(cl.ID, challenge, now); err != nil {
		return err
	}
	if d := now.Sub(time.Unix(h.TS, 0)); d > identity.ClockTolerance || d < -identity.ClockTolerance {
		return ErrStaleProof.With("the proof's ts is %ds away from the node's clock (limit %ds)", int64(d/time.Second), int64(identity.ClockTolerance/time.Second))
	}
	// The member carries the proof re-encoded (one space between fields,
	// the key and signature in padded standard base64): what the client
	// sent may pad it with white space, which every roster would carry.
	j.proof, j.challenge, j.signed = h.String(), challenge, h
	return nil
}

// claimProof claims the nonce of join j's proof, if any, for the client of
// r: the last check before the upgrade.
func (s *Service) claimProof(r *http.Request, j *joinQuery) error {
	if j.proof == "" {
		return nil
	}
	switch err := s.proofNonces.ClaimIn(httpx.AddrKey(httpx.ClientIP(r)), j.signed.Pubkey, j.signed.Nonce, s.now()); {
	case errors.Is(err, nonces.ErrFull):
		return httpx.ErrUnavailable.With("too many signed connects in the last %v: retry shortly", identity.NonceMemory)
	case errors.Is(err, nonces.ErrScopeFull):
		return errClientNonces(s.cfg.ProofNonces)
	case err != nil:
		return ErrProofReplay
	}
	return nil
}

func errClientNonces(all int) error {
	return httpx.ErrRateLimited.With("too many signed connects from your address in the last %v (at most %d): retry in a few minutes",
		identity.NonceMemory, proofNoncesPerClient(all))
}

// proofOf returns the connect request's proof: its Mesh-Sig header or its
// query parameter sig, "" when neither; both, or either twice, is refused.
func proofOf(r *http.Request) (string, error) {
	hdr, err := identity.SigOf(r.Header)
	if err != nil {
		return "", ErrBadProof.With("%v", err)
	}
	q := r.URL.Query()["sig"]
	switch {
	case len(q) > 1, len(q) == 1 && hdr != "":
		return "", ErrBadProof.With("send one proof: a Mesh-Sig header or a sig query parameter")
	case len(q) == 1:
		return strings.TrimSpace(q[0]), nil
	}
	return hdr, nil
}
