package registryapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
)

// The did:mesh alias (registry spec 9): did:mesh:<key>, where <key> is the
// multibase key a did:key carries (did:key:z6Mk… → did:mesh:z6Mk…), names
// the agent registered with that key, wherever an agent id goes in a path
// (GET /v1/agents/{id} and its identity and reputation, feedback, the
// public address). It is resolved at each request, never stored: the agent
// id stays the only id, and the alias follows the key's binding (a key
// rotation or a deregistration) the moment the node applies it. One key
// serves one agent (a second binding is refused, 409 pubkey_in_use), so an
// alias names at most one agent. No agent id may start with did:mesh:
// (ValidateNewID), so no one holds an alias but the key's agent.

// AliasPrefix starts every did:mesh alias.
const AliasPrefix = "did:mesh:"

const didKeyPrefix = "did:key:"

// ErrBadAlias: a did:mesh alias whose key is not an Ed25519 key as a
// did:key carries it.
var ErrBadAlias = httpx.E(http.StatusBadRequest, "invalid_alias", "malformed did:mesh alias")

// AliasOf is the did:mesh alias of did (a did:key), "" for none.
func AliasOf(did string) string {
	key, ok := strings.CutPrefix(did, didKeyPrefix)
	if !ok {
		return ""
	}
	return AliasPrefix + key
}

// isAlias reports whether id is in the alias's namespace, in any case: an
// id DID:MESH:… would read as an alias to a person.
func isAlias(id string) bool {
	return len(id) >= len(AliasPrefix) && strings.EqualFold(id[:len(AliasPrefix)], AliasPrefix)
}

// parseAlias returns the did:key and the canonical base64 key an alias
// stands for.
func parseAlias(alias string) (did, pub string, err error) {
	key, ok := strings.CutPrefix(alias, AliasPrefix)
	if !ok {
		return "", "", ErrBadAlias.With("malformed alias %.80q: write did:mesh: in lower case, then the key as its did:key carries it (z6Mk…)", alias)
	}
	raw, err := identity.PublicKeyFromDID(didKeyPrefix + key)
	if err != nil || identity.DIDFromPublicKey(raw) != didKeyPrefix+key {
		return "", "", ErrBadAlias.With("malformed alias %.80q: the key must be an Ed25519 key in multibase base58btc, as a did:key carries it (z6Mk…)", alias)
	}
	return didKeyPrefix + key, identity.EncodePublicKey(raw), nil
}

// Bounds of the alias lookups a node makes beyond its replica.
const (
	// aliasMissTTL is how long a node remembers that an alias led nowhere.
	aliasMissTTL = 30 * time.Second
	// maxAliasMisses bounds the aliases remembered so.
	maxAliasMisses = 4096
	// aliasLookups bounds the lookups under way at once.
	aliasLookups = 16
	// aliasLookupTimeout bounds one lookup, shared by the requests that
	// wait for it.
	aliasLookupTimeout = 5 * time.Second
)

// aliases resolves did:mesh aliases: from the replica's key index, and,
// on a node still catching up, through Config.KeyFallback (the DHT record
// under the did:key, then the directory). Such lookups are bounded: one at
// a time per alias (others wait for its answer), aliasLookups at once in
// all, and an alias that led nowhere is answered from memory for
// aliasMissTTL, so that a client naming made-up aliases costs no more than
// aliasLookups lookups at a time and one per alias every 30 s.
type aliases struct {
	flight singleflight.Group
	slots  chan struct{}

	mu     sync.Mutex
	misses map[string]time.Time // alias → when it may be looked up again
}

func newAliases() *aliases {
	return &aliases{slots: make(chan struct{}, aliasLookups), misses: map[string]time.Time{}}
}

// agentRef is an agent a path names: by its id, or by a did:mesh alias
// resolved to the id of the agent that held the alias's key then.
type agentRef struct {
	id    string
	alias string // the alias, "" for an id
	did   string // the did:key of alias
}

// check returns the agent read by r.id if it is the one r names: named by
// an alias, the agent must hold the alias's key. The key's agent may have
// changed since the alias was resolved (deregistered, its id registered
// again by another key), and an id read from the DHT may give a newer
// record than the did's: neither is served under the alias.
func (r agentRef) check(ag *Agent, err error) (*Agent, error) {
	if err == nil && r.alias != "" && ag.DID != r.did {
		return nil, aliasNotFound(r.alias, ErrAgentNotFound)
	}
	return ag, err
}

// resolveAlias returns the registered agent that alias names.
func (a *API) resolveAlias(ctx context.Context, alias string) (agentRef, error) {
	did, pub, err := parseAlias(alias)
	if err != nil {
		return agentRef{}, err
	}
	id, err := a.cfg.Directory.KeyHolder(pub)
	if err != nil && isNotFound(err) && a.cfg.KeyFallback != nil {
		id, err = a.aliases.fallback(ctx, alias, did, a.cfg.Now(), a.cfg.KeyFallback)
	}
	if err != nil {
		return agentRef{}, aliasNotFound(alias, err)
	}
	return agentRef{id: id, alias: alias, did: did}, nil
}

// fallback asks lookup for the agent of did, as resolveAlias describes.
func (x *aliases) fallback(ctx context.Context, alias, did string, now time.Time, lookup func(context.Context, string) (string, error)) (string, error) {
	if x.missed(alias, now) {
		return "", ErrAgentNotFound
	}
	v, err, _ := x.flight.Do(alias, func() (any, error) {
		// Shared by every request for alias: no one request's end cuts it.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), aliasLookupTimeout)
		defer cancel()
		select {
		case x.slots <- struct{}{}:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		defer func() { <-x.slots }()
		id, err := lookup(ctx, did)
		if isNotFound(err) {
			x.miss(alias, now)
		}
		return id, err
	})
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

func (x *aliases) missed(alias string, now time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	until, ok := x.misses[alias]
	if ok && !now.Before(until) {
		delete(x.misses, alias)
		return false
	}
	return ok
}

func (x *aliases) miss(alias string, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.misses) >= maxAliasMisses {
		for k, until := range x.misses { // the lapsed first, else any
			if !now.Before(until) || len(x.misses) >= maxAliasMisses {
				delete(x.misses, k)
			}
		}
	}
	x.misses[alias] = now.Add(aliasMissTTL)
}

// isNotFound reports whether err is an agent's absence.
func isNotFound(err error) bool { return errors.Is(err, ErrAgentNotFound) }

// aliasNotFound names alias in an absence; other errors pass as they are.
func aliasNotFound(alias string, err error) error {
	if isNotFound(err) {
		return ErrAgentNotFound.With("no registered agent holds the key of %s", alias)
	}
	return err
}
