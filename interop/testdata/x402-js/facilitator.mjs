// The x402 project's own facilitator for mesh's tests: @x402/core's
// x402Facilitator with @x402/svm's exact scheme on Solana devnet's CAIP-2
// id, its RPC at <rpc url>, served over x402's facilitator HTTP API
// (GET /supported, POST /verify, POST /settle) on 127.0.0.1.
//
// Usage: X402_FEE_PAYER='[64 key bytes]' node facilitator.mjs <rpc url>
//   -> prints "ready <port>" and serves until stdin closes.
import http from "node:http";
import { x402Facilitator } from "@x402/core/facilitator";
import { registerExactSvmScheme } from "@x402/svm/exact/facilitator";
import { toFacilitatorSvmSigner } from "@x402/svm";
import { createKeyPairSignerFromBytes } from "@solana/kit";

const [rpcUrl] = process.argv.slice(2);
const key = await createKeyPairSignerFromBytes(Uint8Array.from(JSON.parse(process.env.X402_FEE_PAYER)));
const facilitator = new x402Facilitator();
registerExactSvmScheme(facilitator, {
  signer: toFacilitatorSvmSigner(key, { defaultRpcUrl: rpcUrl }),
  networks: "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
});

const json = (v) => JSON.stringify(v, (_, x) => (typeof x === "bigint" ? x.toString() : x));
const routes = {
  "GET /supported": () => facilitator.getSupported(),
  "POST /verify": (b) => facilitator.verify(b.paymentPayload, b.paymentRequirements),
  "POST /settle": (b) => facilitator.settle(b.paymentPayload, b.paymentRequirements),
};

const server = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => { body += c; });
  req.on("end", async () => {
    const route = routes[`${req.method} ${req.url}`];
    res.setHeader("Content-Type", "application/json");
    if (!route) {
      res.statusCode = 404;
      res.end(json({ error: "not found" }));
      return;
    }
    try {
      res.end(json(await route(body ? JSON.parse(body) : {})));
    } catch (e) {
      res.statusCode = 500;
      res.end(json({ error: String(e?.message ?? e) }));
    }
  });
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`ready ${server.address().port}\n`);
});
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
