// A Solana JSON-RPC shim over LiteSVM for mesh's tests. It serves the
// methods mesh uses (getGenesisHash, getLatestBlockhash, isBlockhashValid,
// getBlockHeight, getBalance, requestAirdrop, sendTransaction,
// simulateTransaction, getSignatureStatuses, getTransaction in base64
// encoding, getSignaturesForAddress) and those the x402 project's client and
// facilitator use (getAccountInfo in base64 encoding,
// getTokenAccountBalance) with the shapes of Solana's RPC documentation.
// Transactions run in the real Solana runtime, with the SPL Token,
// Token-2022, associated token account and memo programs and the native
// mint (wrapped SOL); every landed transaction counts as finalized, and
// each one expires the blockhash before it (LiteSVM takes the latest only).
//
// One method is the shim's own, for test setup: test_createMint [mint
// address, decimals, mint authority address] writes an initialized SPL
// Token mint at any address (the test's USDC sits at devnet USDC's).
//
// Usage: node server.mjs   -> prints "ready <port> <genesis hash>" and serves
// on 127.0.0.1 until stdin closes or the process is killed.
import http from "node:http";
import { LiteSVM, FailedTransactionMetadata } from "litesvm";
import {
  address, lamports, getTransactionDecoder, getCompiledTransactionMessageDecoder,
  getBase58Decoder, getBase58Encoder, getBase64Encoder, getBase64Decoder,
} from "@solana/kit";

const svm = new LiteSVM().withNativeMints();
const b58 = getBase58Decoder(); // bytes -> base58 string
const b58enc = getBase58Encoder(); // base58 string -> bytes
const genesis = svm.latestBlockhash();
let slot = 1n;
const txs = new Map(); // signature -> record
const order = []; // signatures in landing order

const json = (v) => JSON.stringify(v, (_, x) => (typeof x === "bigint" ? Number(x) : x));
const ctx = (value) => ({ context: { apiVersion: "2.2.0", slot: Number(slot) }, value });
const rpcError = (code, message) => ({ code, message });

// Addresses a v0 message loads from lookup tables: table account data is a
// 56-byte header followed by 32-byte addresses.
function loadedAddresses(msg) {
  const writable = [], readonly = [];
  for (const l of msg.addressTableLookups ?? []) {
    const acct = svm.getAccount(l.lookupTableAddress);
    if (!acct.exists) throw new Error(`lookup table ${l.lookupTableAddress} not found`);
    const at = (i) => b58.decode(acct.data.slice(56 + 32 * i, 56 + 32 * (i + 1)));
    for (const i of l.writableIndexes ?? []) writable.push(at(i));
    for (const i of l.readonlyIndexes ?? []) readonly.push(at(i));
  }
  return { writable, readonly };
}

function errOf(result) {
  if (!(result instanceof FailedTransactionMetadata)) return null;
  return { LiteSVMError: result.err().toString() };
}

function send(b64, opts) {
  const wire = Buffer.from(b64, "base64");
  const tx = getTransactionDecoder().decode(wire);
  const msg = getCompiledTransactionMessageDecoder().decode(tx.messageBytes);
  const loaded = loadedAddresses(msg);
  const keys = [...msg.staticAccounts, ...loaded.writable, ...loaded.readonly];
  if (!opts?.skipPreflight) { // preflight: a transaction that would fail is refused, and costs nothing
    const sim = svm.simulateTransaction(tx);
    if (sim instanceof FailedTransactionMetadata) {
      throw Object.assign(new Error(`Transaction simulation failed: ${sim.err().toString()}`), { code: -32002 });
    }
  }
  const pre = keys.map((k) => svm.getBalance(address(k)) ?? 0n);
  const result = svm.sendTransaction(tx);
  const err = errOf(result);
  const meta = err ? result.meta() : result;
  const signature = b58.decode(meta.signature());
  const post = keys.map((k) => svm.getBalance(address(k)) ?? 0n);
  const inner = [];
  meta.innerInstructions().forEach((list, index) => {
    if (list.length === 0) return;
    inner.push({
      index,
      instructions: list.map((ii) => {
        const ci = ii.instruction();
        return { programIdIndex: ci.programIdIndex(), accounts: Array.from(ci.accounts()), data: b58.decode(ci.data()), stackHeight: ii.stackHeight() };
      }),
    });
  });
  slot += 1n;
  svm.warpToSlot(slot);
  svm.expireBlockhash();
  txs.set(signature, {
    slot: Number(slot), blockTime: Math.floor(Date.now() / 1000), raw: b64, version: msg.version === "legacy" ? "legacy" : msg.version,
    err, keys,
    meta: {
      err, status: err ? { Err: err } : { Ok: null }, fee: 5000 * Object.keys(tx.signatures).length,
      preBalances: pre, postBalances: post, innerInstructions: inner, logMessages: meta.logs(),
      preTokenBalances: [], postTokenBalances: [], rewards: [], loadedAddresses: loaded,
      computeUnitsConsumed: meta.computeUnitsConsumed(),
    },
  });
  order.push(signature);
  return signature;
}

const TOKEN_PROGRAM = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
const b64dec = getBase64Decoder(); // bytes -> base64 string

// simulate runs a transaction without landing it; sigVerify false (what
// x402's facilitator asks) simulates one its fee payer has not signed yet.
function simulate(b64, opts) {
  const tx = getTransactionDecoder().decode(Buffer.from(b64, "base64"));
  svm.withSigverify(opts?.sigVerify === true);
  let result;
  try { result = svm.simulateTransaction(tx); } finally { svm.withSigverify(true); }
  const failed = result instanceof FailedTransactionMetadata;
  const meta = result.meta();
  return ctx({
    err: failed ? { LiteSVMError: result.err().toString() } : null, logs: meta.logs(), accounts: null,
    unitsConsumed: Number(meta.computeUnitsConsumed()), returnData: null, innerInstructions: opts?.innerInstructions ? [] : null,
  });
}

