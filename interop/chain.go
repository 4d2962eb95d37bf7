package interop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/programs/system"
	"github.com/gagliardetto/solana-go/rpc"
	"github.com/gagliardetto/solana-go/rpc/jsonrpc"
)

// Commitment levels a payment may be checked at. "processed" is refused:
// a processed transaction can still be dropped.
const (
	CommitmentConfirmed = "confirmed"
	CommitmentFinalized = "finalized"
)

// DefaultRPCTimeout bounds one RPC call.
const DefaultRPCTimeout = 15 * time.Second

// Chain is this package's use of a Solana JSON-RPC endpoint (solana-go's
// client): reading and verifying transactions, paging a wallet's
// signatures, and paying.
type Chain struct {
	url        string
	client     *rpc.Client
	transport  *http.Transport
	commitment rpc.CommitmentType
	timeout    time.Duration
	genesis    *atomic.Pointer[string] // the endpoint's genesis hash, once known (shared by atLeast's copies)
}

// NewChain returns a client of the RPC endpoint url that reads at the given
// commitment (confirmed or finalized; empty means confirmed). It opens no
// connection until used.
func NewChain(url, commitment string, timeout time.Duration) *Chain {
	if commitment == "" {
		commitment = CommitmentConfirmed
	}
	if timeout <= 0 {
		timeout = DefaultRPCTimeout
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	rc := jsonrpc.NewClientWithOpts(url, &jsonrpc.RPCClientOpts{HTTPClient: &http.Client{Transport: tr}})
	return &Chain{url: url, client: rpc.NewWithCustomRPCClient(rc), transport: tr,
		commitment: rpc.CommitmentType(commitment), timeout: timeout, genesis: new(atomic.Pointer[string])}
}

// Close drops idle connections to the RPC endpoint.
func (c *Chain) Close() { c.transport.CloseIdleConnections() }

// URL is the RPC endpoint.
func (c *Chain) URL() string { return c.url }

// call runs fn with the per-call timeout and maps failures to the
// client-facing RPC errors.
func (c *Chain) call(ctx context.Context, what string, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err := fn(ctx)
	if err == nil {
		return nil
	}
	var ne net.Error
	var re *jsonrpc.RPCError
	// The client is told the sentinel's detail only: the cause names the
	// endpoint, whose URL may carry the operator's API key.
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return ErrRPCTimeout.Because(fmt.Errorf("%s: no answer within %s: %w", what, c.timeout, err))
	case errors.As(err, &re):
		return ErrRPC.Because(fmt.Errorf("%s: RPC error %d: %s", what, re.Code, re.Message))
	case errors.Is(err, context.Canceled):
		return err
	}
	return ErrRPC.Because(fmt.Errorf("%s: %w", what, err))
}

// GenesisHash asks the endpoint for its genesis hash.
func (c *Chain) GenesisHash(ctx context.Context) (string, error) {
	if g := c.genesis.Load(); g != nil {
		return *g, nil // a chain's genesis never changes: asked once
	}
	var h solana.Hash
	err := c.call(ctx, "getGenesisHash", func(ctx context.Context) (err error) {
		h, err = c.client.GetGenesisHash(ctx)
		return err
	})
	if err != nil {
		return "", err
	}
	g := h.String()
	c.genesis.Store(&g)
	return g, nil
}

// CheckGenesis verifies that the endpoint serves network. want overrides
// the known hash (a local validator has its own genesis).
func (c *Chain) CheckGenesis(ctx context.Context, network, want string) error {
	if want == "" {
		var ok bool
		if want, ok = GenesisHash(network); !ok {
			return fmt.Errorf("%w: network %q has no known genesis hash; set the genesis hash override", ErrConfig, network)
		}
	}
	got, err := c.GenesisHash(ctx)
	if err != nil {
		return fmt.Errorf("interop: checking the RPC's network: %w", err)
	}
	if got != want {
		return fmt.Errorf("%w: %s answers %s, %s needs %s", ErrGenesisMismatch, c.url, got, network, want)
	}
	return nil
}

