package interop

import (
	"errors"
	"net/http"

	"github.com/agentmesh/mesh/internal/httpx"
)

// Errors a caller of a skill endpoint can see. A failed payment check is a
// 402 with its own code, and the 402 body also carries a fresh challenge,
// so a client always knows how to pay; proof checks and top-ups over their
// limits are 429 with Retry-After, and an answer too large to keep for a
// replay is 410 once gone.
var (
	ErrPaymentRequired = httpx.E(http.StatusPaymentRequired, "payment_required", "payment required")
	ErrProofMalformed  = httpx.E(http.StatusPaymentRequired, "payment_proof_malformed", "X-Payment-Proof is not a base58 transaction signature")
	ErrNonceUnknown    = httpx.E(http.StatusPaymentRequired, "payment_nonce_unknown", "payment nonce was not issued by this agent")
	ErrNonceExpired    = httpx.E(http.StatusPaymentRequired, "payment_nonce_expired", "payment nonce has expired")
	ErrNonceUsed       = httpx.E(http.StatusPaymentRequired, "payment_nonce_used", "payment nonce was already paid by another transaction")
	ErrPaymentBinding  = httpx.E(http.StatusPaymentRequired, "payment_binding_mismatch",
		"payment was made for another request: the retry must repeat the challenged request's skill, body and Mesh-Sig key")
	ErrProofUsed        = httpx.E(http.StatusPaymentRequired, "payment_proof_used", "transaction already paid for another challenge")
	ErrAnswerGone       = httpx.E(http.StatusGone, "payment_answer_gone", "the answer to this payment was too large to keep and has been served as often as it may be")
	ErrUnderpaid        = httpx.E(http.StatusPaymentRequired, "payment_underpaid", "transaction pays less than the price")
	ErrWrongDestination = httpx.E(http.StatusPaymentRequired, "payment_wrong_destination", "transaction does not pay the provider wallet")
	ErrMemoMissing      = httpx.E(http.StatusPaymentRequired, "payment_memo_missing", "transaction has no memo instruction")
	ErrMemoMismatch     = httpx.E(http.StatusPaymentRequired, "payment_memo_mismatch", "transaction memo is not the issued nonce")
	ErrMemoDuplicate    = httpx.E(http.StatusPaymentRequired, "payment_memo_duplicate", "transaction carries more than one memo")
	ErrTxFailed         = httpx.E(http.StatusPaymentRequired, "payment_tx_failed", "transaction failed on chain")
	ErrTxNotVisible     = httpx.E(http.StatusPaymentRequired, "payment_not_visible", "transaction is not visible at the required commitment yet; retry shortly")
	ErrTxMalformed      = httpx.E(http.StatusPaymentRequired, "payment_tx_malformed", "transaction could not be decoded")
	ErrRPC              = httpx.E(http.StatusPaymentRequired, "payment_rpc_error", "the chain RPC could not be asked; retry shortly")
	ErrRPCTimeout       = httpx.E(http.StatusPaymentRequired, "payment_rpc_timeout", "the chain RPC did not answer in time; retry shortly")
	ErrBalanceEmpty     = httpx.E(http.StatusPaymentRequired, "balance_insufficient", "prepaid balance is lower than the price")
	ErrProofRateLimited = httpx.E(http.StatusTooManyRequests, "proof_rate_limited",
		"too many payment proofs from this address were checked on chain; retry in a few seconds")
	ErrTopupRateLimited = httpx.E(http.StatusTooManyRequests, "topup_rate_limited",
		"too many top-ups from this key; retry after Retry-After seconds")
	ErrTooManyUnfundedFromAddr = httpx.E(http.StatusTooManyRequests, "too_many_unfunded_from_address",
		"this address holds as many accounts awaiting a first deposit as the agent takes from one; retry after Retry-After seconds")
	ErrTooManyUnfunded = httpx.E(http.StatusTooManyRequests, "too_many_unfunded_accounts",
		"the agent holds as many accounts awaiting a first deposit as it takes; retry after Retry-After seconds")

	ErrAPIKeyUnknown = httpx.E(http.StatusUnauthorized, "api_key_unknown", "X-Api-Key is not known to this agent")
	ErrAPIKeyOwner   = httpx.E(http.StatusUnauthorized, "api_key_owner", "X-Api-Key must be used with a Mesh-Sig by the key that requested it")
	ErrUnboundSig    = httpx.E(http.StatusUnauthorized, "bound_signature_required",
		"this agent debits a prepaid balance only for a v1-bound Mesh-Sig, which names the agent and the X-Api-Key")
)

