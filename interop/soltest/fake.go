// Package soltest is a Solana JSON-RPC server for tests: it answers the
// methods interop uses with the shapes of Solana's RPC documentation, for
// transactions the test builds and signs with solana-go (legacy and v0,
// with address lookup tables), and it can fail on demand (RPC errors,
// timeouts, transactions not yet visible).
package soltest

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
)

// Genesis is the fake chain's genesis hash (that of devnet, so a paywall
// configured for chain-devnet accepts it without an override).
const Genesis = "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG"

// Chain is a fake Solana cluster behind an httptest JSON-RPC server.
type Chain struct {
	URL string

	mu        sync.Mutex
	genesis   string
	slot      uint64
	balances  map[solana.PublicKey]uint64
	txs       map[string]*landed
	order     []string // signatures in landing order
	tables    map[solana.PublicKey]solana.PublicKeySlice
	failures  map[string]Failure
	blockTime int64
	// JSONEncoding makes getTransaction answer in "json" encoding whatever
	// was asked, as an older RPC node would.
	JSONEncoding bool
	calls        map[string]int
	// dropSends: sendTransaction answers the signature but nothing lands,
	// as when a transaction is lost on its way to the leader.
	dropSends bool
	// confirmOnly: transactions land confirmed, not finalized, until Finalize.
	confirmOnly bool
}

// Failure is an injected fault of one RPC method.
type Failure int

// Faults.
const (
	// RPCError answers a JSON-RPC error object.
	RPCError Failure = iota + 1
	// Hang answers nothing until the client gives up.
	Hang
	// HTTP500 answers a bare HTTP 500.
	HTTP500
)

type landed struct {
	raw       []byte
	tx        *solana.Transaction
	slot      uint64
	blockTime int64
	meta      rpc.TransactionMeta
	hidden    bool
	// confirmed: visible at confirmed commitment only, not yet finalized.
	confirmed bool
}

