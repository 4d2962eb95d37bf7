package interop

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/agentmesh/mesh/internal/ratelimit"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/store"
)

// PaymentConfig is how an agent takes payment. The same price (a skill's
// pricing row on Network) drives the x402 challenge and the deposit debit.
type PaymentConfig struct {
	// Network is the network tag of the wallet: NetworkDevnet or NetworkMainnet.
	Network string `json:"network"`
	// Wallet is the provider's base58 address; payments go there. Only the
	// address is needed: the provider never signs.
	Wallet string `json:"wallet"`
	// RPCURL is the Solana JSON-RPC endpoint used to verify payments.
	RPCURL string `json:"rpc_url"`
	// GenesisHash overrides the expected genesis hash of Network, for a
	// local validator or test runtime. Empty: the known hash of Network.
	GenesisHash string `json:"genesis_hash"`
	// Commitment a payment must reach: confirmed (default) or finalized.
	Commitment string `json:"commitment"`
	// RPCTimeout bounds each RPC call (default 15 s).
	RPCTimeout time.Duration `json:"rpc_timeout"`
	// Modes are the accepted payment modes: ModeX402 and/or ModeDeposit.
	Modes []string `json:"modes"`
	// ChallengeTTL is how long an x402 nonce can be paid (default 5 min).
	ChallengeTTL time.Duration `json:"challenge_ttl"`
	// FreeCallsPerDay is the daily allowance of each signed caller, counted
	// against its key and its IP address (0: no free tier).
	FreeCallsPerDay int `json:"free_calls_per_day"`
	// DepositMinLamports is the amount the top-up link asks for.
	DepositMinLamports uint64 `json:"deposit_min_lamports"`
	// CreditDivisor: a deposit of L lamports credits L / CreditDivisor
	// units (the remainder is kept toward the next unit); a call debits its
	// price / CreditDivisor units. Default 1 (balances in lamports). Every
	// price must be a multiple of it.
	CreditDivisor uint64 `json:"credit_divisor"`
	// PollInterval is how often the deposit poller reads the wallet's
	// transactions: 1 to 5 minutes (default 1 minute).
	PollInterval time.Duration `json:"poll_interval"`
	// PostpayMinReputation: signed callers whose registered agent has a
	// reputation score at least this are served first and invoiced; nil
	// means pre-pay only.
	PostpayMinReputation *float64 `json:"postpay_min_reputation"`
	// PostpayDue is how long a post-pay invoice may stay unpaid before the
	// provider reports the caller as not settling (default 24 h).
	PostpayDue time.Duration `json:"postpay_due"`
	// Each account POST /v1/topup creates is held in the store, so a
	// stranger must not make the agent hold them without limit.
	// TopupsPerHourPerKey bounds the top-ups of one Mesh-Sig key: that
	// many an hour, and no more at once (default 5).
	TopupsPerHourPerKey int `json:"topups_per_hour_per_key"`
	// MaxUnfundedPerIP bounds the accounts awaiting their first deposit
	// made from one client address (an IPv4 address, an IPv6 /64) held at
	// once (default 10): a place is freed only when one is funded or
	// expires.
	MaxUnfundedPerIP int `json:"max_unfunded_per_ip"`
	// MaxUnfundedAccounts bounds the accounts awaiting their first deposit
	// held at once, whoever asked for them (default 10,000).
	MaxUnfundedAccounts int `json:"max_unfunded_accounts"`
	// UnfundedAccountTTL is how long an account may await its first
	// deposit (default 24 h, at least 10 minutes); one never funded is
	// then removed. A funded account is kept.
	UnfundedAccountTTL time.Duration `json:"unfunded_account_ttl"`
	// InvoiceRetention is how long a post-pay invoice is kept once it is
	// settled (paid and reported) or its default reported, counted from
	// the next invoice check (default 30 days, at least an hour); a default
	// never paid is then removed too. Meanwhile a late payment of a default
	// still settles it and its caller is not served on credit again.
	InvoiceRetention time.Duration `json:"invoice_retention"`
	// DepositRequiresBoundSig refuses to debit a prepaid balance for a
	// call signed v1 (401 bound_signature_required): only a v1-bound
	// signature, which names this agent and the X-Api-Key, spends it. A v1
	// signature a caller sent to another agent could otherwise be replayed
	// here within 120 s, with the caller's api_key at this agent (public in
	// the deposit memo). Callers with this project's client sign bound
	// whenever the card lists v1-bound, which this agent's card does.
	DepositRequiresBoundSig bool `json:"deposit_requires_bound_sig"`

	// x402 v2 (the "exact" scheme on Solana) takes the skills' pricing
	// rows in an SPL token: the client signs a TransferChecked, the fee
	// payer co-signs and submits it. The fee payer is one of:
	//
	// FeePayerKeyFile is the path of a Solana keypair file (the Solana
	// CLI's JSON array of 64 bytes): the agent's own fee payer, which
	// pays the network fee of each payment. A deploy secret, apart from
	// Wallet (which never signs); keep a little SOL on it.
	FeePayerKeyFile string `json:"fee_payer_key_file"`
	// FeePayer is that key handed in memory by an embedder that holds it
	// already; it is used before FeePayerKeyFile and never serialized.
	FeePayer *Wallet `json:"-"`
	// FacilitatorURL is an x402 facilitator (GET /supported, POST
	// /verify, POST /settle) whose fee payer co-signs and submits instead.
	FacilitatorURL string `json:"facilitator_url"`
	// MaxComputeUnits and MaxComputeUnitPrice (micro-lamports per unit)
	// bound the compute budget of a payment transaction the fee payer
	// signs (defaults 400,000 and 50,000).
	MaxComputeUnits     uint64 `json:"max_compute_units"`
	MaxComputeUnitPrice uint64 `json:"max_compute_unit_price"`
	// SettleTimeout bounds the wait for a submitted payment (default 90 s,
	// longer than a blockhash lives): one not confirmed by then is
	// answered payment_settlement_pending and stays claimed for a retry.
	SettleTimeout time.Duration `json:"settle_timeout"`
}

