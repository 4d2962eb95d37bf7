package wall

import (
	"encoding/base64"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
)

// maxCreateBody bounds POST /v1/clusters bodies.
const maxCreateBody = 16 << 10

// writeRoutes names the wall's write surfaces by route, for the write
// budgets (internal/admission).
var writeRoutes = map[string]string{
	"POST /v1/clusters":        "cluster_create",
	"DELETE /v1/clusters/{id}": "cluster_delete",
}

// WriteRoutes returns the wall's write surfaces: route pattern to surface
// name.
func WriteRoutes() map[string]string {
	out := maps.Clone(writeRoutes)
	maps.Copy(out, boardWriteRoutes)
	return out
}

// Routes adds the wall's routes to mux.
func (s *Service) Routes(mux httpx.Router) {
	h := func(pattern string, fn httpx.HandlerFunc) { mux.Handle(pattern, httpx.Handle(s.log, fn)) }
	h("POST /v1/clusters", s.create)
	h("GET /v1/clusters", s.list)
	h("GET /v1/clusters/{id}", s.get)
	h("DELETE /v1/clusters/{id}", s.delete)
	h("GET /v1/clusters/{id}/ws", s.connect)
	h("GET /v1/clusters/{id}/challenge", s.challenge)
	h("GET /v1/clusters/{id}/history", s.history)
	s.boardRoutes(h)
}

type createRequest struct {
	Name        string `json:"name"`
	Visibility  string `json:"visibility"`
	Topic       string `json:"topic"`
	Description string `json:"description"`
}

// createResponse has every field whatever the cluster: a private
// cluster's slug is null, metadata not given is "".
type createResponse struct {
	ClusterID   string    `json:"cluster_id"`
	Token       string    `json:"token"`
	AdminToken  string    `json:"admin_token"`
	Visibility  string    `json:"visibility"`
	WS          string    `json:"ws"`
	Protocol    string    `json:"protocol"`
	Slug        *string   `json:"slug"`
	Name        string    `json:"name"`
	Topic       string    `json:"topic"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"created_at"`
}

func (s *Service) create(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(w, r, maxCreateBody)
	if err != nil {
		return err
	}
	req := createRequest{Visibility: Private}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := httpx.DecodeJSON(body, &req); err != nil {
			return err
		}
	}
	if req.Visibility == "" {
		req.Visibility = Private
	}
	if req.Visibility != Private && req.Visibility != Public {
		return httpx.ErrInvalid.With("visibility must be private or public, not %q", req.Visibility)
	}
	meta := Meta{Name: req.Name, Topic: req.Topic, Description: req.Description}
	if err := meta.validate(); err != nil {
		return err
	}
	now := s.now()
	_, signed, token, admin, err := newCluster(req.Visibility, meta, now.UnixMilli())
	if err != nil {
		return err
	}
	op := Op{Create: &signed, JoinBy: s.joinBy(now)}
	res, err := cmdlog.ResultAs[Result](s.cfg.Log.Propose(r.Context(), Kind, now.UnixNano(), op))
	if err != nil {
		return err
	}
	cl := res.Cluster
	ws := s.wsURL(r, cl.ID) + "?vis=public&agent="
	if !cl.Public() {
		ws = s.wsURL(r, cl.ID) + "?token=" + url.QueryEscape(token) + "&agent="
	}
	httpx.WriteJSON(w, http.StatusCreated, createResponse{
		ClusterID: cl.ID, Token: token, AdminToken: admin, Visibility: cl.Visibility, WS: ws, Protocol: Protocol,
		Slug: nullable(cl.Slug), Name: meta.Name, Topic: meta.Topic, Description: meta.Description, CreatedAt: cl.CreatedAt,
	})
	return nil
}

// wsURL is the WebSocket address of cluster id on this node, as the client
// of r reached it.
func (s *Service) wsURL(r *http.Request, id string) string {
	base := httpx.BaseURL(r, s.cfg.PublicURL)
	switch {
	case strings.HasPrefix(base, "https://"):
		base = "wss://" + strings.TrimPrefix(base, "https://")
	case strings.HasPrefix(base, "http://"):
		base = "ws://" + strings.TrimPrefix(base, "http://")
	}
	return base + "/v1/clusters/" + id + "/ws"
}

// clusterView is a public cluster on external surfaces (catalog, lookup).
type clusterView struct {
	ID            string `json:"id"`
	Slug          string `json:"slug"`
	Name          string `json:"name"`
	Topic         string `json:"topic"`
	Description   string `json:"description"`
	Visibility    string `json:"visibility"`
	BoardsEnabled bool   `json:"boards_enabled"`
	// CreatedAt is absent for the lobby, which was never created.
	CreatedAt *time.Time `json:"created_at,omitempty"`
	WS        string     `json:"ws"`
	Protocol  string     `json:"protocol"`
}

// clusterDetail is a single cluster's lookup: the view, and who is online
// (members with vis=private masked, ghosts absent).
type clusterDetail struct {
	clusterView
	Online  int      `json:"online"`
	Members []string `json:"members"`
}

