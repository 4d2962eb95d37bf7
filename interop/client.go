package interop

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
)

// Client calls agents: it resolves an agent through any mesh node, reads
// its card, calls a skill with a Mesh-Sig and, on 402, pays with its wallet
// and retries with the proof; or it tops up a prepaid balance and calls
// with X-Api-Key. It never pays more than MaxLamports for one call, and
// only to the network and wallet the agent's card declares.
type Client struct {
	// Key signs every request (Mesh-Sig); required.
	Key ed25519.PrivateKey
	// Wallet pays; nil means the client cannot pay (a 402 is returned as
	// an error carrying the challenge).
	Wallet *Wallet
	// Chain is the RPC used to pay; required with Wallet.
	Chain *Chain
	// MaxLamports caps one payment; 0 refuses every payment.
	MaxLamports uint64
	// APIKey, when set, is sent as X-Api-Key (prepaid balance).
	APIKey string
	// HTTP is the HTTP client; nil means one with a 60 s timeout.
	HTTP *http.Client
	// Now is the clock for signatures; nil means time.Now.
	Now func() time.Time
	// GenesisHash is the genesis hash the RPC of Chain must answer for the
	// network of an offer; empty means the known hash of the offer's
	// network. Set it only for a local validator or test runtime. Nothing
	// is paid through an RPC of another network.
	GenesisHash string
	// ProofWait bounds how long a proof is re-sent while the agent cannot
	// check it yet (the transaction is not visible at the agent's
	// commitment, its RPC failed, or the agent was unreachable): default
	// DefaultProofWait. ProofBackoff is the first pause between attempts
	// (default 1 s), doubled after each up to 8 s.
	ProofWait    time.Duration
	ProofBackoff time.Duration
}

// DefaultProofWait covers a provider that checks payments at finalized
// commitment (about 13 s after confirmation) with room for a slow RPC.
const DefaultProofWait = 60 * time.Second

const maxProofBackoff = 8 * time.Second

// Result is the answer of a skill call.
type Result struct {
	Status int
	Body   json.RawMessage
	Header http.Header
	// Signature is the transaction that paid for the call, if one did.
	Signature string
	// Lamports is what the client paid on chain for this call.
	Lamports uint64
	// Receipt is the agent's signed receipt of a paid call (x402 or a
	// balance debit), "" when it sent none: cite it as "receipt" in a
	// reputation report about the agent, which then weighs as a paying
	// customer's.
	Receipt string
	// Invoice is the invoice of an answer served on credit (post-pay)
	// that the client did not pay, and InvoiceReason why: the caller owes
	// it by Invoice.ExpiresAt (transfer plus memo = Invoice.Nonce).
	Invoice       *Offer
	InvoiceReason string
}

// PaymentError is returned when a call ends without service in the
// payment step: the last challenge and why. When a payment transaction was
// sent, Signature and Nonce name it: the same request (same skill, body
// and signing key) can be retried with that proof (CallWithProof) without
// paying again.
type PaymentError struct {
	Challenge Challenge
	Reason    error
	// Signature is the payment transaction, "" when none was sent.
	Signature string
	// Nonce is the challenge nonce the transaction pays.
	Nonce string
	// Exact are the 402's x402 v2 offers (PAYMENT-REQUIRED: SPL token
	// prices), which this client does not pay.
	Exact []PaymentRequirements
}

func (e *PaymentError) Error() string {
	msg := fmt.Sprintf("payment required (%s: %s): %v", e.Challenge.Code, e.Challenge.Detail, e.Reason)
	if e.Challenge.Code == "" {
		msg = fmt.Sprintf("payment: %v", e.Reason)
	}
	if e.Signature != "" {
		msg += fmt.Sprintf(" [payment transaction %s for nonce %s: retry the same request with this proof]", e.Signature, e.Nonce)
	}
	return msg
}

