package registryapi

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/httpx"
)

// Bounds of one search: what a request can make the node do.
const (
	maxQueryLen       = 256
	maxQueryTerms     = 16
	maxSearchCaps     = 16
	defaultLimit      = 10
	maxLimit          = 50
	maxSearchWindow   = 500 // offset + limit
	maxSearchBody     = 4 << 10
	lamportsPerSOL    = 1e9
	DefaultSearchRate = 120 // per minute and client address
	// DefaultSearchBurst searches at once from one address.
	DefaultSearchBurst = 30
)

// Search errors.
var (
	ErrNoRate = httpx.E(http.StatusServiceUnavailable, "price_rate_unknown",
		"max_price_usd needs a SOL/USD rate and this node knows none; search without it")
	ErrSearchRateLimited = admission.ErrSearchRateLimited
	ErrBadCursor         = httpx.E(http.StatusBadRequest, "invalid_cursor", "cursor is not one this search returned")
)

// SearchRequest is the body of POST /v1/search.
type SearchRequest struct {
	Query        string   `json:"query"`
	Capabilities []string `json:"capabilities"`
	MaxPriceUSD  *float64 `json:"max_price_usd"`
	Online       *bool    `json:"online"`
	Verified     *bool    `json:"verified"`
	Limit        int      `json:"limit"`
	Cursor       string   `json:"cursor"`

	offset int
	terms  []string
	// notes say what of the request was taken otherwise than sent.
	notes []string
}

// DecodeSearch decodes and checks a search body.
func DecodeSearch(body []byte) (*SearchRequest, error) {
	var q SearchRequest
	if err := httpx.DecodeJSON(body, &q); err != nil {
		return nil, err
	}
	return &q, q.validate()
}

func (q *SearchRequest) validate() error {
	if err := validateText("query", q.Query, maxQueryLen, false); err != nil {
		return err
	}
	if q.terms = queryTerms(q.Query, maxQueryTerms); len(q.terms) == 0 && strings.TrimSpace(q.Query) != "" {
		q.notes = append(q.notes, "the query holds no word (letters or digits): results are ranked by reputation, then id")
	}
	if len(q.Capabilities) > maxSearchCaps {
		return httpx.ErrInvalid.With("at most %d capabilities", maxSearchCaps)
	}
	for i, c := range q.Capabilities {
		if err := validateText("capability", c, maxCapabilityLen, true); err != nil {
			return err
		}
		q.Capabilities[i] = strings.ToLower(c)
	}
	if q.MaxPriceUSD != nil && !(*q.MaxPriceUSD >= 0) {
		return httpx.ErrInvalid.With("max_price_usd must be a number of at least 0")
	}
	switch {
	case q.Limit == 0:
		q.Limit = defaultLimit
	case q.Limit < 0:
		return httpx.ErrInvalid.With("limit must be between 1 and %d", maxLimit)
	case q.Limit > maxLimit:
		q.notes = append(q.notes, fmt.Sprintf("limit %d is over %d: at most %d results are returned", q.Limit, maxLimit, maxLimit))
		q.Limit = maxLimit
	}
	return q.decodeCursor()
}

