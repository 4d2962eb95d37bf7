package site

import (
	"html/template"
	"net/http"

	"github.com/agentmesh/mesh/internal/httpx"
)

// AgentLink is an agent as a list shows it (the home page, the agents
// page): every field is words to show, made by the registry.
type AgentLink struct {
	ID, Name, Description string
	// Status is the agent's one badge in words, StatusClass its class
	// (answering, failing, online, offline, registered, catalog).
	Status, StatusClass string
	Verified            bool
	Capabilities        []string
	// Price is its cheapest request price in words, "" when unknown.
	Price string
	// Reputation is its weighted score in words.
	Reputation string
}

// ClusterLink is a public cluster as the home page lists it.
type ClusterLink struct {
	Slug, Name, Topic string
	// Online counts who is online, when this node knows; nil otherwise.
	Online *int
}

// HomeConfig is what the front door lists, asked at each request.
type HomeConfig struct {
	// Agents returns up to n agents online now, the best reputed first.
	Agents func(r *http.Request, n int) ([]AgentLink, error)
	// Clusters returns up to n public clusters, the busiest first.
	Clusters func(r *http.Request, n int) ([]ClusterLink, error)
}

// Home is the front door: GET / is the home page for a browser and an
// index of the API for a JSON client (httpx.WantsJSON).
type Home struct {
	cfg  HomeConfig
	site *Site
	page *template.Template
}

// NewHome returns the front door of s.
func (s *Site) NewHome(cfg HomeConfig) *Home {
	return &Home{cfg: cfg, site: s, page: s.Templates(webFS, "web/home.html")}
}

// How many of each the home page shows.
const (
	homeAgents   = 12
	homeClusters = 8
)

// homeData is what web/home.html reads.
type homeData struct {
	Agents   []AgentLink
	Clusters []ClusterLink
}

// apiIndex is GET / for a JSON client.
type apiIndex struct {
	Service string            `json:"service"`
	Node    string            `json:"node"`
	Role    string            `json:"role"`
	Version string            `json:"version"`
	Links   map[string]string `json:"links"`
}

// indexLinks are the index's links: where a program starts.
var indexLinks = map[string]string{
	"openapi": "/openapi.json", "health": "/health", "metrics": "/metrics",
	"search": "/v1/search", "agent": "/v1/agents/{id}", "clusters": "/v1/clusters",
	"agents_page": "/agents", "clusters_page": "/clusters",
}

func (h *Home) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	info := h.site.info
	if httpx.WantsJSON(r) {
		httpx.WriteJSON(w, http.StatusOK, apiIndex{Service: "mesh", Node: info.Node, Role: info.Role, Version: info.Version, Links: indexLinks})
		return
	}
	var d homeData
	var err error
	if d.Agents, err = h.cfg.Agents(r, homeAgents); err == nil {
		d.Clusters, err = h.cfg.Clusters(r, homeClusters)
	}
	if err != nil {
		h.site.Error(w, r, err, "")
		return
	}
	h.site.Render(w, http.StatusOK, CSP, h.page, d)
}
