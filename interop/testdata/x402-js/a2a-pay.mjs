// Pays a mesh agent's paid skill through the A2A x402 extension: the A2A
// project's JavaScript client (@a2a-js/sdk 1.3.0, A2A 1.0, its default
// ClientFactory) calls the skill, the task waits in input-required with
// x402.payment.required, the x402 project's exact-scheme client (@x402/svm's
// version 1 client: the extension's types are x402 version 1) builds the
// payment of the requirements in <asset mint>, and the client submits it on
// the task.
//
// Usage: X402_PAYER='[64 key bytes]' node a2a-pay.mjs <agent base URL> <rpc url> <asset mint> <JSON input>
//
// It prints one JSON line: the unpaid task, the payload sent, the paid task
// (state, x402 status, receipts, answer) and the milliseconds from the
// requirements to the answer.
import { randomUUID } from "node:crypto";
import { ClientFactory, ServiceParameters, withA2AExtensions } from "@a2a-js/sdk/client";
import * as a2a from "@a2a-js/sdk";
import { x402Client } from "@x402/core/client";
import { ExactSvmSchemeV1 } from "@x402/svm/v1";
import { toClientSvmSigner } from "@x402/svm";
import { createKeyPairSignerFromBytes } from "@solana/kit";

const [base, rpcUrl, asset, input] = process.argv.slice(2);
const X402 = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2";
const withX402 = { serviceParameters: ServiceParameters.create(withA2AExtensions(X402)) };
const signer = await createKeyPairSignerFromBytes(Uint8Array.from(JSON.parse(process.env.X402_PAYER)));
const payer = new x402Client()
  .registerV1("solana-devnet", new ExactSvmSchemeV1(toClientSvmSigner(signer), { rpcUrl }))
  .registerPolicy((_, reqs) => reqs.filter((r) => r.asset === asset));

const client = await new ClientFactory().createFromUrl(base);
const message = (parts, extra = {}) => ({ message: { role: a2a.Role.ROLE_USER, messageId: randomUUID(), parts, ...extra } });
const meta = (t) => t.status?.message?.metadata ?? {};
const view = (t) => ({
  state: a2a.taskStateToJSON(t.status.state), status: meta(t)["x402.payment.status"] ?? null,
  error: meta(t)["x402.payment.error"] ?? null, receipts: meta(t)["x402.payment.receipts"] ?? null,
  answer: t.artifacts?.[0]?.parts?.[0]?.content?.value ?? null,
});

const unpaid = await client.sendMessage(message([{ content: { $case: "data", value: { skill: "echo", input: JSON.parse(input) } } }]), withX402);
const required = meta(unpaid)["x402.payment.required"];
const at402 = performance.now();
const payload = await payer.createPaymentPayload(required);
const paid = await client.sendMessage(message([{ content: { $case: "text", value: "paid" } }], {
  taskId: unpaid.id, metadata: { "x402.payment.status": "payment-submitted", "x402.payment.payload": payload },
}), withX402);
const answered = performance.now();
console.log(JSON.stringify({
  required: { ...view(unpaid), accepts: required?.accepts ?? null },
  payload: { x402Version: payload.x402Version, scheme: payload.scheme, network: payload.network },
  paid: view(paid),
  ms402ToAnswer: answered - at402,
}));
