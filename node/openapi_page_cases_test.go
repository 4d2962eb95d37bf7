package node

// pageCases exercise the public address: the embedded agent's page, its
// discovery card and mirrored card; a listing's missing card; unknown ids.
func pageCases(h *apiHarness) {
	asJSON := []string{"Accept", "application/json"}
	asBrowser := []string{"Accept", browserAccept}
	card := h.run(apiCase{name: "discovery card", method: "GET", path: "/agent/api-agent", hdr: asJSON, status: 200})
	h.run(apiCase{name: "agent page", method: "GET", path: "/agent/api-agent", hdr: asBrowser, status: 200})
	h.run(apiCase{name: "discovery card of nobody", method: "GET", path: "/agent/nobody", hdr: asJSON, status: 404, code: "agent_not_found"})
	h.run(apiCase{name: "agent page of nobody", method: "GET", path: "/agent/nobody", hdr: asBrowser, status: 404})
	h.run(apiCase{name: "listing's discovery card", method: "GET", path: "/agent/listed-1", hdr: asJSON, status: 200})
	h.run(apiCase{name: "discovery card by alias", method: "GET", path: "/agent/" + card["did_mesh"].(string), hdr: asJSON, status: 200})
	h.run(apiCase{name: "discovery card by a malformed alias", method: "GET", path: "/agent/did:mesh:nope", hdr: asJSON, status: 400, code: "invalid_alias"})
	h.run(apiCase{name: "agent page by a malformed alias", method: "GET", path: "/agent/did:mesh:nope", hdr: asBrowser, status: 400})
	for _, p := range []string{"agent.json", "agent-card.json"} {
		h.run(apiCase{name: "mirrored " + p, method: "GET", path: "/agent/api-agent/.well-known/" + p, status: 200})
		h.run(apiCase{name: "mirrored " + p + " of a listing", method: "GET", path: "/agent/listed-1/.well-known/" + p,
			status: 404, code: "card_not_found"})
	}
	h.run(apiCase{name: "the pages' style sheet", method: "GET", path: "/assets/site.css", status: 200})
	h.run(apiCase{name: "the pages' icon", method: "GET", path: "/assets/favicon.svg", status: 200})
	h.run(apiCase{name: "the home page", method: "GET", path: "/", hdr: asBrowser, status: 200})
	h.run(apiCase{name: "the API's index", method: "GET", path: "/", hdr: []string{"Accept", "application/*"}, status: 200})
	h.run(apiCase{name: "the agents page", method: "GET", path: "/agents?q=echo&online=online", hdr: asBrowser, status: 200})
	h.run(apiCase{name: "the agents page with a bad filter", method: "GET", path: "/agents?online=maybe", hdr: asBrowser, status: 400, invalid: true})
	h.run(apiCase{name: "the search page", method: "GET", path: "/search?q=echo", status: 303})
}