// A cursor is the offset of the next page, opaque to clients.
func (q *SearchRequest) decodeCursor() error {
	if q.Cursor == "" {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	s, ok := strings.CutPrefix(string(raw), "o")
	n, err2 := strconv.Atoi(s)
	if err != nil || !ok || err2 != nil || n < 1 || n+q.Limit > maxSearchWindow {
		return ErrBadCursor.With("cursor is not one this search returned (results go %d deep)", maxSearchWindow)
	}
	q.offset = n
	return nil
}

func encodeCursor(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o" + strconv.Itoa(offset)))
}

// SearchResult is one ranked agent.
type SearchResult struct {
	AgentID          string   `json:"agent_id"`
	DID              *string  `json:"did"`
	DIDMesh          *string  `json:"did_mesh"` // the did:mesh alias (alias.go)
	Verified         bool     `json:"verified"`
	Endpoint         *string  `json:"endpoint"`
	Handle           string   `json:"handle"`
	Online           bool     `json:"online"`
	Registered       bool     `json:"registered"`
	CatalogOnly      bool     `json:"catalog_only"`
	Name             string   `json:"name"`
	Description      string   `json:"description"`
	Capabilities     []string `json:"capabilities"`
	PriceLamports    *uint64  `json:"price_lamports"`
	OracleReputation float64  `json:"oracle_reputation"`
	Score            float64  `json:"score"`
	ScoreParts       struct {
		Relevance       float64 `json:"relevance"`
		ReputationBoost float64 `json:"reputation_boost"`
	} `json:"score_parts"`

	// weighted is the view oracle_reputation is the score of, for the
	// pages' words.
	weighted Weighted
}

type searchResponse struct {
	Results    []SearchResult `json:"results"`
	NextCursor *string        `json:"next_cursor"`
	SolUSD     *rateView      `json:"sol_usd"`
	// Notes say what of the request was taken otherwise than sent (a
	// limit over the bound); absent when nothing was.
	Notes []string `json:"notes,omitempty"`
}

type rateView struct {
	Rate   float64 `json:"rate"`
	AgeS   float64 `json:"age_s"`
	Source string  `json:"source"`
}

func (a *API) search(w http.ResponseWriter, r *http.Request) error {
	if err := a.admitSearch(r); err != nil {
		return err
	}
	body, err := httpx.ReadBody(w, r, maxSearchBody)
	if err != nil {
		return err
	}
	q, err := DecodeSearch(body)
	if err != nil {
		return err
	}
	out, err := a.runSearch(r, q)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}

// admitSearch takes a search from the client address's budget (an IPv6
// host by its /64), before anything of the request is read.
func (a *API) admitSearch(r *http.Request) error {
	if ad := a.cfg.Admission; ad != nil {
		return ad.Admit("search", admission.Key{Budget: admission.Search, ID: httpx.AddrKey(httpx.ClientIP(r))})
	}
	return nil
}

// runSearch answers checked request q, for the client of r.
func (a *API) runSearch(r *http.Request, q *SearchRequest) (*searchResponse, error) {
	now := a.now()
	rt, haveRate := a.cfg.SolUSD.Rate(now)
	if q.MaxPriceUSD != nil && !haveRate {
		return nil, ErrNoRate
	}
	x, err := a.cfg.Directory.searchIndex()
	if err != nil {
		return nil, err
	}
	// The slot covers the ranking and the results' rows: both are the
	// search's work.
	if err := a.slots.acquire(r.Context()); err != nil {
		return nil, err
	}
	defer a.slots.release()
	hits, more := x.search(a.searchQuery(q, rt, now), q.offset, q.Limit)
	out := &searchResponse{Results: make([]SearchResult, 0, len(hits)), Notes: q.notes}
	for _, h := range hits {
		if res, ok := a.searchResult(r, h, now); ok {
			out.Results = append(out.Results, res)
		}
	}
	if more {
		c := encodeCursor(q.offset + q.Limit)
		if q.offset+2*q.Limit <= maxSearchWindow {
			out.NextCursor = &c
		}
	}
	if haveRate {
		out.SolUSD = &rateView{Rate: rt.USD, AgeS: now.Sub(rt.At).Seconds(), Source: rt.Source}
	}
	return out, nil
}

// searchQuery turns a request into the index's query at now.
func (a *API) searchQuery(q *SearchRequest, rt SolUSDRate, now time.Time) searchQuery {
	sq := searchQuery{terms: q.terms, caps: q.Capabilities, verified: q.Verified}
	if q.Online == nil && q.MaxPriceUSD == nil {
		return sq
	}
	sq.keep = func(d *searchDoc) bool {
		if q.MaxPriceUSD != nil && !d.withinUSD(*q.MaxPriceUSD, rt.USD) {
			return false
		}
		return q.Online == nil || a.cfg.Directory.onlineDoc(d, now, a.cfg.OnlineWindow) == *q.Online
	}
	return sq
}

// searchResult shows hit h from the row as the directory holds it now: a
// row deleted since the index saw it is left out.
func (a *API) searchResult(r *http.Request, h hit, now time.Time) (SearchResult, bool) {
	e, err := a.cfg.Directory.lookup(h.doc.id)
	if err != nil || e.a.Reg != h.doc.reg {
		return SearchResult{}, false
	}
	ag := e.a
	res := SearchResult{
		AgentID: ag.ID, DID: nullable(ag.DID), DIDMesh: nullable(AliasOf(ag.DID)), Verified: ag.Pubkey != "", Endpoint: nullable(publicEndpoint(ag.Endpoint)),
		Handle: a.handle(r, ag.ID), Registered: ag.Registered(), CatalogOnly: !ag.Registered(),
		Online: a.cfg.Directory.Online(ag, now, a.cfg.OnlineWindow), Capabilities: ag.allCapabilities(),
		PriceLamports: h.doc.price, OracleReputation: h.doc.rep, Score: h.score(), weighted: h.doc.weighted,
	}
	res.Name, res.Description = e.texts()
	res.ScoreParts.Relevance, res.ScoreParts.ReputationBoost = h.relevance, h.boost
	return res, true
}