func (s *Service) view(r *http.Request, cl *Cluster) clusterView {
	v := clusterView{ID: cl.ID, Slug: cl.Slug, Name: cl.Meta.Name, Topic: cl.Meta.Topic,
		Description: cl.Meta.Description, Visibility: cl.Visibility, BoardsEnabled: cl.Boards,
		WS: s.wsURL(r, cl.ID) + "?vis=public&agent=", Protocol: Protocol}
	if !cl.CreatedAt.IsZero() {
		v.CreatedAt = &cl.CreatedAt
	}
	return v
}

func (s *Service) list(w http.ResponseWriter, r *http.Request) error {
	out := []clusterView{}
	err := s.cfg.Catalog.Public(func(cl *Cluster) bool {
		out = append(out, s.view(r, cl))
		return true
	})
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"clusters": out, "count": len(out)})
	return nil
}

func (s *Service) get(w http.ResponseWriter, r *http.Request) error {
	cl, err := s.cluster(r.Context(), r.PathValue("id"), true)
	if err != nil {
		return err
	}
	members := s.online(r.Context(), cl, nil)
	v := clusterDetail{clusterView: s.view(r, cl), Online: len(members), Members: make([]string, 0, len(members))}
	for _, m := range members {
		v.Members = append(v.Members, m.masked())
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"cluster": v})
	return nil
}

// masked is how a member shows on external surfaces (spec 2.6).
func (m member) masked() string {
	if m.Vis != VisPrivate {
		return m.Agent
	}
	first, _ := utf8.DecodeRuneInString(m.Agent)
	return string(first) + "***"
}

// setSpectate checks a spectate query, 1 or events: on a public cluster
// only, as a ghost (vis absent or ghost), with no token; the handle
// defaults to spectatorHandle.
func (j *joinQuery) setSpectate(v string, cl *Cluster) error {
	switch {
	case v != "1" && v != spectateEvents:
		return httpx.ErrInvalid.With("spectate must be 1 or events, not %q", v)
	case !cl.Public():
		return httpx.ErrInvalid.With("spectate=1 is for public clusters; on a private one, connect with vis=ghost and the token")
	case j.vis != "" && j.vis != VisGhost:
		return httpx.ErrInvalid.With("a spectator is a ghost: vis must be ghost or absent, not %q", j.vis)
	case j.token != "":
		return httpx.ErrInvalid.With("a spectator holds no token: leave token out with spectate=1")
	}
	j.vis, j.spectate, j.eventsOnly = VisGhost, true, v == spectateEvents
	if j.agent == "" {
		j.agent = spectatorHandle
	}
	return nil
}

// clusterToken reads a cluster credential: header x-cluster-token,
// Authorization: Bearer, or query token.
func clusterToken(r *http.Request) string {
	if t := r.Header.Get("X-Cluster-Token"); t != "" {
		return strings.TrimSpace(t)
	}
	if scheme, t, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(t)
	}
	return r.URL.Query().Get("token")
}

func (s *Service) delete(w http.ResponseWriter, r *http.Request) error {
	cl, err := s.cluster(r.Context(), r.PathValue("id"), false)
	if err != nil {
		return err
	}
	tok := clusterToken(r)
	switch {
	case tok == "":
		return ErrTokenRequired.With("deleting a cluster needs its admin token (ak_) in x-cluster-token, Authorization: Bearer or ?token=")
	case strings.HasPrefix(tok, tokenPrefix):
		return ErrNotAdmin.With("a cluster token (ck_) cannot delete the cluster; use the admin token (ak_)")
	case cl.ID == LobbyID || !isAdminOf(tok, cl.ID):
		return ErrBadToken.With("not the admin token of cluster %s", cl.ID)
	}
	now := s.now()
	act, err := signAction(tok, ActionDelete, cl.ID, now.UnixMilli())
	if err != nil {
		return err
	}
	if _, err := s.cfg.Log.Propose(r.Context(), Kind, now.UnixNano(), Op{Delete: &act}); err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "cluster_id": cl.ID})
	return nil
}

// isUpgrade reports whether r asks for a WebSocket (RFC 6455 4.1): a GET
// with Upgrade: websocket, Connection: Upgrade, version 13 and a key of 16
// bytes. Only such a request may spend the node's proof nonces.
func isUpgrade(r *http.Request) bool {
	key, err := base64.StdEncoding.DecodeString(r.Header.Get("Sec-WebSocket-Key"))
	return r.Method == http.MethodGet && err == nil && len(key) == 16 &&
		headerHasToken(r.Header, "Upgrade", "websocket") && headerHasToken(r.Header, "Connection", "upgrade") &&
		r.Header.Get("Sec-WebSocket-Version") == "13"
}

// headerHasToken reports whether header name lists token (comma-separated,
// case-insensitive).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// joinQuery is a WebSocket connect's query, checked before the upgrade.
type joinQuery struct {
	agent, did, vis, token string
	owner                  bool
	proof                  string             // the did's proof of key (proof.go), "" when unproved
	challenge              string             // the challenge proof signed
	signed                 identity.SigHeader // proof, parsed
	// spectate: a read-only ghost of a public cluster (spectate=1), as the
	// cluster's web page connects: it receives broadcasts and presence,
	// never a direct message, and every frame it sends is refused.
	spectate bool
	// eventsOnly: a spectator of the cluster's events alone
	// (spectate=events), as a page whose visitor joined as a browser peer
	// keeps: the board, cluster_updated and closed frames, no message and
	// no presence (its peer hears those on the wire).
	eventsOnly bool
}

