// Pays a mesh agent's paid skill through the A2A x402 extension: the A2A
// project's JavaScript client (@a2a-js/sdk 1.3.0, A2A 1.0, its default
// ClientFactory) calls the skill, the task waits in input-required with
// x402.payment.required, the x402 project's exact-scheme client (@x402/svm)
// builds a payment of the requirements in <asset mint>, and the client
// submits it on the task. Three tasks:
//
//   - paid: the stock flow, @x402/svm's version 1 client (the extension's
//     types are x402 version 1) pays the requirements;
//   - retried: a payment of the wrong amount (the requirements' amount
//     bent to 1) is refused: payment-failed with a failed receipt and fresh
//     requirements; then an x402 version 2 payload (@x402/svm's exact
//     client, the fresh requirement in version 2's form) pays them;
//   - rejected: the client answers payment-rejected.
//
// Usage: X402_PAYER='[64 key bytes]' node a2a-pay.mjs <agent base URL> <rpc url> <asset mint> <JSON input>
//
// It prints one JSON line: each task's steps (state, x402 status, error,
// receipts, answer, the requirements' accepts), the payloads sent, and the
// milliseconds from the requirements to the answer of the stock flow.
import { randomUUID } from "node:crypto";
import { ClientFactory, ServiceParameters, withA2AExtensions } from "@a2a-js/sdk/client";
import * as a2a from "@a2a-js/sdk";
import { x402Client } from "@x402/core/client";
import { ExactSvmSchemeV1 } from "@x402/svm/v1";
import { ExactSvmScheme } from "@x402/svm/exact/client";
import { toClientSvmSigner, normalizeNetwork } from "@x402/svm";
import { createKeyPairSignerFromBytes } from "@solana/kit";

const [base, rpcUrl, asset, input] = process.argv.slice(2);
const X402 = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2";
const withX402 = { serviceParameters: ServiceParameters.create(withA2AExtensions(X402)) };
const signer = toClientSvmSigner(await createKeyPairSignerFromBytes(Uint8Array.from(JSON.parse(process.env.X402_PAYER))));
const payer = new x402Client()
  .registerV1("solana-devnet", new ExactSvmSchemeV1(signer, { rpcUrl }))
  .register("solana:*", new ExactSvmScheme(signer, { rpcUrl }))
  .registerPolicy((_, reqs) => reqs.filter((r) => r.asset === asset));

const client = await new ClientFactory().createFromUrl(base);
const meta = (t) => t.status?.message?.metadata ?? {};
const view = (t) => ({
  state: a2a.taskStateToJSON(t.status.state), status: meta(t)["x402.payment.status"] ?? null,
  error: meta(t)["x402.payment.error"] ?? null, receipts: meta(t)["x402.payment.receipts"] ?? null,
  accepts: meta(t)["x402.payment.required"]?.accepts ?? null,
  answer: t.artifacts?.[0]?.parts?.[0]?.content?.value ?? null,
});
const send = (parts, extra = {}) =>
  client.sendMessage({ message: { role: a2a.Role.ROLE_USER, messageId: randomUUID(), parts, ...extra } }, withX402);
const call = (n) => send([{ content: { $case: "data", value: { skill: "echo", input: { ...JSON.parse(input), task: n } } } }]);
const answer = (task, metadata) => send([{ content: { $case: "text", value: "payment" } }], { taskId: task.id, metadata });
const submit = (task, payload) => answer(task, { "x402.payment.status": "payment-submitted", "x402.payment.payload": payload });
const required = (task) => meta(task)["x402.payment.required"];
// The requirements in x402 version 2's form: the same row, its network
// by its CAIP-2 id and its amount as amount.
const asV2 = (req) => ({
  x402Version: 2, error: req.error,
  resource: { url: req.accepts[0].resource, description: req.accepts[0].description, mimeType: req.accepts[0].mimeType },
  accepts: req.accepts.map(({ maxAmountRequired, network, resource, description, mimeType, ...r }) =>
    ({ ...r, network: normalizeNetwork(network), amount: maxAmountRequired })),
});
const payloadView = (p) => ({ x402Version: p.x402Version, scheme: p.scheme ?? p.accepted?.scheme, network: p.network ?? p.accepted?.network });

// The stock flow.
const unpaid = await call("paid");
const at402 = performance.now();
const stockPayload = await payer.createPaymentPayload(required(unpaid));
const paid = await submit(unpaid, stockPayload);
const ms402ToAnswer = performance.now() - at402;

// A refused payment, then a version 2 payment of the fresh requirements.
const toRetry = await call("retried");
const bent = { ...required(toRetry), accepts: required(toRetry).accepts.map((r) => ({ ...r, maxAmountRequired: "1" })) };
const failed = await submit(toRetry, await payer.createPaymentPayload(bent));
const v2Payload = await payer.createPaymentPayload(asV2(required(failed)));
const retried = await submit(toRetry, v2Payload);

// A refusal to pay.
const toReject = await call("rejected");
const rejected = await answer(toReject, { "x402.payment.status": "payment-rejected" });

console.log(JSON.stringify({
  paid: { required: view(unpaid), payload: payloadView(stockPayload), paid: view(paid) },
  retried: { required: view(toRetry), failed: view(failed), payload: payloadView(v2Payload), paid: view(retried) },
  rejected: { required: view(toReject), rejected: view(rejected) },
  ms402ToAnswer,
}));
