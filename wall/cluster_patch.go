package wall

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/agentmesh/mesh/internal/httpx"
)

// PATCH /v1/clusters/<id> (admin): boards_enabled and props (boards.go),
// name and visibility (cluster_update.go), in one signed action.

// clusterPatch is a PATCH request, decoded.
type clusterPatch struct {
	boards   *bool
	props    PropsPatch
	hasProps bool
	name     *string
	vis      string // the visibility it changes to, "" for none
}

func decodeClusterPatch(fields map[string]json.RawMessage) (clusterPatch, error) {
	var p clusterPatch
	if raw, ok := fields["boards_enabled"]; ok {
		p.boards = new(bool)
		if json.Unmarshal(raw, p.boards) != nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return p, httpx.ErrInvalid.With("boards_enabled must be true or false")
		}
	}
	raw, hasProps := fields["props"]
	patch, err := DecodeProps(raw, ClusterProps)
	if err != nil {
		return p, err
	}
	p.props, p.hasProps = patch, hasProps
	if _, ok := fields["name"]; ok {
		p.name = new(string)
		if err := stringField(fields, "name", p.name); err != nil {
			return p, err
		}
		if err := (&Meta{Name: *p.name}).validate(); err != nil {
			return p, err
		}
	}
	if err := stringField(fields, "visibility", &p.vis); err != nil {
		return p, err
	}
	if _, ok := fields["visibility"]; ok && p.vis != Public && p.vis != Private {
		return p, httpx.ErrInvalid.With("visibility must be private or public, not %q", p.vis)
	}
	return p, nil
}

// clusterPatchView is the answer of PATCH /v1/clusters/<id>.
type clusterPatchView struct {
	ClusterID     string `json:"cluster_id"`
	BoardsEnabled bool   `json:"boards_enabled"`
	Props         Props  `json:"props"`
	Name          string `json:"name"`
	Visibility    string `json:"visibility"`
	// Slug is a public cluster's, null for a private one.
	Slug *string `json:"slug"`
	// Changed names what the request changed.
	Changed []string `json:"changed"`
	// Token is the cluster's new member token (ck_), when it turned
	// private: shown only here.
	Token *string `json:"token"`
	// Redirect is the former slug of a renamed public cluster, which
	// leads to it until then.
	Redirect *SlugMove `json:"redirect"`
	// Note says what a change of visibility did, for people.
	Note *string `json:"note"`
}

const (
	notePrivate = "the cluster is private now: it left the public catalog, and its new token (token) admits to it, " +
		"the former one no more; every socket of the cluster was closed, on every node, and its traffic is sealed from now on"
	notePublic = "the cluster is public now: it is in the public catalog and anyone may join without a token; its token stays " +
		"valid as the owner's credential (history); what was sealed while it was private (its history of that period) stays " +
		"sealed: only the token or the admin token opens it"
)

func (s *Service) patchCluster(w http.ResponseWriter, r *http.Request) error {
	g, err := s.access(r, true)
	if err != nil {
		return err
	}
	fields, err := readFields(w, r, "boards_enabled", "props", "name", "visibility")
	if err != nil {
		return err
	}
	p, err := decodeClusterPatch(fields)
	if err != nil {
		return err
	}
	if p.vis == g.cl.Visibility {
		p.vis = "" // not a change
	}
	if p.boards == nil && !p.hasProps && p.name == nil && p.vis == "" {
		if _, ok := fields["visibility"]; !ok {
			return httpx.ErrInvalid.With("nothing to change: give boards_enabled, props, name or visibility")
		}
	}
	switch {
	case p.vis != "" && g.cl.V != recordVersion:
		return ErrRecordV1
	case p.vis != "" && g.cl.Usage.Boards > 0:
		return ErrBoardsPresent.With("the cluster has %d boards, stored in the form of its visibility: delete them before changing it", g.cl.Usage.Boards)
	}
	view := clusterPatchView{Changed: changedFields(fields, p)}
	if len(view.Changed) > 0 {
		terms := *g.cl
		res, err := s.propose(r.Context(), g, func() (BoardAction, error) {
			if !sameTerms(g.cl, &terms) { // a concurrent change of visibility came first
				return BoardAction{}, ErrStale.With("the cluster's visibility changed while the request was made; look at it again")
			}
			return g.clusterPatch(p, &view)
		})
		if err != nil {
			return err
		}
		g.cl, view.Redirect = res.Cluster, res.Moved
	}
	return s.writePatchView(w, g, view)
}

// changedFields names what p changes: the fields given, but a visibility
// the cluster has already.
func changedFields(fields map[string]json.RawMessage, p clusterPatch) []string {
	out := []string{}
	for _, k := range []string{"boards_enabled", "props", "name", "visibility"} {
		if _, ok := fields[k]; ok && (k != "visibility" || p.vis != "") {
			out = append(out, k)
		}
	}
	return out
}

// clusterPatch builds the action of p against g's cluster. A change of
// visibility carries the cluster's metadata and props in the new form; a
// turn to private, a new member token, which it sets in view.
func (g *signer) clusterPatch(p clusterPatch, view *clusterPatchView) (BoardAction, error) {
	a := BoardAction{Op: ActPatchCluster, Boards: p.boards, Rename: p.name != nil, Visibility: p.vis}
	meta, err := g.meta()
	if err != nil {
		return a, err
	}
	if p.name != nil {
		meta.Name = *p.name
	}
	props := g.clusterProps()
	if p.hasProps {
		props = props.Apply(p.props)
	}
	seal, public := g.seal, g.cl.Public()
	view.Token = nil
	switch p.vis {
	case Private:
		token := newSecret(tokenPrefix)
		seal, public, view.Token = newSealer(g.cl.ID, token), false, &token
		a.Verifier, a.TokenWrap = tokenVerifier(g.cl.ID, token), wrapToken(g.cl.ID, g.admin, token)
	case Public:
		seal, public = nil, true
	}
	if a.Rename || p.vis != "" {
		if public {
			a.Meta = &meta
		} else {
			a.SealedMeta = sealedMeta(seal, meta)
		}
	}
	if p.hasProps || p.vis != "" {
		b, _ := json.Marshal(props)
		if public {
			a.Props = b
		} else {
			a.Sealed = sealString(seal, sealProps, b)
		}
	}
	return a, nil
}

// meta is the cluster's metadata as g reads it.
func (g *signer) meta() (Meta, error) {
	if g.cl.Public() {
		return *g.cl.Meta, nil
	}
	return openMeta(g.seal, g.cl)
}

// writePatchView answers a PATCH with the cluster as it stands after it,
// read with the credential g holds (or the new token view names).
func (s *Service) writePatchView(w http.ResponseWriter, g *signer, view clusterPatchView) error {
	if view.Token != nil {
		g.member, g.seal = *view.Token, newSealer(g.cl.ID, *view.Token)
	} else if g.cl.Public() {
		g.seal = nil
	}
	meta, err := g.meta()
	if err != nil {
		return err
	}
	view.ClusterID, view.BoardsEnabled, view.Props = g.cl.ID, g.cl.Boards, g.clusterProps()
	view.Name, view.Visibility = meta.Name, g.cl.Visibility
	if g.cl.Public() {
		view.Slug = &g.cl.Slug
	}
	for _, c := range view.Changed {
		if c != "visibility" {
			continue
		}
		note := notePrivate
		if g.cl.Public() {
			note = notePublic
		}
		view.Note = &note
	}
	httpx.WriteJSON(w, http.StatusOK, view)
	return nil
}