// spectateEvents is the spectate value of a spectator of events alone.
const spectateEvents = "events"

// spectatorHandle is a spectating socket's handle when its query names none.
const spectatorHandle = "spectator"

// errReadOnly answers every frame a spectating socket sends.
var errReadOnly = badFrame("read_only", "this socket spectates (spectate=1): it reads the wall and sends nothing; connect without spectate to speak")

func (s *Service) parseJoin(r *http.Request, cl *Cluster) (joinQuery, error) {
	q := r.URL.Query()
	j := joinQuery{agent: q.Get("agent"), did: q.Get("did"), vis: q.Get("vis"), token: q.Get("token")}
	if q.Has("spectate") {
		if err := j.setSpectate(q.Get("spectate"), cl); err != nil {
			return j, err
		}
	}
	if j.agent == "" {
		return j, httpx.ErrInvalid.With("query agent=<handle> is required")
	}
	if err := validHandle(j.agent); err != nil {
		return j, httpx.ErrInvalid.With("agent: %v", err)
	}
	if j.did != "" {
		if err := validDID(j.did); err != nil {
			return j, httpx.ErrInvalid.With("did: %v", err)
		}
	}
	switch j.vis {
	case "":
		j.vis = VisPublic
	case VisPublic, VisPrivate, VisGhost:
	default:
		return j, httpx.ErrInvalid.With("vis must be public, private or ghost, not %q", j.vis)
	}
	if err := s.proveKey(r, cl, &j); err != nil {
		return j, err
	}
	if j.token == "" {
		if !cl.Public() {
			return j, ErrTokenRequired.With("this cluster is private: connect with ?token=<cluster token>")
		}
		return j, nil
	}
	tok, ok := cl.memberToken(j.token)
	if !ok {
		return j, ErrBadToken
	}
	j.token, j.owner = tok, true
	return j, nil
}

func (s *Service) connect(w http.ResponseWriter, r *http.Request) error {
	cl, err := s.cluster(r.Context(), r.PathValue("id"), false)
	if err != nil {
		return err
	}
	if !isUpgrade(r) {
		if _, err := s.parseJoin(r, cl); err != nil {
			return err // what is wrong with the query first: a client fixing it then learns to upgrade
		}
		return httpx.E(http.StatusUpgradeRequired, "websocket_required", "this endpoint speaks WebSocket: connect with a WebSocket client")
	}
	j, err := s.parseJoin(r, cl)
	if err != nil {
		return err
	}
	if err := s.checkRoom(cl.ID, j); err != nil {
		return err
	}
	if err := s.checkHandle(r.Context(), cl, j); err != nil {
		return err
	}
	if err := s.claimProof(r, &j); err != nil {
		return err
	}
	if !s.track() {
		return httpx.ErrUnavailable.With("the node is shutting down")
	}
	conn, err := upgrade(w, r)
	if err != nil {
		s.wg.Done()
		return nil // the upgrader answered the client itself
	}
	sk := newSocket(conn, s, j)
	// Anyone with a private cluster's token sees all its traffic, direct
	// messages included (spec 5): a ghost is how one only looks.
	sk.spectator = !cl.Public() && j.vis == VisGhost && j.owner
	sk.readOnly, sk.eventsOnly = j.spectate, j.eventsOnly
	// The socket lives on in a goroutine of its own, so that the request's
	// goroutine, its stack grown by the HTTP machinery, ends here.
	go func() {
		defer s.wg.Done()
		s.serveSocket(cl, j.token, sk)
	}()
	return nil
}

// serveSocket puts upgraded socket sk in the room of cluster cl and serves
// it until it closes.
func (s *Service) serveSocket(cl *Cluster, token string, sk *socket) {
	room, err := s.enter(cl, token, sk)
	switch {
	case errors.Is(err, ErrClusterNotFound): // deleted since the lookup
		sk.closeAfter(encodeFrame(closedFrame{Kind: KindClosed, Reason: causeDeleted.reason}), causeDeleted)
		return
	case errors.Is(err, errTermsChanged): // made private or public since the lookup
		c := s.termsCause(cl.ID)
		sk.closeAfter(encodeFrame(closedFrame{Kind: KindClosed, Reason: c.reason}), c)
		return
	case errors.Is(err, ErrRoomFull): // since checkRoom
		sk.abort(causeFull)
		return
	case err != nil:
		sk.abort(causeJoin)
		s.log.Warn("wall: join failed", "cluster", cl.ID, "err", err)
		return
	}
	sk.readLoop(func(data []byte, refused error) {
		if sk.readOnly && refused == nil {
			refused = errReadOnly
		}
		room.handleSend(sk, data, refused)
	})
	s.leave(room, sk)
}
