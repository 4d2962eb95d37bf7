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
	h.run(apiCase{name: "agent page stylesheet", method: "GET", path: "/assets/agent-page.css", status: 200})
}
