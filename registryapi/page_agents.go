package registryapi

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/site"
)

// The agents page (GET /agents): the oracle's search as a form of GET
// parameters, so that it needs no script, with its results linking to
// the agents' pages. It runs the search of POST /v1/search, under the
// same budget per client address.

// agentsPerPage is how many results a page of the agents page shows.
const agentsPerPage = 20

// agentsForm is the agents page's form as sent, to fill it in again.
type agentsForm struct {
	Query, Capabilities, Online, Verified, MaxUSD string
}

// agentsPageData is what pages/agents.html reads.
type agentsPageData struct {
	Form     agentsForm
	Filtered bool // a query or a filter was given
	Agents   []site.AgentLink
	Notes    []string
	Error    string // why the search was refused, "" when it ran
	First    int    // the ranks of the first and last results shown, from 1
	Last     int
	Prev     string // links to the pages around, "" for none
	Next     string
}

// formOf reads the form of query v.
func formOf(v url.Values) agentsForm {
	return agentsForm{Query: v.Get("q"), Capabilities: v.Get("cap"), Online: v.Get("online"),
		Verified: v.Get("verified"), MaxUSD: v.Get("max_usd")}
}

// request turns the form into a search request, cursor the page's.
func (f agentsForm) request(cursor string) (*SearchRequest, error) {
	q := &SearchRequest{Query: f.Query, Limit: agentsPerPage, Cursor: cursor}
	for _, c := range strings.Split(f.Capabilities, ",") {
		if c = strings.TrimSpace(c); c != "" {
			q.Capabilities = append(q.Capabilities, c)
		}
	}
	var err error
	if q.Online, err = choice("online", f.Online, "online", "offline"); err != nil {
		return nil, err
	}
	if q.Verified, err = choice("verified", f.Verified, "verified", "unverified"); err != nil {
		return nil, err
	}
	if s := strings.TrimSpace(f.MaxUSD); s != "" {
		usd, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, httpx.ErrInvalid.With("the most USD per request must be a number, like 0.01")
		}
		q.MaxPriceUSD = &usd
	}
	return q, q.validate()
}

// choice reads a select of the form: "" (any), yes or no.
func choice(name, v, yes, no string) (*bool, error) {
	switch v {
	case "":
		return nil, nil
	case yes:
		t := true
		return &t, nil
	case no:
		f := false
		return &f, nil
	}
	return nil, httpx.ErrInvalid.With("%s must be %s or %s", name, yes, no)
}

func (a *API) agentsPage(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	d := agentsPageData{Form: formOf(v)}
	d.Filtered = d.Form != agentsForm{}
	status := http.StatusOK
	res, q, err := a.pageSearch(r, d.Form, v.Get("cursor"))
	if err != nil {
		e, ok := httpx.AsError(err)
		if !ok {
			a.errorPage(w, r, err)
			return
		}
		status, d.Error = e.Status, e.Detail
		if e.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(e.RetryAfter/time.Second)))
		}
		a.site.Render(w, status, site.CSP, a.pages.agents, d)
		return
	}
	now := a.now()
	for _, hit := range res.Results {
		if e, err := a.cfg.Directory.lookup(hit.AgentID); err == nil {
			d.Agents = append(d.Agents, a.agentLink(e, hit, res.usdPerSOL(), now))
		}
	}
	d.Notes, d.First, d.Last = res.Notes, q.offset+1, q.offset+len(d.Agents)
	if q.offset > 0 {
		d.Prev = pageLink(v, max(0, q.offset-q.Limit))
	}
	if res.NextCursor != nil {
		d.Next = pageLink(v, q.offset+q.Limit)
	}
	a.site.Render(w, status, site.CSP, a.pages.agents, d)
}

// pageSearch runs the search of form f at cursor, under the client's
// search budget.
func (a *API) pageSearch(r *http.Request, f agentsForm, cursor string) (*searchResponse, *SearchRequest, error) {
	if err := a.admitSearch(r); err != nil {
		return nil, nil, err
	}
	q, err := f.request(cursor)
	if err != nil {
		return nil, nil, err
	}
	res, err := a.runSearch(r, q)
	return res, q, err
}

// pageLink is the agents page of query v at offset.
func pageLink(v url.Values, offset int) string {
	v = cloneValues(v)
	v.Del("cursor")
	if offset > 0 {
		v.Set("cursor", encodeCursor(offset))
	}
	return "/agents?" + v.Encode()
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// agentLink is the row of e, found as res, as a list shows it: its price at
// usdPerSOL (nil unknown), its status at now and its reputation as the
// oracle ranks it (as of its newest report).
func (a *API) agentLink(e *cachedAgent, res SearchResult, usdPerSOL *float64, now time.Time) site.AgentLink {
	d, ag := a.cfg.Directory, e.a
	name, desc := e.texts()
	l := site.AgentLink{ID: ag.ID, Name: name, Description: excerptText(desc, linkDescLen), Verified: ag.Pubkey != "",
		Capabilities: ag.allCapabilities(), Reputation: reputationWords(res.weighted)}
	if res.PriceLamports != nil {
		l.Price = priceWords(*res.PriceLamports, unitRequest, usdPerSOL)
	}
	online, live := false, LivenessView{State: LiveNoEndpoint}
	var beat *time.Time
	if ag.Registered() {
		online, live = d.Online(ag, now, a.cfg.OnlineWindow), a.livenessView(ag)
		if at, ok := d.LastBeat(ag); ok {
			beat = &at
		}
	}
	st := statusOf(!ag.Registered(), online, beat, live)
	l.Status, l.StatusClass = st.Text, st.Class
	return l
}

// usdPerSOL is the rate the search knew, nil for none.
func (s *searchResponse) usdPerSOL() *float64 {
	if s.SolUSD == nil {
		return nil
	}
	return &s.SolUSD.Rate
}

// linkDescLen bounds the description a list shows, in characters.
const linkDescLen = 240

// excerptText is s's first n characters, with an ellipsis when longer.
func excerptText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// OnlineAgents returns up to n agents online now, the best reputed first
// (a search by the online filter alone): the home page's list.
func (a *API) OnlineAgents(r *http.Request, n int) ([]site.AgentLink, error) {
	online := true
	res, err := a.runSearch(r, &SearchRequest{Online: &online, Limit: n})
	if errors.Is(err, ErrIndexBuilding) || errors.Is(err, ErrSearchBusy) {
		return nil, nil // the front door shows no list for now, rather than an error
	}
	if err != nil {
		return nil, err
	}
	now := a.now()
	var out []site.AgentLink
	for _, hit := range res.Results {
		if e, err := a.cfg.Directory.lookup(hit.AgentID); err == nil {
			out = append(out, a.agentLink(e, hit, res.usdPerSOL(), now))
		}
	}
	return out, nil
}
