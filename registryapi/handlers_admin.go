package registryapi

import (
	"net/http"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
)

// catalogRequest is the body of POST /v1/admin/catalog.
type catalogRequest struct {
	Listings []ImportListing `json:"listings"`
}

func (q *catalogRequest) validate() error {
	if len(q.Listings) == 0 || len(q.Listings) > maxCatalogListings {
		return httpx.ErrInvalid.With("listings must hold 1 to %d entries", maxCatalogListings)
	}
	for i := range q.Listings {
		l := &q.Listings[i]
		if err := ValidateNewID(l.AgentID); err != nil {
			return httpx.ErrInvalid.With("listings[%d]: %v", i, err)
		}
		for _, f := range []struct{ name, v string }{{"name", l.Name}, {"description", l.Description}} {
			if err := validateText(f.name, f.v, maxTextLen, false); err != nil {
				return httpx.ErrInvalid.With("listings[%d]: %v", i, err)
			}
		}
		if err := validateEndpoint("url", l.URL); err != nil {
			return httpx.ErrInvalid.With("listings[%d]: %v", i, err)
		}
		if err := validateCapabilities(l.Capabilities); err != nil {
			return httpx.ErrInvalid.With("listings[%d]: %v", i, err)
		}
	}
	return nil
}

// importCatalog imports listings of an existing directory; an agent that
// later registers on such an id deregisters to catalog-only (spec 3.1).
func (a *API) importCatalog(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(w, r, a.maxWriteBody())
	if err != nil {
		return err
	}
	sig, err := a.requireSigner(r, body)
	if err != nil {
		return err
	}
	if !a.isAdmin(sig.Pubkey) {
		return ErrNotAdmin
	}
	var req catalogRequest
	if err := httpx.DecodeJSON(body, &req); err != nil {
		return err
	}
	if err := req.validate(); err != nil {
		return err
	}
	res, err := a.propose(r.Context(), Command{At: a.now().UnixNano(), Sig: sig, Catalog: &CatalogOp{Listings: req.Listings}})
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"status": "imported", "imported": res.Imported})
	return nil
}

func (a *API) isAdmin(pub string) bool {
	if a.cfg.IsAdmin != nil {
		k, err := identity.DecodePublicKey(pub)
		return err == nil && a.cfg.IsAdmin(k)
	}
	for _, k := range a.cfg.Admins {
		if identity.EncodePublicKey(k) == pub {
			return true
		}
	}
	return false
}
