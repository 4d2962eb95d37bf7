// The A2A project's JavaScript client (@a2a-js/sdk, A2A 0.3) against a mesh
// agent, driven by interop's TestA2AJSClient: it prints one JSON line per
// step on stdout and reads the payment's transaction signature on stdin.
//
//   node client.mjs <agent base URL>
import { createInterface } from "node:readline";
import { randomUUID } from "node:crypto";
import { ClientFactory } from "@a2a-js/sdk/client";

const base = process.argv[2];
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (step, v) => console.log(JSON.stringify({ step, ...v }));
const message = (parts, extra = {}) => ({
  message: { kind: "message", messageId: randomUUID(), role: "user", parts, ...extra },
});
const call = (skill, input) => [{ kind: "data", data: { skill, input } }];
const meta = (task) => task.status?.message?.metadata ?? {};
const artifact = (task) => task.artifacts?.[0]?.parts?.[0] ?? null;

// The card by the default path (/.well-known/agent-card.json), and a client
// for the transport it declares.
const client = await new ClientFactory().createFromUrl(base);
const card = await client.getAgentCard();
say("card", { name: card.name, protocolVersion: card.protocolVersion, url: card.url });

const free = await client.sendMessage(message(call("ping", {})));
say("free", { kind: free.kind, state: free.status.state, artifact: artifact(free) });

try {
  await client.sendMessage(message(call("nope", {})));
  say("unknown", { error: null });
} catch (e) {
  say("unknown", { error: String(e.message ?? e) });
}

const input = { on: "a2a-js" };
const unpaid = await client.sendMessage(message(call("echo", input)));
const required = meta(unpaid)["x402.payment.required"];
say("required", { task: unpaid.id, state: unpaid.status.state, status: meta(unpaid)["x402.payment.status"], accepts: required?.accepts });

const offer = required.accepts[0];
const { value: signature } = await lines.next();
const submission = {
  "x402.payment.status": "payment-submitted",
  "x402.payment.payload": {
    x402Version: required.x402Version, scheme: offer.scheme, network: offer.network,
    payload: { signature, nonce: offer.nonce },
  },
};
const paid = await client.sendMessage(message([{ kind: "text", text: "paid" }], { taskId: unpaid.id, metadata: submission }));
say("paid", { task: paid.id, state: paid.status.state, status: meta(paid)["x402.payment.status"],
  receipts: meta(paid)["x402.payment.receipts"], artifact: artifact(paid) });

const got = await client.getTask({ id: unpaid.id });
say("get", { state: got.status.state, artifact: artifact(got) });

// The same submission again, with the call: served from the paid answer.
const replay = await client.sendMessage(message(call("echo", input), { metadata: submission }));
say("replay", { state: replay.status.state, http: meta(replay)["mesh.http"], artifact: artifact(replay) });
process.exit(0);