// Errors of configuration and of the client, matched with errors.Is.
var (
	// ErrConfig wraps every configuration problem.
	ErrConfig = errors.New("interop: invalid configuration")
	// ErrGenesisMismatch is returned by Start when the RPC endpoint serves
	// another network than the configured one.
	ErrGenesisMismatch = errors.New("interop: RPC genesis hash does not match the configured network")
	// ErrBadPayLink is returned for a string that is not a native-coin payment link.
	ErrBadPayLink = errors.New("interop: invalid payment link")
	// ErrBadChallenge is returned for a 402 answer that carries no usable challenge.
	ErrBadChallenge = errors.New("interop: invalid x402 challenge")
	// ErrBadAmount is returned for a coin amount that is not an exact decimal.
	ErrBadAmount = errors.New("interop: invalid coin amount")
	// ErrBadWallet is returned for wallet key material that cannot be read.
	ErrBadWallet = errors.New("interop: invalid wallet key")
	// ErrRefused is returned by the client when it will not pay a challenge
	// (over the cap, wrong network or payee, expired, no wallet).
	ErrRefused = errors.New("interop: payment refused by the client")
	// ErrTxExpired is returned by Chain.Pay when the transaction's blockhash
	// expired before it landed: it can never land, and nothing was paid.
	ErrTxExpired = errors.New("interop: the payment transaction expired before it landed; nothing was paid")
	// ErrTokensOnly is returned by the client for a skill whose 402 offers
	// SPL token prices only (x402 v2, PAYMENT-REQUIRED) and nothing in
	// lamports: it pays in lamports only.
	ErrTokensOnly = errors.New("interop: the skill is priced only in SPL tokens, which this client does not pay")
	// ErrCall is returned by the client for an unexpected answer of an agent or node.
	ErrCall = errors.New("interop: call failed")
)

// Errors of x402 v2 payments (the "exact" scheme on Solana: a partially
// signed SPL transfer the agent co-signs as fee payer and submits). Each
// is a 402 with a fresh challenge, like the checks of the seed's proofs.
var (
	ErrPayloadMalformed = httpx.E(http.StatusPaymentRequired, "payment_payload_malformed",
		"PAYMENT-SIGNATURE (or X-PAYMENT) is not base64 JSON of an x402 payment payload with payload.transaction, a base64 Solana transaction")
	ErrSchemeUnsupported = httpx.E(http.StatusPaymentRequired, "payment_scheme_unsupported",
		"this agent takes the exact scheme on its own network, for skills priced in an SPL token")
	ErrFeePayerMismatch = httpx.E(http.StatusPaymentRequired, "payment_fee_payer_mismatch", "the transaction's fee payer is not the agent's (extra.feePayer)")
	ErrFeePayerInUse    = httpx.E(http.StatusPaymentRequired, "payment_fee_payer_in_use",
		"the transaction names the fee payer in an instruction: the fee payer only pays the network fee")
	ErrSignersInvalid = httpx.E(http.StatusPaymentRequired, "payment_signers_invalid",
		"the transaction must need exactly two signatures, the fee payer's and the token authority's, and carry a valid one of the authority")
	ErrTxLayout = httpx.E(http.StatusPaymentRequired, "payment_tx_layout",
		"the transaction must be 3 to 7 instructions without address lookup tables: compute unit limit, compute unit price, TransferChecked, then memo (and Lighthouse) instructions")
	ErrComputeBudget = httpx.E(http.StatusPaymentRequired, "payment_compute_budget",
		"the compute unit limit or price instruction is missing, malformed or over the agent's bounds")
	ErrNoTransfer = httpx.E(http.StatusPaymentRequired, "payment_no_transfer",
		"the third instruction is not a TransferChecked of SPL Token or Token-2022 with four accounts")
	ErrWrongAsset       = httpx.E(http.StatusPaymentRequired, "payment_wrong_asset", "the transaction pays a token this skill is not priced in")
	ErrAmountMismatch   = httpx.E(http.StatusPaymentRequired, "payment_amount_mismatch", "the transaction does not pay exactly the price")
	ErrExtraInstruction = httpx.E(http.StatusPaymentRequired, "payment_extra_instruction",
		"the transaction carries an instruction the exact scheme does not allow after the transfer (only memo and Lighthouse)")
	ErrBlockhashExpired = httpx.E(http.StatusPaymentRequired, "payment_blockhash_expired",
		"the transaction's recent blockhash has expired: it can no longer land; pay again against a fresh blockhash")
	ErrTxRejected = httpx.E(http.StatusPaymentRequired, "payment_tx_rejected",
		"the network refused the transaction before it landed (it would fail: for example the payer's token account lacks the amount); nothing was paid")
	ErrSettlementPending = httpx.E(http.StatusPaymentRequired, "payment_settlement_pending",
		"the transaction was sent but is not confirmed yet; retry the same request with the same payment shortly")
	ErrFacilitator = httpx.E(http.StatusPaymentRequired, "payment_facilitator_error",
		"the x402 facilitator could not be asked; retry shortly")
)