func (e *PaymentError) Unwrap() error { return e.Reason }

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 60 * time.Second}
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// do sends a signed request and reads the whole answer (at most 8 MiB).
// A request to the agent of card is signed v1-bound when the card lists
// it (naming the origin the request goes to and its X-Api-Key, so that
// the agent cannot replay it to another), v1 otherwise; card is nil for a
// request to a mesh node.
func (c *Client) do(ctx context.Context, card *Card, method, rawURL string, body []byte, hdr http.Header) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, rawURL, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.sign(req, card, body)
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp, b, err
}

// sign signs req (body is its body) with a Mesh-Sig, when the client has
// a key: v1-bound, naming the origin req goes to, when the card lists it.
func (c *Client) sign(req *http.Request, card *Card, body []byte) {
	switch {
	case c.Key == nil:
	case card != nil && card.AcceptsBoundSig():
		identity.SignRequestBound(req, c.Key, body, c.now(), sigBinding(req, Origin(req.URL.String())))
	default:
		identity.SignRequest(req, c.Key, body, c.now())
	}
}

// doJSON sends a signed request and decodes the answer into out, which
// must come with status want; what names the step in errors.
func (c *Client) doJSON(ctx context.Context, card *Card, what, method, rawURL string, body []byte, hdr http.Header, want int, out any) error {
	resp, b, err := c.do(ctx, card, method, rawURL, body, hdr)
	if err != nil {
		return err
	}
	return decodeAnswer(what, resp, b, want, out)
}