// Defaults of PaymentConfig.
const (
	DefaultChallengeTTL = 5 * time.Minute
	DefaultPollInterval = time.Minute
	MinPollInterval     = time.Minute
	MaxPollInterval     = 5 * time.Minute
	DefaultPostpayDue   = 24 * time.Hour

	DefaultTopupsPerHourPerKey = 5
	DefaultMaxUnfundedPerIP    = 10
	DefaultMaxUnfundedAccounts = 10_000
	DefaultUnfundedAccountTTL  = 24 * time.Hour
	MinUnfundedAccountTTL      = 10 * time.Minute
	DefaultInvoiceRetention    = 30 * 24 * time.Hour
	MinInvoiceRetention        = time.Hour
	DefaultSettleTimeout       = 90 * time.Second
)

func (c *PaymentConfig) setDefaults() {
	orDefault(&c.Commitment, CommitmentConfirmed)
	orDefault(&c.ChallengeTTL, DefaultChallengeTTL)
	orDefault(&c.CreditDivisor, 1)
	orDefault(&c.PollInterval, DefaultPollInterval)
	orDefault(&c.PostpayDue, DefaultPostpayDue)
	orDefault(&c.TopupsPerHourPerKey, DefaultTopupsPerHourPerKey)
	orDefault(&c.MaxUnfundedPerIP, DefaultMaxUnfundedPerIP)
	orDefault(&c.MaxUnfundedAccounts, DefaultMaxUnfundedAccounts)
	orDefault(&c.UnfundedAccountTTL, DefaultUnfundedAccountTTL)
	orDefault(&c.InvoiceRetention, DefaultInvoiceRetention)
	orDefault(&c.MaxComputeUnits, DefaultMaxComputeUnits)
	orDefault(&c.MaxComputeUnitPrice, DefaultMaxComputeUnitPrice)
	orDefault(&c.SettleTimeout, DefaultSettleTimeout)
	if len(c.Modes) == 0 {
		c.Modes = []string{ModeX402}
	}
}

