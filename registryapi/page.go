package registryapi

import (
	"embed"
	"errors"
	"html/template"
	"net/http"

	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/site"
)

// The public address of an agent (spec 3.2, 4.4), served by every node
// from its replica: GET /agent/<id> is an HTML landing page for browsers
// and the discovery card (DiscoveryView) for JSON clients;
// /agent/<id>/.well-known/agent.json and agent-card.json mirror the full
// card. GET /agents is the oracle's page: its search with filters, whose
// results link to the agents' pages. The pages escape everything the agent
// or the catalog wrote (html/template), share the site's layout and style
// sheet (internal/site), and need no script: their Content-Security-Policy
// allows none.

//go:embed pages/agent.html pages/agents.html
var pageFiles embed.FS

// pageTemplates are the registry's pages, parsed with the site's layout.
type pageTemplates struct{ agent, agents *template.Template }

func newPageTemplates(s *site.Site) pageTemplates {
	return pageTemplates{agent: s.Templates(pageFiles, "pages/agent.html"), agents: s.Templates(pageFiles, "pages/agents.html")}
}

// pageRoutes adds the public address's routes and the agents page.
func (a *API) pageRoutes(mux httpx.Router) {
	mux.Handle("GET /agent/{id}", http.HandlerFunc(a.agentPage))
	h := func(pattern string, fn httpx.HandlerFunc) { mux.Handle(pattern, httpx.Handle(a.log, fn)) }
	h("GET /agent/{id}/.well-known/agent.json", a.mirroredCard)
	h("GET /agent/{id}/.well-known/agent-card.json", a.mirroredCard)
	mux.Handle("GET /agents", http.HandlerFunc(a.agentsPage))
	mux.Handle("GET /search", http.HandlerFunc(toAgentsPage))
}

// agentPage serves GET /agent/<id>: JSON to a client that asks for it,
// HTML otherwise, errors included.
func (a *API) agentPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	asJSON := httpx.WantsJSON(r)
	ag, v, err := a.agentView(r)
	switch {
	case err != nil && asJSON:
		httpx.WriteError(a.log, w, r, err)
	case err != nil:
		a.errorPage(w, r, err)
	case asJSON:
		w.Header().Set("Access-Control-Allow-Origin", "*")
		httpx.WriteJSON(w, http.StatusOK, v)
	default:
		a.site.Render(w, http.StatusOK, site.CSP, a.pages.agent, a.newPageData(r, ag, v))
	}
}

func (a *API) agentView(r *http.Request) (*Agent, *DiscoveryView, error) {
	ref, err := a.pathID(r)
	if err != nil {
		return nil, nil, err
	}
	ag, err := a.publicAgent(r, ref)
	if err != nil {
		return nil, nil, err
	}
	v, err := a.discovery(r, ag, a.now())
	return ag, v, err
}

// mirroredCard serves the full card of a registered agent (mirrorCard).
func (a *API) mirroredCard(w http.ResponseWriter, r *http.Request) error {
	ref, err := a.pathID(r)
	if err != nil {
		return err
	}
	ag, err := a.publicAgent(r, ref)
	if err != nil {
		return err
	}
	card, err := mirrorCard(ag)
	if err != nil {
		return err
	}
	w.Header().Set("Access-Control-Allow-Origin", "*")
	httpx.WriteJSON(w, http.StatusOK, card)
	return nil
}

// errorPage answers err as the site's error page; an unknown agent is
// "No such agent".
func (a *API) errorPage(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpx.Error
	if !errors.As(err, &he) {
		a.log.Error("agent page", "path", r.URL.Path, "err", err)
	}
	a.site.Error(w, r, err, "No such agent")
}

// toAgentsPage sends GET /search, with its query, to the agents page.
func toAgentsPage(w http.ResponseWriter, r *http.Request) {
	u := "/agents"
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}
