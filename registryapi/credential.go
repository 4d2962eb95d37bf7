package registryapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/store"
)

// Credential names, for the write budgets (internal/admission), the
// established credential r carries: "agent:<id>" for an unexpired bearer
// token of agent <id>, or for a Mesh-Sig over the body by the key bound
// to registered agent <id>; "" for anything else. A key bound to nothing
// costs nothing to make, so it earns no budget of its own: its requests
// count at their address. The signature's nonce is not claimed here (the
// write claims it when it applies), so a captured request replayed within
// its 120 s spends its agent's budget, never its effect.
//
// To check a Mesh-Sig it reads the body (up to the largest any write
// takes) and puts it back for the handler.
func (a *API) Credential(w http.ResponseWriter, r *http.Request) (string, error) {
	if auth := r.Header.Get("Authorization"); auth != "" {
		if c, err := a.bearer(r); err == nil {
			return "agent:" + c.Sub, nil
		}
		return "", nil
	}
	if r.Header.Get(identity.SigHeaderName) == "" {
		return "", nil
	}
	body, err := httpx.ReadBody(w, r, a.maxWriteBody())
	if err != nil {
		return "", err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	sig, err := a.signer(r, body)
	if err != nil || sig == nil {
		return "", nil // the handler refuses it, if it must
	}
	id, err := a.cfg.Directory.KeyHolder(sig.Pubkey)
	if errors.Is(err, ErrAgentNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return "agent:" + id, nil
}

// maxWriteBody is the largest body a write takes (a catalog import).
func (a *API) maxWriteBody() int64 { return a.cfg.MaxBody * 16 }

// KeyHolder returns the registered agent that pub (canonical base64) is
// bound to, or ErrAgentNotFound.
func (d *Directory) KeyHolder(pub string) (string, error) {
	var id []byte
	err := d.db.View(func(tx *store.Txn) error {
		var err error
		id, err = tx.Get(pubkeyKey(pubHex(pub)))
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return "", ErrAgentNotFound
	}
	if err != nil {
		return "", err
	}
	ag, err := d.Agent(string(id))
	if err != nil {
		return "", err
	}
	if ag.Pubkey != pub {
		return "", ErrAgentNotFound
	}
	return ag.ID, nil
}