// maxTxVersion: legacy and v0 transactions are read.
var maxTxVersion uint64 = 0

// Transaction fetches a transaction at the chain's commitment, base64
// encoded (solana-go decodes legacy and v0 messages). A transaction not
// (yet) visible at the commitment is ErrTxNotVisible.
func (c *Chain) Transaction(ctx context.Context, sig solana.Signature) (*rpc.GetTransactionResult, error) {
	var out *rpc.GetTransactionResult
	err := c.call(ctx, "getTransaction", func(ctx context.Context) error {
		return c.client.RPCCallForInto(ctx, &out, "getTransaction", []any{sig.String(), map[string]any{
			"encoding": solana.EncodingBase64, "commitment": c.commitment,
			"maxSupportedTransactionVersion": maxTxVersion,
		}})
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, ErrTxNotVisible.With("transaction %s is not %s yet; retry shortly", sig, c.commitment)
	}
	return out, nil
}

// Signatures returns up to limit signatures of transactions that touch
// addr, newest first, older than before and newer than until (either may
// be zero).
func (c *Chain) Signatures(ctx context.Context, addr solana.PublicKey, before, until solana.Signature, limit int) ([]*rpc.TransactionSignature, error) {
	var out []*rpc.TransactionSignature
	err := c.call(ctx, "getSignaturesForAddress", func(ctx context.Context) (err error) {
		out, err = c.client.GetSignaturesForAddressWithOpts(ctx, addr, &rpc.GetSignaturesForAddressOpts{
			Limit: &limit, Before: before, Until: until, Commitment: c.commitment,
		})
		return err
	})
	return out, err
}

// Balance is addr's balance in lamports.
func (c *Chain) Balance(ctx context.Context, addr solana.PublicKey) (uint64, error) {
	var n uint64
	err := c.call(ctx, "getBalance", func(ctx context.Context) error {
		res, err := c.client.GetBalance(ctx, addr, c.commitment)
		if err == nil {
			n = res.Value
		}
		return err
	})
	return n, err
}

// PaymentTx builds and signs a transaction of two instructions: a system
// transfer of lamports from w to payTo, and a memo whose data is memoText.
func PaymentTx(w *Wallet, payTo solana.PublicKey, lamports uint64, memoText string, blockhash solana.Hash) (*solana.Transaction, error) {
	transfer, err := system.NewTransferInstruction(lamports, w.PublicKey(), payTo).ValidateAndBuild()
	if err != nil {
		return nil, err
	}
	tx, err := solana.NewTransaction([]solana.Instruction{transfer, MemoInstruction(memoText, w.PublicKey())}, blockhash, solana.TransactionPayer(w.PublicKey()))
	if err != nil {
		return nil, err
	}
	_, err = tx.Sign(w.signer)
	return tx, err
}

// MemoInstruction is a memo program instruction whose data is exactly
// text, signed by signer. (solana-go's memo builder prefixes the data with
// its length, which the memo program would keep as part of the memo.)
func MemoInstruction(text string, signer solana.PublicKey) solana.Instruction {
	return solana.NewInstruction(solana.MemoProgramID, solana.AccountMetaSlice{solana.Meta(signer).SIGNER()}, []byte(text))
}

// Pay sends lamports from w to payTo with memoText and waits until the
// transaction reaches the chain's commitment, or until its blockhash
// expires (ErrTxExpired: it can no longer land, nothing was paid). The
// signature is returned whenever the transaction may have been sent, also
// with an error, so that the caller can look it up or present it later;
// it is zero when the RPC refused the transaction.
func (c *Chain) Pay(ctx context.Context, w *Wallet, payTo solana.PublicKey, lamports uint64, memoText string) (solana.Signature, error) {
	var bh solana.Hash
	var lastValid uint64
	err := c.call(ctx, "getLatestBlockhash", func(ctx context.Context) error {
		res, err := c.client.GetLatestBlockhash(ctx, c.commitment)
		if err == nil {
			bh, lastValid = res.Value.Blockhash, res.Value.LastValidBlockHeight
		}
		return err
	})
	if err != nil {
		return solana.Signature{}, err
	}
	tx, err := PaymentTx(w, payTo, lamports, memoText, bh)
	if err != nil {
		return solana.Signature{}, err
	}
	refused := false
	err = c.call(ctx, "sendTransaction", func(ctx context.Context) error {
		_, err := c.client.SendTransactionWithOpts(ctx, tx, rpc.TransactionOpts{PreflightCommitment: c.commitment})
		var re *jsonrpc.RPCError
		refused = errors.As(err, &re) // an answer, not a lost request: the transaction was not taken
		return err
	})
	sig := tx.Signatures[0]
	switch {
	case refused:
		return solana.Signature{}, err
	case err != nil:
		return sig, err
	}
	return sig, c.WaitConfirmed(ctx, sig, lastValid, 500*time.Millisecond)
}

// WaitConfirmed polls the signature's status every interval until it
// reaches the chain's commitment, fails, or ctx ends. With lastValid (the
// last block height at which its blockhash is valid; 0: unknown) it also
// ends when the chain has passed that height without the transaction:
// then it can never land, and the answer is ErrTxExpired.
func (c *Chain) WaitConfirmed(ctx context.Context, sig solana.Signature, lastValid uint64, interval time.Duration) error {
	return c.waitStatus(ctx, sig, interval, func(ctx context.Context) error {
		if lastValid == 0 {
			return nil
		}
		height, err := c.blockHeight(ctx)
		if err == nil && height > lastValid {
			return fmt.Errorf("%w: %s was not included by block height %d (the chain is at %d)", ErrTxExpired, sig, lastValid, height)
		}
		return nil
	})
}

// waitStatus polls the signature's status every interval until it reaches
// the chain's commitment (nil), fails on chain (ErrTxFailed), or ctx ends.
// expired is asked before each status read: a transaction that could
// still land by then is visible by the time expired says it cannot, so
// when the status is still empty its error ends the wait.
func (c *Chain) waitStatus(ctx context.Context, sig solana.Signature, interval time.Duration, expired func(context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		gone := expired(ctx)
		st, err := c.signatureStatus(ctx, sig)
		switch {
		case errors.Is(err, context.Canceled):
			return err
		case err == nil && st != nil && st.Err != nil:
			return ErrTxFailed.With("transaction %s failed: %v", sig, st.Err)
		case err == nil && st != nil && reached(st.ConfirmationStatus, c.commitment):
			return nil
		case err == nil && st == nil && gone != nil:
			return gone
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to be %s: %w", sig, c.commitment, ctx.Err())
		case <-t.C:
		}
	}
}

func (c *Chain) blockHeight(ctx context.Context) (uint64, error) {
	var h uint64
	err := c.call(ctx, "getBlockHeight", func(ctx context.Context) (err error) {
		h, err = c.client.GetBlockHeight(ctx, c.commitment)
		return err
	})
	return h, err
}

// atLeast is c reading at commitment when that is stricter than its own
// (finalized over confirmed); it shares c's connections.
func (c *Chain) atLeast(commitment string) *Chain {
	if commitment != CommitmentFinalized || c.commitment == rpc.CommitmentFinalized {
		return c
	}
	cp := *c
	cp.commitment = rpc.CommitmentFinalized
	return &cp
}

func reached(st rpc.ConfirmationStatusType, want rpc.CommitmentType) bool {
	if st == rpc.ConfirmationStatusFinalized {
		return true
	}
	return st == rpc.ConfirmationStatusConfirmed && want == rpc.CommitmentConfirmed
}