// orDefault sets *v to def when it is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate reports the first problem with c (after defaults).
func (c *PaymentConfig) Validate() error {
	c.setDefaults()
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: payment: %s", ErrConfig, fmt.Sprintf(f, a...)) }
	if c.Network == "" {
		return bad("network is required (%s or %s)", NetworkDevnet, NetworkMainnet)
	}
	if _, ok := GenesisHash(c.Network); !ok && c.GenesisHash == "" {
		return bad("network %q is unknown; give its genesis hash", c.Network)
	}
	if _, err := solana.PublicKeyFromBase58(c.Wallet); err != nil {
		return bad("wallet %q is not a base58 address", c.Wallet)
	}
	if c.RPCURL == "" {
		return bad("rpc_url is required")
	}
	if c.Commitment != CommitmentConfirmed && c.Commitment != CommitmentFinalized {
		return bad("commitment must be confirmed or finalized")
	}
	for _, m := range c.Modes {
		if m != ModeX402 && m != ModeDeposit {
			return bad("unknown mode %q (x402 or deposit)", m)
		}
	}
	if c.ChallengeTTL < 30*time.Second || c.ChallengeTTL > time.Hour {
		return bad("challenge_ttl must be between 30 s and 1 h")
	}
	if c.PollInterval < MinPollInterval || c.PollInterval > MaxPollInterval {
		return bad("poll_interval must be between 1 and 5 minutes")
	}
	if c.FreeCallsPerDay < 0 {
		return bad("free_calls_per_day must not be negative")
	}
	if r := c.PostpayMinReputation; r != nil && (*r < 0 || *r > 1) {
		return bad("postpay_min_reputation must be within 0..1")
	}
	if c.PostpayDue < time.Minute {
		return bad("postpay_due must be at least a minute")
	}
	if c.TopupsPerHourPerKey < 0 || c.MaxUnfundedPerIP < 0 || c.MaxUnfundedAccounts < 0 {
		return bad("topups_per_hour_per_key, max_unfunded_per_ip and max_unfunded_accounts must not be negative")
	}
	if c.UnfundedAccountTTL < MinUnfundedAccountTTL {
		return bad("unfunded_account_ttl must be at least %s", MinUnfundedAccountTTL)
	}
	if c.InvoiceRetention < MinInvoiceRetention {
		return bad("invoice_retention must be at least %s", MinInvoiceRetention)
	}
	return c.validateExact(bad)
}

// validateExact checks the x402 v2 settings.
func (c *PaymentConfig) validateExact(bad func(string, ...any) error) error {
	if c.FacilitatorURL != "" && (c.FeePayer != nil || c.FeePayerKeyFile != "") {
		return bad("a fee payer key and a facilitator_url exclude each other: give one")
	}
	if u, err := url.Parse(c.FacilitatorURL); c.FacilitatorURL != "" && (err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "") {
		return bad("facilitator_url %q is not an http(s) URL", c.FacilitatorURL)
	}
	if c.SettleTimeout < 5*time.Second || c.SettleTimeout > 10*time.Minute {
		return bad("settle_timeout must be between 5 s and 10 min")
	}
	return nil
}

// takesExact reports whether x402 v2 payments have a fee payer.
func (c *PaymentConfig) takesExact() bool {
	return c.has(ModeX402) && (c.FeePayer != nil || c.FeePayerKeyFile != "" || c.FacilitatorURL != "")
}

func (c *PaymentConfig) has(mode string) bool { return slices.Contains(c.Modes, mode) }

// Registry is what payments and the agent need of the mesh's registry;
// node provides it, so that interop does not import registryapi.
type Registry interface {
	// AgentByKey returns the registered agent bound to pub and its
	// reputation score (nil when it has none); id "" when there is none.
	// The score is the registry's weighted view, in which reports from
	// keys that paid the agent weigh fully and others little: post-pay
	// trust must not be raised by keys that cost nothing.
	AgentByKey(ctx context.Context, pub ed25519.PublicKey) (id string, score *float64, err error)
	// Report files a reputation report about agent id, signed by this
	// agent. An error wrapping a *RegistryError whose Final says so means
	// the registry will never take the report: it is not filed again. Any
	// other error is retried at a later invoice check.
	Report(ctx context.Context, id string, rep Report) error
}