// decodeAnswer decodes an answer b into out, which must come with status
// want; what names the step in errors.
func decodeAnswer(what string, resp *http.Response, b []byte, want int, out any) error {
	if resp.StatusCode != want {
		return fmt.Errorf("%w: %s: %d %s", ErrCall, what, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: %s: answer is not the expected JSON: %v", ErrCall, what, err)
	}
	return nil
}

// Resolve asks a mesh node for agent id and returns its endpoint.
func (c *Client) Resolve(ctx context.Context, nodeURL, id string) (string, error) {
	var v struct {
		Endpoint *string `json:"endpoint"`
	}
	u := strings.TrimRight(nodeURL, "/") + "/v1/agents/" + url.PathEscape(id)
	if err := c.doJSON(ctx, nil, "resolving "+id, http.MethodGet, u, nil, nil, http.StatusOK, &v); err != nil {
		return "", err
	}
	if v.Endpoint == nil || *v.Endpoint == "" {
		return "", fmt.Errorf("%w: agent %s has no endpoint", ErrCall, id)
	}
	return *v.Endpoint, nil
}

// Card fetches an agent's card from its endpoint: at A2A 0.3's
// /.well-known/agent-card.json, else (404) at the spec's
// /.well-known/agent.json.
func (c *Client) Card(ctx context.Context, endpoint string) (*Card, error) {
	var card Card
	base := strings.TrimRight(endpoint, "/")
	resp, b, err := c.do(ctx, nil, http.MethodGet, base+"/.well-known/agent-card.json", nil, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		err = c.doJSON(ctx, nil, "card", http.MethodGet, base+"/.well-known/agent.json", nil, nil, http.StatusOK, &card)
	} else {
		err = decodeAnswer("card", resp, b, http.StatusOK, &card)
	}
	if err != nil {
		return nil, err
	}
	if card.URL == "" {
		card.URL = strings.TrimRight(endpoint, "/")
	}
	return &card, nil
}

// Call calls skill on the agent of card with input (JSON). On 402 it pays
// when it may and retries with the proof.
func (c *Client) Call(ctx context.Context, card *Card, skill string, input []byte) (*Result, error) {
	if err := ValidateSkillID(skill); err != nil {
		return nil, err
	}
	hdr := http.Header{}
	if c.APIKey != "" {
		hdr.Set(HeaderAPIKey, c.APIKey)
	}
	resp, b, err := c.post(ctx, card, skill, input, hdr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusPaymentRequired {
		res, err := result(resp, b)
		if err == nil && resp.Header.Get(HeaderPostpayDue) != "" {
			c.payInvoice(ctx, card, res)
		}
		return res, err
	}
	ch, err := ParseChallenge(resp.Header, b)
	if err != nil {
		return nil, unpayable(resp.Header, ch, err)
	}
	offer, err := c.choose(card, ch)
	if err == nil {
		err = c.checkNetwork(ctx, offer.Network)
	}
	if err != nil {
		return nil, &PaymentError{Challenge: ch, Reason: err}
	}
	payTo, _ := solana.PublicKeyFromBase58(offer.PayTo)
	// Wait for the provider's commitment before sending the proof.
	sig, err := c.Chain.atLeast(card.Payment.Commitment).Pay(ctx, c.Wallet, payTo, offer.Lamports, offer.Nonce)
	switch {
	case err != nil && (sig.IsZero() || errors.Is(err, ErrTxExpired)): // nothing was paid
		return nil, &PaymentError{Challenge: ch, Reason: fmt.Errorf("paying %d lamports to %s: %w", offer.Lamports, offer.PayTo, err)}
	case err != nil:
		return nil, &PaymentError{Challenge: ch, Signature: sig.String(), Nonce: offer.Nonce,
			Reason: fmt.Errorf("paying %d lamports to %s (the transaction may still land): %w", offer.Lamports, offer.PayTo, err)}
	}
	res, err := c.sendProof(ctx, card, skill, input, sig.String(), offer.Nonce, ch)
	if res != nil {
		res.Lamports = offer.Lamports
	}
	return res, err
}

// unpayable is the error of a 402 without an offer in lamports (err):
// one of a skill priced only in SPL tokens names its prices and who pays
// them.
func unpayable(h http.Header, ch Challenge, err error) *PaymentError {
	pr, ok := ParsePaymentRequired(h)
	if !ok || len(pr.Accepts) == 0 {
		return &PaymentError{Challenge: ch, Reason: err}
	}
	prices := make([]string, len(pr.Accepts))
	for i, r := range pr.Accepts {
		prices[i] = r.PriceText()
	}
	return &PaymentError{Challenge: ch, Exact: pr.Accepts, Reason: fmt.Errorf("%w (%s, x402 v2's exact scheme): "+
		"pay it with an x402 v2 client, such as the x402 project's @x402/fetch with @x402/svm", ErrTokensOnly, strings.Join(prices, " or "))}
}

// payInvoice pays the invoice of an answer served on credit, as it would
// a challenge (within MaxLamports, to the card's wallet and network); one
// it does not pay is left in res.Invoice for the caller.
func (c *Client) payInvoice(ctx context.Context, card *Card, res *Result) {
	ch, err := ParseChallenge(res.Header, nil)
	if err != nil || len(ch.Offers) == 0 {
		res.InvoiceReason = "the answer's invoice is unreadable"
		return
	}
	offer, err := c.choose(card, ch)
	if err == nil {
		err = c.checkNetwork(ctx, offer.Network)
	}
	var sig solana.Signature
	if err == nil {
		payTo, _ := solana.PublicKeyFromBase58(offer.PayTo)
		sig, err = c.Chain.atLeast(card.Payment.Commitment).Pay(ctx, c.Wallet, payTo, offer.Lamports, offer.Nonce)
	}
	if err != nil {
		res.Invoice, res.InvoiceReason = &ch.Offers[0], err.Error()
		if !sig.IsZero() && !errors.Is(err, ErrTxExpired) {
			res.Signature = sig.String() // may still land
		}
		return
	}
	res.Signature, res.Lamports = sig.String(), offer.Lamports
}

// CallWithProof calls skill with the proof of a payment already made, as
// named by a PaymentError: sig and nonce (nonce may be empty: the agent
// reads it from the memo). The payment is bound to the request it was
// made for, so input and the client's Key must be those of that call.
func (c *Client) CallWithProof(ctx context.Context, card *Card, skill string, input []byte, sig, nonce string) (*Result, error) {
	if err := ValidateSkillID(skill); err != nil {
		return nil, err
	}
	return c.sendProof(ctx, card, skill, input, sig, nonce, Challenge{})
}

// post sends a call of skill with input and hdr: over HTTP to
// <url>/v1/<skill>, or over A2A when the card offers A2A and no HTTP skill
// endpoint (contact.http). The answer is HTTP's either way.
func (c *Client) post(ctx context.Context, card *Card, skill string, input []byte, hdr http.Header) (*http.Response, []byte, error) {
	if endpoint, ok := card.OffersA2A(); ok && card.Contact.HTTP == "" {
		return c.postA2A(ctx, card, endpoint, skill, input, hdr)
	}
	return c.do(ctx, card, http.MethodPost, skillURL(card, skill), input, hdr)
}

func skillURL(card *Card, skill string) string {
	return strings.TrimRight(card.URL, "/") + "/v1/" + skill
}

// sendProof sends the request with the proof until it is served, refused
// for good, or ProofWait has passed while the agent could not check it.
// ch is the challenge that was paid, for errors.
func (c *Client) sendProof(ctx context.Context, card *Card, skill string, input []byte, sig, nonce string, ch Challenge) (*Result, error) {
	hdr := http.Header{}
	hdr.Set(HeaderPaymentProof, sig)
	if nonce != "" {
		hdr.Set(HeaderPaymentNonce, nonce)
	}
	wait, pause := c.ProofWait, c.ProofBackoff
	if wait <= 0 {
		wait = DefaultProofWait
	}
	if pause <= 0 {
		pause = time.Second
	}
	fail := func(reason error) error {
		return &PaymentError{Challenge: ch, Signature: sig, Nonce: nonce, Reason: reason}
	}
	deadline := time.Now().Add(wait) // the wall clock: c.now may be a test's fixed clock
	for {
		resp, b, err := c.post(ctx, card, skill, input, hdr)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, fail(err)
		case err != nil:
			// Retrying with the same proof is safe: the agent serves a
			// payment once and replays its answer.
			err = fmt.Errorf("sending the proof: %w", err)
		case resp.StatusCode == http.StatusTooManyRequests:
			err = errors.New("the agent limits proof checks; waiting")
		case resp.StatusCode >= 500:
			// The skill failed: the agent charged nothing for it, and the
			// payment stays good for the same request.
			return nil, fail(fmt.Errorf("the agent answered %d %s; the payment stays good for this request",
				resp.StatusCode, strings.TrimSpace(string(b))))
		case resp.StatusCode != http.StatusPaymentRequired:
			res, err := result(resp, b)
			if res != nil {
				res.Signature = sig
			}
			return res, err
		default:
			ch, _ = ParseChallenge(resp.Header, b)
			if !retryableCode(ch.Code) {
				return nil, fail(errors.New("the agent refused the proof"))
			}
			err = errors.New("the agent cannot check the payment yet")
		}
		if time.Now().Add(pause).After(deadline) {
			return nil, fail(fmt.Errorf("gave up after %s: %w", wait, err))
		}
		select {
		case <-ctx.Done():
			return nil, fail(ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, maxProofBackoff)
	}
}

// retryableCode: the agent could not check the proof yet (the transaction
// is not visible, or its RPC failed); the same proof may pass later.
func retryableCode(code string) bool {
	return code == ErrTxNotVisible.Code || code == ErrRPC.Code || code == ErrRPCTimeout.Code
}

// checkNetwork refuses to pay through an RPC endpoint of another network
// than the offer's: its genesis hash must be the network's (or GenesisHash).
func (c *Client) checkNetwork(ctx context.Context, network string) error {
	if err := c.Chain.CheckGenesis(ctx, network, c.GenesisHash); err != nil {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return nil
}

// choose picks the offer the client will pay: on the card's network, to
// the card's wallet, within MaxLamports, not expired.
func (c *Client) choose(card *Card, ch Challenge) (Offer, error) {
	if c.Wallet == nil || c.Chain == nil {
		return Offer{}, fmt.Errorf("%w: no wallet configured", ErrRefused)
	}
	if card.Payment == nil {
		return Offer{}, fmt.Errorf("%w: the card declares no payment block", ErrRefused)
	}
	var why []string
	for _, o := range ch.Offers {
		switch {
		case o.Network != card.Payment.Network:
			why = append(why, fmt.Sprintf("network %s is not the card's %s", o.Network, card.Payment.Network))
		case o.PayTo != card.Payment.Wallet:
			why = append(why, fmt.Sprintf("payee %s is not the card's wallet %s", o.PayTo, card.Payment.Wallet))
		case o.Lamports > c.MaxLamports:
			why = append(why, fmt.Sprintf("%d lamports is over the cap of %d", o.Lamports, c.MaxLamports))
		case !o.ExpiresAt.IsZero() && !c.now().Before(o.ExpiresAt):
			why = append(why, "the challenge has expired")
		default:
			return o, nil
		}
	}
	return Offer{}, fmt.Errorf("%w: %s", ErrRefused, strings.Join(why, "; "))
}

func result(resp *http.Response, b []byte) (*Result, error) {
	r := &Result{Status: resp.StatusCode, Body: b, Header: resp.Header, Receipt: resp.Header.Get(identity.ReceiptHeaderName)}
	if resp.StatusCode >= 300 {
		return r, fmt.Errorf("%w: %d %s", ErrCall, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return r, nil
}

// Topup asks the agent for a prepaid api_key bound to the client's wallet
// and returns the answer (the api_key and the link to pay).
func (c *Client) Topup(ctx context.Context, card *Card, lamports uint64) (*TopupResponse, error) {
	if c.Wallet == nil {
		return nil, fmt.Errorf("%w: no wallet configured", ErrRefused)
	}
	body, _ := json.Marshal(map[string]any{"payer_address": c.Wallet.Address(), "lamports": lamports})
	var t TopupResponse
	if err := c.doJSON(ctx, card, "topup", http.MethodPost, strings.TrimRight(card.URL, "/")+"/v1/topup", body, nil, http.StatusCreated, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Deposit pays a top-up link, after checking it against the card and the
// cap, and returns the transaction signature. The agent credits it at its
// next poll.
func (c *Client) Deposit(ctx context.Context, card *Card, t *TopupResponse) (string, error) {
	link, err := ParsePayLink(t.ChainPayURL)
	if err != nil {
		return "", err
	}
	if card.Payment == nil || link.Address != card.Payment.Wallet || t.Network != card.Payment.Network {
		return "", fmt.Errorf("%w: the top-up link does not pay the card's wallet on the card's network", ErrRefused)
	}
	if link.Lamports > c.MaxLamports {
		return "", fmt.Errorf("%w: %d lamports is over the cap of %d", ErrRefused, link.Lamports, c.MaxLamports)
	}
	if c.Wallet == nil || c.Chain == nil {
		return "", fmt.Errorf("%w: no wallet configured", ErrRefused)
	}
	if err := c.checkNetwork(ctx, t.Network); err != nil {
		return "", err
	}
	sig, err := c.Chain.Pay(ctx, c.Wallet, solana.MustPublicKeyFromBase58(link.Address), link.Lamports, link.Memo)
	if sig.IsZero() {
		return "", err
	}
	return sig.String(), err
}

// Balance reads the prepaid balance of apiKey.
func (c *Client) Balance(ctx context.Context, card *Card, apiKey string) (*BalanceResponse, error) {
	hdr := http.Header{}
	hdr.Set(HeaderAPIKey, apiKey)
	var v BalanceResponse
	if err := c.doJSON(ctx, card, "balance", http.MethodGet, strings.TrimRight(card.URL, "/")+"/v1/balance", nil, hdr, http.StatusOK, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// CallAgent resolves id through nodeURL, fetches its card and calls skill.
func (c *Client) CallAgent(ctx context.Context, nodeURL, id, skill string, input []byte) (*Result, *Card, error) {
	ep, err := c.Resolve(ctx, nodeURL, id)
	if err != nil {
		return nil, nil, err
	}
	card, err := c.Card(ctx, ep)
	if err != nil {
		return nil, nil, err
	}
	res, err := c.Call(ctx, card, skill, input)
	return res, card, err
}
