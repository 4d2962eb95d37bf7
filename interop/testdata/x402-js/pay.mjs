// Pays a mesh agent's paid skill with the x402 project's own client:
// @x402/fetch's wrapFetchWithPayment around fetch, with @x402/svm's exact
// scheme for every Solana network (x402 v2), its RPC at <rpc url>.
//
// Usage: X402_PAYER='[64 key bytes]' node pay.mjs <skill url> <rpc url> <asset mint> <JSON body> [allow]
//
// It POSTs the body, lets the client answer the 402 (only requirements in
// <asset mint> are taken), and prints one JSON line: the final status and
// body, the PAYMENT-REQUIRED the client read, the PAYMENT-RESPONSE it got
// (decoded by @x402/fetch), X-Payment-Proof, X-Mesh-Receipt, and the
// milliseconds from the 402 to the answer.
import { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } from "@x402/fetch";
import { decodePaymentRequiredHeader } from "@x402/core/http";
import { ExactSvmScheme } from "@x402/svm/exact/client";
import { toClientSvmSigner } from "@x402/svm";
import { createKeyPairSignerFromBytes } from "@solana/kit";

const [url, rpcUrl, asset, body, allow] = process.argv.slice(2);
const signer = await createKeyPairSignerFromBytes(Uint8Array.from(JSON.parse(process.env.X402_PAYER)));
const client = new x402Client()
  .register("solana:*", new ExactSvmScheme(toClientSvmSigner(signer), { rpcUrl }))
  .registerPolicy((_, reqs) => reqs.filter((r) => r.asset === asset));
// The client's spend controls take only its default assets (USDC and other
// stablecoins) unless told: "allow" admits <asset mint>, up to 0.001 of a
// 9-decimal token.
if (allow === "allow") {
  client.setSpendControls({ allowedAssets: [{ network: "solana:*", asset, maxAmountPerPayment: "1000000" }] });
}

let at402, paymentRequired;
const timed = async (input, init) => {
  const res = await fetch(input, init);
  if (res.status === 402 && at402 === undefined) {
    at402 = performance.now();
    paymentRequired = decodePaymentRequiredHeader(res.headers.get("PAYMENT-REQUIRED"));
  }
  return res;
};
const res = await wrapFetchWithPayment(timed, client)(url, {
  method: "POST", headers: { "Content-Type": "application/json" }, body,
});
const text = await res.text();
const answered = performance.now();
const settle = res.headers.get("PAYMENT-RESPONSE");
process.stdout.write(JSON.stringify({
  status: res.status,
  body: JSON.parse(text),
  paymentRequired,
  paymentResponse: settle ? decodePaymentResponseHeader(settle) : null,
  proof: res.headers.get("X-Payment-Proof"),
  receipt: res.headers.get("X-Mesh-Receipt"),
  ms402ToAnswer: answered - at402,
}) + "\n");