// RegistryError is the registry's answer refusing a request.
type RegistryError struct {
	Status int    // HTTP status
	Body   string // the answer's body, for the logs
}

func (e *RegistryError) Error() string {
	return fmt.Sprintf("the registry answered %d: %s", e.Status, e.Body)
}

// Final: the request as it is will never be taken, so it is not sent
// again: a 4xx answer other than 429 (too many now, retry later).
func (e *RegistryError) Final() bool {
	return e.Status >= 400 && e.Status < 500 && e.Status != http.StatusTooManyRequests
}

// Report is a reputation report (spec 2.7) this agent files about a caller.
// A settlement report times no call: LatencyMS is nil, so it gives the
// registry no speed signal.
type Report struct {
	Success    bool   `json:"success"`
	LatencyMS  *int64 `json:"latency_ms,omitempty"`
	Paid       bool   `json:"paid"`
	Disputed   bool   `json:"disputed"`
	Capability string `json:"capability,omitempty"`
}

// Paywall enforces payment at skill endpoints: the cascade of spec 3.4,
// x402 verification (3.3), prepaid deposits and post-pay invoices.
type Paywall struct {
	cfg      PaymentConfig
	wallet   solana.PublicKey
	chain    *Chain
	ledger   *ledger
	registry Registry
	log      *slog.Logger
	now      func() time.Time
	proofs   *ratelimit.Keyed[string] // proof checks that reach the chain, per client address
	topups   topupLimits              // top-ups per caller key
	running  sync.Map                 // nonces of post-pay invoices whose call is running
	checking sync.Mutex               // one invoice check at a time (checkInvoices)

	receipts *receipts // nil: the agent signs no receipts

	// settler co-signs x402 v2 payments (nil: none are taken; with a
	// facilitator, set by Start); network is the CAIP-2 id of cfg.Network.
	settler settler
	network string
	// accounts are the mints the skills are priced in, whose wallet
	// accounts Start checks.
	accounts tokenAccounts
	// baseURL is the agent's base URL ("" before it is known): the
	// absolute resource URL of an x402 v2 challenge.
	baseURL func() string

	pollMu sync.Mutex // one poll at a time
	noLoop bool       // tests: Start runs no poll loop
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// NewPaywall checks cfg; it opens nothing and starts nothing.
func NewPaywall(cfg PaymentConfig, db *store.DB, reg Registry, log *slog.Logger, now func() time.Time) (*Paywall, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, fmt.Errorf("%w: payment: a store is required", ErrConfig)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	p := &Paywall{
		cfg: cfg, wallet: solana.MustPublicKeyFromBase58(cfg.Wallet), ledger: newLedger(db), registry: reg,
		chain: NewChain(cfg.RPCURL, cfg.Commitment, cfg.RPCTimeout), log: log, now: now, proofs: newProofLimits(),
		topups: newTopupLimits(cfg.TopupsPerHourPerKey), baseURL: func() string { return "" },
	}
	p.network, _ = CAIP2(cfg.Network)
	key := cfg.FeePayer
	if key == nil && cfg.FeePayerKeyFile != "" {
		var err error
		if key, err = LoadWallet(cfg.FeePayerKeyFile); err != nil {
			return nil, fmt.Errorf("%w: payment: fee payer key: %w", ErrConfig, err)
		}
	}
	if key != nil && cfg.has(ModeX402) {
		p.settler = &localSettler{key: key, chain: p.chain, log: log}
	}
	return p, nil
}

// Start checks that the RPC endpoint serves the configured network,
// indexes an older store's records and recounts the accounts awaiting a
// deposit, then runs the deposit poller and the post-pay invoice checks
// until Close (on a first start the poller begins at the wallet's newest
// transaction).
func (p *Paywall) Start(ctx context.Context) error {
	if err := p.chain.CheckGenesis(ctx, p.cfg.Network, p.cfg.GenesisHash); err != nil {
		return err
	}
	if u := p.cfg.FacilitatorURL; u != "" && p.cfg.has(ModeX402) {
		f, err := newFacilitator(ctx, u, p.network, p.chain.timeout, p.cfg.SettleTimeout, p.log)
		if err != nil {
			return err
		}
		p.settler = f
	}
	polls := p.cfg.has(ModeDeposit) || p.cfg.PostpayMinReputation != nil
	if polls {
		if err := p.ledger.indexOnce(p.now(), p.cfg.UnfundedAccountTTL); err != nil {
			return err
		}
		if changed, err := p.ledger.recount(); err != nil {
			return err
		} else if changed {
			p.log.Warn("the counts of accounts awaiting a first deposit did not match the accounts; recounted")
		}
		if err := p.startCheckpoint(ctx); err != nil {
			return err
		}
	}
	p.checkTokenAccounts(ctx)
	ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if polls && !p.noLoop {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pollLoop(ctx)
		}()
	}
	return nil
}