function accountInfo(addr, opts) {
  if (opts?.encoding && opts.encoding !== "base64") throw Object.assign(new Error("this shim answers base64 only"), { code: -32602 });
  const a = svm.getAccount(address(addr));
  if (!a.exists) return ctx(null);
  return ctx({ data: [b64dec.decode(a.data), "base64"], executable: a.executable, lamports: Number(a.lamports),
    owner: a.programAddress, rentEpoch: 0, space: a.data.length });
}

// tokenBalance reads an SPL token account (amount at 64) and its mint's
// decimals (at 44 of the mint).
function tokenBalance(addr) {
  const a = svm.getAccount(address(addr));
  if (!a.exists || a.data.length < 72) throw Object.assign(new Error(`${addr} is not a token account`), { code: -32602 });
  const data = Buffer.from(a.data);
  const mint = svm.getAccount(address(b58.decode(data.subarray(0, 32))));
  const decimals = mint.exists ? mint.data[44] : 0;
  const amount = data.readBigUInt64LE(64);
  return ctx({ amount: amount.toString(), decimals, uiAmount: Number(amount) / 10 ** decimals, uiAmountString: String(Number(amount) / 10 ** decimals) });
}

// createMint writes an initialized mint: COption<authority>, supply,
// decimals, initialized, no freeze authority (82 bytes).
function createMint([mint, decimals, authority]) {
  const data = Buffer.alloc(82);
  data.writeUInt32LE(1, 0);
  Buffer.from(b58enc.encode(authority)).copy(data, 4);
  data[44] = decimals;
  data[45] = 1;
  svm.setAccount({ address: address(mint), data: new Uint8Array(data), executable: false,
    lamports: lamports(svm.minimumBalanceForRentExemption(82n)), programAddress: address(TOKEN_PROGRAM), space: 82n });
  return null;
}

const methods = {
  getGenesisHash: () => genesis,
  getHealth: () => "ok",
  getSlot: () => Number(slot),
  getBlockHeight: () => Number(slot), // one block per slot here
  getLatestBlockhash: () => ctx({ blockhash: svm.latestBlockhash(), lastValidBlockHeight: Number(slot) + 150 }),
  isBlockhashValid: ([hash]) => ctx(hash === svm.latestBlockhash()),
  getBalance: ([addr]) => ctx(svm.getBalance(address(addr)) ?? 0n),
  getAccountInfo: ([addr, opts]) => accountInfo(addr, opts),
  getTokenAccountBalance: ([addr]) => tokenBalance(addr),
  simulateTransaction: ([b64, opts]) => simulate(b64, opts),
  test_createMint: (params) => createMint(params),
  requestAirdrop: ([addr, amount]) => {
    const r = svm.airdrop(address(addr), lamports(BigInt(amount)));
    if (!r || r instanceof FailedTransactionMetadata) throw Object.assign(new Error("airdrop failed"), { code: -32603 });
    return b58.decode(r.signature());
  },
  sendTransaction: ([b64, opts]) => {
    if (opts?.encoding && opts.encoding !== "base64") throw Object.assign(new Error("only base64 is supported"), { code: -32602 });
    return send(b64, opts);
  },
  getSignatureStatuses: ([sigs]) => ctx(sigs.map((s) => {
    const t = txs.get(s);
    return t ? { slot: t.slot, confirmations: null, err: t.err, status: t.meta.status, confirmationStatus: "finalized" } : null;
  })),
  getTransaction: ([sig, opts]) => {
    const t = txs.get(sig);
    if (!t) return null;
    if (opts?.encoding && opts.encoding !== "base64") throw Object.assign(new Error("this shim answers base64 only"), { code: -32602 });
    if (t.version !== "legacy" && opts?.maxSupportedTransactionVersion === undefined) {
      throw Object.assign(new Error("Transaction version (0) is not supported by the requesting client."), { code: -32015 });
    }
    return { slot: t.slot, blockTime: t.blockTime, transaction: [t.raw, "base64"], meta: t.meta, version: t.version };
  },
  getSignaturesForAddress: ([addr, opts = {}]) => {
    const limit = Math.min(opts.limit ?? 1000, 1000);
    const out = [];
    let started = !opts.before;
    for (let i = order.length - 1; i >= 0; i--) {
      const s = order[i];
      if (!started) { started = s === opts.before; continue; }
      if (s === opts.until || out.length === limit) break;
      const t = txs.get(s);
      if (!t.keys.includes(addr) && !t.meta.loadedAddresses.writable.includes(addr) && !t.meta.loadedAddresses.readonly.includes(addr)) continue;
      out.push({ signature: s, slot: t.slot, err: t.err, memo: null, blockTime: t.blockTime, confirmationStatus: "finalized" });
    }
    return out;
  },
};

const server = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => { body += c; });
  req.on("end", () => {
    let id = null, out;
    try {
      const q = JSON.parse(body);
      id = q.id ?? null;
      const fn = methods[q.method];
      out = fn ? { jsonrpc: "2.0", id, result: fn(q.params ?? []) } : { jsonrpc: "2.0", id, error: rpcError(-32601, "Method not found") };
    } catch (e) {
      out = { jsonrpc: "2.0", id, error: rpcError(e.code ?? -32603, String(e.message ?? e)) };
    }
    res.setHeader("Content-Type", "application/json");
    res.end(json(out));
  });
});

server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`ready ${server.address().port} ${genesis}\n`);
});
// The test owns this process: when it closes our stdin, stop.
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
