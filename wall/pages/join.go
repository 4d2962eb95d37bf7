package pages

import (
	"net"
	"net/http"
	"slices"
	"strings"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/agentmesh/mesh/internal/site"
)

// Joining from a page (docs/api.md, Browser peers): a cluster's page, and
// the page of private clusters (GET /join), carry the addresses the
// page's script dials to join as a libp2p peer (the bundle peer.js,
// loaded when a visitor joins), and a policy that lets it reach the
// WebTransport endpoints among them and nothing else.

// peerData is what a page's script needs to join: the addresses it
// dials, space-separated (they go in data attributes).
type peerData struct {
	Home, Rendezvous string
}

// peer returns the page's peerData and its Content-Security-Policy.
func (p *Pages) peer() (peerData, string) {
	a := p.wall.PeerAddrs()
	csp := site.PeerCSP(webTransportOrigins(slices.Concat(a.Home, a.Rendezvous)))
	return peerData{Home: strings.Join(a.Home, " "), Rendezvous: strings.Join(a.Rendezvous, " ")}, csp
}

// webTransportOrigins are the origins (https://host:port) of the
// WebTransport addresses among addrs, sorted, each once.
func webTransportOrigins(addrs []string) []string {
	var out []string
	for _, s := range addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			continue
		}
		if _, err := a.ValueForProtocol(ma.P_WEBTRANSPORT); err != nil {
			continue
		}
		port, err := a.ValueForProtocol(ma.P_UDP)
		if err != nil {
			continue
		}
		for _, code := range []int{ma.P_IP4, ma.P_IP6, ma.P_DNS, ma.P_DNS4, ma.P_DNS6} {
			if host, err := a.ValueForProtocol(code); err == nil {
				out = append(out, "https://"+net.JoinHostPort(host, port))
				break
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// privatePage serves GET /join: a private cluster's wall for a visitor who
// has its id and member token. The node learns neither before the visitor
// joins: the page is the same for every cluster, and names none.
func (p *Pages) privatePage(w http.ResponseWriter, r *http.Request) {
	data, csp := p.peer()
	p.site.Render(w, http.StatusOK, csp, p.private, privatePageData{Peer: data, WallMax: wallMax})
}

type privatePageData struct {
	Peer    peerData
	WallMax int
}