// Close stops the poller and waits for it. Safe to call twice.
func (p *Paywall) Close() {
	p.once.Do(func() {
		if p.cancel != nil {
			p.cancel()
		}
		p.wg.Wait()
		p.chain.Close()
	})
}

// Config is the validated configuration.
func (p *Paywall) Config() PaymentConfig { return p.cfg }

// Guard enforces payment for skill s before next runs, at its price on the
// payment network (its lamports row, and its token rows for x402 v2):
//
//   - a request with an x402 v2 payment (PAYMENT-SIGNATURE, or v1's
//     X-PAYMENT) is settled as one, and one with X-Payment-Proof is
//     checked as the seed's x402 payment;
//   - otherwise a signed caller with free allowance left (by key and by client address) is served;
//   - then a request with X-Api-Key is debited one unit from its prepaid balance;
//   - then a caller trusted for post-pay is served and invoiced;
//   - anything else gets 402 with a fresh challenge.
//
// next's answer is buffered: a 5xx answer charges nothing (the balance is
// refunded, the entitlement stays open for a retry).
func (p *Paywall) Guard(s Skill, next http.Handler) http.Handler {
	row, _ := s.Pricing.For(p.cfg.Network)
	lamports, tokens := row.Amount, s.Pricing.Tokens(p.cfg.Network)
	p.accounts.watch(tokens)
	return httpx.Handle(p.log, func(w http.ResponseWriter, r *http.Request) error {
		if lamports == 0 && len(tokens) == 0 {
			next.ServeHTTP(w, r)
			return nil
		}
		c := CallerFrom(r.Context())
		pc := &paidCall{skill: s.ID, lamports: lamports, tokens: tokens, bind: bindingOf(s.ID, rereadBody(r), c), addr: addrKey(c.IP),
			resource: ResourceInfo{URL: p.resourceURL(r, s.ID), Description: s.Description, MimeType: "application/json"}}
		if pay, v := paymentHeader(r); pay != "" && p.cfg.has(ModeX402) {
			return p.serveExact(w, r, pc, pay, v, next)
		}
		if proof := r.Header.Get(HeaderPaymentProof); proof != "" && p.cfg.has(ModeX402) {
			return p.serveProof(w, r, pc, proof, next)
		}
		cause := ErrPaymentRequired
		if served, err := p.serveFree(w, r, c, next); served || err != nil {
			return err
		}
		if lamports == 0 { // priced only in tokens: balances and post-pay are in lamports
			return p.challenge(w, pc, cause)
		}
		if key := r.Header.Get(HeaderAPIKey); key != "" && p.cfg.has(ModeDeposit) {
			served, err := p.serveBalance(w, r, key, lamports, next)
			if served || err != nil {
				return err
			}
			cause = ErrBalanceEmpty
		}
		if served, err := p.servePostpay(w, r, s.ID, lamports, next); served || err != nil {
			return err
		}
		return p.challenge(w, pc, cause)
	})
}

// resourceURL is the absolute URL of skill: under the agent's base URL, or
// the request's host before it is known.
func (p *Paywall) resourceURL(r *http.Request, skill string) string {
	base := p.baseURL()
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	return base + "/v1/" + skill
}

