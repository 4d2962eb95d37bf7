import { readFileSync } from "node:fs";
import { wrapFetchWithPayment, x402Client } from "@x402/fetch"; // 2.27, with @x402/svm
import { ExactSvmScheme } from "@x402/svm/exact/client";
import { toClientSvmSigner } from "@x402/svm";
import { createKeyPairSignerFromBytes } from "@solana/kit";

const keypairBytes = Uint8Array.from(JSON.parse(readFileSync("/tmp/pr/payer.json", "utf8")));
const signer = await createKeyPairSignerFromBytes(keypairBytes); // a wallet holding devnet USDC
const client = new x402Client().register("solana:*", new ExactSvmScheme(toClientSvmSigner(signer), { rpcUrl: process.argv[2] }));
const res = await wrapFetchWithPayment(fetch, client)("http://127.0.0.1:18080/v1/echo",
  { method: "POST", headers: { "Content-Type": "application/json" }, body: '{"text":"hi"}' });
console.log(res.status, await res.text(), res.headers.get("PAYMENT-RESPONSE"));