// New starts a fake chain; it stops with the test.
func New(t testing.TB) *Chain {
	c := &Chain{genesis: Genesis, slot: 1000, balances: map[solana.PublicKey]uint64{},
		txs: map[string]*landed{}, tables: map[solana.PublicKey]solana.PublicKeySlice{},
		failures: map[string]Failure{}, calls: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// SetGenesis changes the genesis hash the chain reports.
func (c *Chain) SetGenesis(h string) { c.mu.Lock(); c.genesis = h; c.mu.Unlock() }

// SetBlockTime sets the blockTime of transactions landed from now on
// (default: the wall clock at landing).
func (c *Chain) SetBlockTime(unix int64) { c.mu.Lock(); c.blockTime = unix; c.mu.Unlock() }

// Fund credits lamports to addr.
func (c *Chain) Fund(addr solana.PublicKey, lamports uint64) {
	c.mu.Lock()
	c.balances[addr] += lamports
	c.mu.Unlock()
}

// Balance is addr's balance.
func (c *Chain) Balance(addr solana.PublicKey) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.balances[addr]
}

// AddTable creates an address lookup table.
func (c *Chain) AddTable(addr solana.PublicKey, entries solana.PublicKeySlice) {
	c.mu.Lock()
	c.tables[addr] = entries
	c.mu.Unlock()
}

// Fail makes method fail with f until Heal.
func (c *Chain) Fail(method string, f Failure) { c.mu.Lock(); c.failures[method] = f; c.mu.Unlock() }

// Heal removes every injected fault.
func (c *Chain) Heal() { c.mu.Lock(); c.failures = map[string]Failure{}; c.mu.Unlock() }

// Calls is how often method was called.
func (c *Chain) Calls(method string) int { c.mu.Lock(); defer c.mu.Unlock(); return c.calls[method] }

// DropSends makes sendTransaction answer a signature without landing
// anything (true) or land again (false).
func (c *Chain) DropSends(drop bool) { c.mu.Lock(); c.dropSends = drop; c.mu.Unlock() }

// ConfirmOnly makes transactions land confirmed but not finalized (true),
// until Finalize; false lands them finalized again.
func (c *Chain) ConfirmOnly(on bool) { c.mu.Lock(); c.confirmOnly = on; c.mu.Unlock() }

// Finalize finalizes every confirmed transaction.
func (c *Chain) Finalize() {
	c.mu.Lock()
	for _, l := range c.txs {
		l.confirmed = false
	}
	c.mu.Unlock()
}

// LatestBlockhash is the blockhash getLatestBlockhash answers now.
func (c *Chain) LatestBlockhash() solana.Hash {
	c.mu.Lock()
	defer c.mu.Unlock()
	return hashAt(c.slot)
}

// Advance moves the chain n slots (and block heights) on, as time passing
// would: blockhashes older than 150 blocks expire.
func (c *Chain) Advance(n uint64) { c.mu.Lock(); c.slot += n; c.mu.Unlock() }

// Land options.
type Land struct {
	// Err is meta.err: the transaction failed (fee charged, nothing else).
	Err any
	// Inner are inner instructions, indexes into the full account list.
	Inner []rpc.InnerInstruction
	// Hidden: landed, but not visible at any commitment yet.
	Hidden bool
}

// Land executes tx (its system transfers, top-level and inner, move
// lamports) and records it; it returns the signature.
func (c *Chain) Land(tx *solana.Transaction, o Land) solana.Signature {
	raw, err := tx.MarshalBinary()
	if err != nil {
		panic(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	sig, err := c.land(raw, o)
	if err != nil {
		panic(err)
	}
	return sig
}

// Reveal makes a hidden transaction visible.
func (c *Chain) Reveal(sig solana.Signature) {
	c.mu.Lock()
	if l := c.txs[sig.String()]; l != nil {
		l.hidden = false
	}
	c.mu.Unlock()
}

func (c *Chain) land(raw []byte, o Land) (solana.Signature, error) {
	tx, err := solana.TransactionFromBytes(raw)
	if err != nil {
		return solana.Signature{}, err
	}
	if len(tx.Signatures) == 0 {
		return solana.Signature{}, fmt.Errorf("unsigned transaction")
	}
	sig := tx.Signatures[0]
	if _, dup := c.txs[sig.String()]; dup {
		return sig, fmt.Errorf("AlreadyProcessed")
	}
	keys := append(solana.PublicKeySlice{}, tx.Message.AccountKeys...)
	var loaded rpc.LoadedAddresses
	loaded.Writable, loaded.ReadOnly = solana.PublicKeySlice{}, solana.PublicKeySlice{}
	for _, l := range tx.Message.AddressTableLookups {
		tbl, ok := c.tables[l.AccountKey]
		if !ok {
			return sig, fmt.Errorf("address lookup table %s not found", l.AccountKey)
		}
		for _, i := range l.WritableIndexes {
			loaded.Writable = append(loaded.Writable, tbl[i])
		}
		for _, i := range l.ReadonlyIndexes {
			loaded.ReadOnly = append(loaded.ReadOnly, tbl[i])
		}
	}
	keys = append(append(keys, loaded.Writable...), loaded.ReadOnly...)
	pre := make([]uint64, len(keys))
	for i, k := range keys {
		pre[i] = c.balances[k]
	}
	fee := uint64(5000 * len(tx.Signatures))
	c.balances[keys[0]] -= min(fee, c.balances[keys[0]])
	if o.Err == nil {
		// System Transfer (2: from, to) and TransferWithSeed (11: from,
		// base, to) move lamports, top-level or inner.
		move := func(prog uint16, accts []uint16, data []byte) {
			if int(prog) >= len(keys) || !keys[prog].Equals(solana.SystemProgramID) || len(data) < 12 {
				return
			}
			toIdx := map[uint32]int{2: 1, 11: 2}[binary.LittleEndian.Uint32(data)]
			if toIdx == 0 || len(accts) <= toIdx {
				return
			}
			n := binary.LittleEndian.Uint64(data[4:12])
			from, to := keys[accts[0]], keys[accts[toIdx]]
			c.balances[from] -= min(n, c.balances[from])
			c.balances[to] += n
		}
		for _, ix := range tx.Message.Instructions {
			move(ix.ProgramIDIndex, ix.Accounts, ix.Data)
		}
		for _, in := range o.Inner {
			for _, ix := range in.Instructions {
				move(ix.ProgramIDIndex, ix.Accounts, ix.Data)
			}
		}
	}
	post := make([]uint64, len(keys))
	for i, k := range keys {
		post[i] = c.balances[k]
	}
	c.slot++
	inner := o.Inner
	if inner == nil {
		inner = []rpc.InnerInstruction{}
	}
	bt := c.blockTime
	if bt == 0 {
		bt = time.Now().Unix()
	}
	c.txs[sig.String()] = &landed{raw: raw, tx: tx, slot: c.slot, blockTime: bt, hidden: o.Hidden, confirmed: c.confirmOnly,
		meta: rpc.TransactionMeta{Err: o.Err, Fee: fee, PreBalances: pre, PostBalances: post,
			InnerInstructions: inner, LoadedAddresses: loaded, LogMessages: []string{}}}
	c.order = append(c.order, sig.String())
	return sig, nil
}

type request struct {
	ID     json.RawMessage   `json:"id"`
	Method string            `json:"method"`
	Params []json.RawMessage `json:"params"`
}

func (c *Chain) serve(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.calls[req.Method]++
	f := c.failures[req.Method]
	c.mu.Unlock()
	switch f {
	case Hang:
		<-r.Context().Done()
		return
	case HTTP500:
		http.Error(w, "upstream exploded", http.StatusInternalServerError)
		return
	case RPCError:
		writeRPC(w, req.ID, nil, &rpcErr{Code: -32005, Message: "Node is behind by 42 slots"})
		return
	}
	c.mu.Lock()
	res, rerr := c.dispatch(req)
	c.mu.Unlock()
	writeRPC(w, req.ID, res, rerr)
}

type rpcErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeRPC(w http.ResponseWriter, id json.RawMessage, result any, e *rpcErr) {
	out := map[string]any{"jsonrpc": "2.0", "id": id}
	if e != nil {
		out["error"] = e
	} else {
		out["result"] = result
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

func (c *Chain) ctx(v any) map[string]any {
	return map[string]any{"context": map[string]any{"apiVersion": "2.2.0", "slot": c.slot}, "value": v}
}

func param[T any](req request, i int) (T, bool) {
	var v T
	if i >= len(req.Params) {
		return v, false
	}
	return v, json.Unmarshal(req.Params[i], &v) == nil
}

func (c *Chain) dispatch(req request) (any, *rpcErr) {
	invalid := &rpcErr{Code: -32602, Message: "Invalid params"}
	switch req.Method {
	case "getGenesisHash":
		return c.genesis, nil
	case "getLatestBlockhash":
		return c.ctx(map[string]any{"blockhash": hashAt(c.slot).String(), "lastValidBlockHeight": c.slot + 150}), nil
	case "isBlockhashValid":
		s, _ := param[string](req, 0)
		h, err := solana.HashFromBase58(s)
		if err != nil {
			return nil, invalid
		}
		return c.ctx(c.blockhashValid(h)), nil
	case "getBalance":
		s, _ := param[string](req, 0)
		k, err := solana.PublicKeyFromBase58(s)
		if err != nil {
			return nil, invalid
		}
		return c.ctx(c.balances[k]), nil
	case "sendTransaction":
		s, _ := param[string](req, 0)
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, invalid
		}
		if c.dropSends {
			tx, err := solana.TransactionFromBytes(raw)
			if err != nil || len(tx.Signatures) == 0 {
				return nil, invalid
			}
			return tx.Signatures[0].String(), nil
		}
		sig, err := c.land(raw, Land{})
		if err != nil {
			return nil, &rpcErr{Code: -32002, Message: "Transaction simulation failed: " + err.Error()}
		}
		return sig.String(), nil
	case "getSignatureStatuses":
		sigs, ok := param[[]string](req, 0)
		if !ok {
			return nil, invalid
		}
		out := make([]any, len(sigs))
		for i, s := range sigs {
			if l := c.txs[s]; l != nil && !l.hidden {
				out[i] = map[string]any{"slot": l.slot, "confirmations": nil, "err": l.meta.Err,
					"status": status(l.meta.Err), "confirmationStatus": l.status()}
			}
		}
		return c.ctx(out), nil
	case "getBlockHeight":
		return c.slot, nil
	case "getTransaction":
		return c.getTransaction(req)
	case "getSignaturesForAddress":
		return c.signaturesFor(req)
	}
	return nil, &rpcErr{Code: -32601, Message: "Method not found"}
}

// blockhashValid: a blockhash of getLatestBlockhash (its slot in the
// first 8 bytes) is valid for 150 slots, as on Solana.
func (c *Chain) blockhashValid(h solana.Hash) bool {
	slot := binary.BigEndian.Uint64(h[:8])
	return h == hashAt(slot) && slot <= c.slot && c.slot-slot <= 150
}

// hashAt is the blockhash getLatestBlockhash answers at slot.
func hashAt(slot uint64) solana.Hash {
	var h solana.Hash
	binary.BigEndian.PutUint64(h[:], slot)
	return h
}

func status(err any) any {
	if err == nil {
		return map[string]any{"Ok": nil}
	}
	return map[string]any{"Err": err}
}

func (c *Chain) getTransaction(req request) (any, *rpcErr) {
	s, _ := param[string](req, 0)
	opts, _ := param[struct {
		Encoding   string  `json:"encoding"`
		Commitment string  `json:"commitment"`
		MaxVersion *uint64 `json:"maxSupportedTransactionVersion"`
	}](req, 1)
	l := c.txs[s]
	if l == nil || !l.visibleAt(opts.Commitment) {
		return nil, nil
	}
	versioned := l.tx.Message.IsVersioned()
	if versioned && opts.MaxVersion == nil {
		return nil, &rpcErr{Code: -32015, Message: "Transaction version (0) is not supported by the requesting client. Please try the request again with the following configuration parameter: \"maxSupportedTransactionVersion\": 0"}
	}
	var version any = "legacy"
	if versioned {
		version = 0
	}
	meta := l.meta
	meta.Status = rpc.DeprecatedTransactionMetaStatus(status(meta.Err).(map[string]any))
	var tx any = []string{base64.StdEncoding.EncodeToString(l.raw), "base64"}
	if c.JSONEncoding || opts.Encoding == "json" {
		tx = l.tx
	} else if opts.Encoding != "" && opts.Encoding != "base64" {
		return nil, &rpcErr{Code: -32602, Message: "unsupported encoding " + opts.Encoding}
	}
	return map[string]any{"slot": l.slot, "blockTime": l.blockTime, "transaction": tx, "meta": meta, "version": version}, nil
}

func (c *Chain) signaturesFor(req request) (any, *rpcErr) {
	s, _ := param[string](req, 0)
	addr, err := solana.PublicKeyFromBase58(s)
	if err != nil {
		return nil, &rpcErr{Code: -32602, Message: "Invalid param: Invalid"}
	}
	opts, _ := param[struct {
		Limit      int    `json:"limit"`
		Before     string `json:"before"`
		Until      string `json:"until"`
		Commitment string `json:"commitment"`
	}](req, 1)
	if opts.Limit <= 0 || opts.Limit > 1000 {
		opts.Limit = 1000
	}
	var out []map[string]any
	started := opts.Before == ""
	for _, sig := range slices.Backward(c.order) {
		if !started {
			started = sig == opts.Before
			continue
		}
		if sig == opts.Until || len(out) == opts.Limit {
			break
		}
		l := c.txs[sig]
		if !l.visibleAt(opts.Commitment) || !touches(l, addr) {
			continue
		}
		out = append(out, map[string]any{"signature": sig, "slot": l.slot, "err": l.meta.Err, "memo": nil,
			"blockTime": l.blockTime, "confirmationStatus": l.status()})
	}
	if out == nil {
		out = []map[string]any{}
	}
	return out, nil
}

func touches(l *landed, addr solana.PublicKey) bool {
	all := append(append(append(solana.PublicKeySlice{}, l.tx.Message.AccountKeys...), l.meta.LoadedAddresses.Writable...), l.meta.LoadedAddresses.ReadOnly...)
	return slices.ContainsFunc(all, addr.Equals)
}

func (l *landed) status() string {
	if l.confirmed {
		return "confirmed"
	}
	return "finalized"
}

// visibleAt: a transaction not yet finalized is seen at confirmed (or
// processed) commitment only; an empty commitment is the RPC's default,
// finalized.
func (l *landed) visibleAt(commitment string) bool {
	return !l.hidden && (!l.confirmed || commitment == "confirmed" || commitment == "processed")
}