// serveFree serves a signed caller with free allowance left and counts
// the call against its key and its client address (addrKey); a 5xx answer
// gives the call back.
func (p *Paywall) serveFree(w http.ResponseWriter, r *http.Request, c Caller, next http.Handler) (bool, error) {
	if p.cfg.FreeCallsPerDay <= 0 || c.Pubkey == nil {
		return false, nil
	}
	keys := [][]byte{store.Key("x", "f", "p", hex.EncodeToString(c.Pubkey))}
	if c.IP != "" {
		keys = append(keys, store.Key("x", "f", "i", addrKey(c.IP)))
	}
	if ok, err := p.ledger.takeFree(keys, p.cfg.FreeCallsPerDay, p.now()); err != nil || !ok {
		return false, err
	}
	rec := runPaid(r, "free", next)
	if rec.status >= 500 {
		if err := p.ledger.giveBackFree(keys, p.now()); err != nil {
			p.log.Error("giving back the free call of a failed call", "err", err)
		}
	}
	rec.flush(w)
	return true, nil
}

// serveBalance debits one call from a prepaid balance. served is false
// when the balance is too low (nothing debited).
func (p *Paywall) serveBalance(w http.ResponseWriter, r *http.Request, key string, lamports uint64, next http.Handler) (bool, error) {
	if _, err := p.ownedAccount(r, key); err != nil {
		return false, err
	}
	if p.cfg.DepositRequiresBoundSig && !CallerFrom(r.Context()).Bound {
		return false, ErrUnboundSig
	}
	credits := lamports / p.cfg.CreditDivisor
	remaining, ok, err := p.ledger.debit(key, credits)
	if err != nil || !ok {
		return false, err
	}
	rec := runPaid(r, "balance", next)
	debited := lamports
	if rec.status >= 500 {
		if err := p.ledger.refund(key, credits); err != nil {
			p.log.Error("refunding a failed call", "err", err)
		} else {
			debited, remaining = 0, remaining+credits
		}
	}
	p.receipts.attach(rec.header, r, rec.status, identity.Receipt{By: "balance", Ref: debitRef(), Lamports: lamports, At: p.now().Unix()})
	rec.header.Set(HeaderDebitedLamports, strconv.FormatUint(debited, 10))
	rec.header.Set(HeaderBalanceRemaining, strconv.FormatUint(remaining*p.cfg.CreditDivisor, 10))
	rec.flush(w)
	return true, nil
}

// ownedAccount returns the prepaid account of key when the request is
// signed by the key that asked for it. The api_key is public on chain (the
// deposit memo), so it is never a credential alone. A key this agent never
// issued is 401 api_key_unknown rather than a fall-through to 402: it is a
// client's mistake (another agent's key, a typo), and a client that pays
// per call on 402 should not do so while it means to spend a balance.
func (p *Paywall) ownedAccount(r *http.Request, key string) (*accountRec, error) {
	acct, err := p.ledger.account(key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrAPIKeyUnknown
	} else if err != nil {
		return nil, err
	}
	if c := CallerFrom(r.Context()); acct.Owner != "" && (c.Pubkey == nil || identity.EncodePublicKey(c.Pubkey) != acct.Owner) {
		return nil, ErrAPIKeyOwner
	}
	return acct, nil
}

// capture buffers an answer so that payment is settled on its status.
type capture struct {
	header http.Header
	status int
	body   bytes.Buffer
}

// runPaid runs next for a call paid by how, buffering its answer so that
// payment is settled on its status before anything is sent.
func runPaid(r *http.Request, how string, next http.Handler) *capture {
	rec := &capture{header: http.Header{}, status: http.StatusOK}
	next.ServeHTTP(withPaidBy(rec, r, how))
	return rec
}

func (c *capture) Header() http.Header { return c.header }
func (c *capture) WriteHeader(code int) {
	if code >= 200 {
		c.status = code
	}
}
func (c *capture) Write(b []byte) (int, error) { return c.body.Write(b) }

func (c *capture) flush(w http.ResponseWriter) {
	for k, v := range c.header {
		w.Header()[k] = v
	}
	w.WriteHeader(c.status)
	w.Write(c.body.Bytes())
}
