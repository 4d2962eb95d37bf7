// The A2A project's JavaScript client against a mesh agent, driven by
// interop's TestA2AJSClientsV1AndV03, in either version: @a2a-js/sdk 1.3.0
// (A2A 1.0, its default ClientFactory) or 0.3.13 (A2A 0.3, installed as
// a2a-v03). It prints one JSON line per step on stdout and reads the
// payment's transaction signature on stdin.
//
//   node client.mjs <1.0|0.3> <agent base URL>
import { createInterface } from "node:readline";
import { randomUUID } from "node:crypto";

const v1 = process.argv[2] === "1.0";
const base = process.argv[3];
const { ClientFactory, ServiceParameters, withA2AExtensions } = await import(v1 ? "@a2a-js/sdk/client" : "a2a-v03/client");
const core = v1 ? await import("@a2a-js/sdk") : null;
const X402 = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2";

// The answers' headers, to see which extensions the agent activated; the
// client itself fetches with the global fetch.
let answered = new Headers();
const fetch0 = globalThis.fetch;
globalThis.fetch = async (...args) => {
  const r = await fetch0(...args);
  answered = r.headers;
  return r;
};

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (step, v) => console.log(JSON.stringify({ step, ...v }));

// What differs between the versions' shapes.
const part = (kind, value) => (v1 ? { content: { $case: kind, value } } : { kind, [kind]: value });
const partValue = (p) => (v1 ? p.content?.value : p[p.kind]);
const message = (parts, extra = {}) => ({
  message: { ...(v1 ? { role: core.Role.ROLE_USER } : { kind: "message", role: "user" }), messageId: randomUUID(), parts, ...extra },
});
const state = (t) =>
  v1 ? core.taskStateToJSON(t.status.state).replace("TASK_STATE_", "").toLowerCase().replaceAll("_", "-") : t.status.state;

const call = (skill, input) => [part("data", { skill, input })];
const meta = (t) => t.status?.message?.metadata ?? {};
const x402 = (t) => Object.fromEntries(Object.entries(meta(t)).filter(([k]) => k.startsWith("x402.")));
const view = (t) => ({
  task: t.id, state: state(t), x402: x402(t), http: meta(t)["mesh.http"],
  artifact: t.artifacts?.[0]?.parts?.[0] ? partValue(t.artifacts[0].parts[0]) : null,
  raw: v1 ? core.Task.toJSON(t) : t,
});
const failure = async (step, f) => {
  try {
    await f();
    say(step, { error: null });
  } catch (e) {
    say(step, { error: String(e.message ?? e), code: e.envelopeCode ?? null });
  }
};
const withX402 = { serviceParameters: ServiceParameters.create(withA2AExtensions(X402)) };

// The card by the default path (/.well-known/agent-card.json), and a client
// for the interface it prefers.
const client = await new ClientFactory().createFromUrl(base);
const card = await client.getAgentCard();
say("card", {
  name: card.name, protocolVersion: v1 ? client.protocolVersion : card.protocolVersion,
  interfaces: v1 ? card.supportedInterfaces : card.additionalInterfaces,
});

const free = await client.sendMessage(message(call("ping", {})));
say("free", view(free));
say("get", view(await client.getTask({ id: free.id })));
await failure("unknown", () => client.sendMessage(message(call("nope", {}))));

// A paid skill's task awaits payment; it can be canceled, once.
const input = { on: `a2a-js-${process.argv[2]}` };
const unpaid = await client.sendMessage(message(call("echo", input)));
say("required", view(unpaid));
say("cancel", view(await client.cancelTask({ id: unpaid.id })));
await failure("cancel-again", () => client.cancelTask({ id: unpaid.id }));

// Paid: the test pays the requirements on chain and hands over the
// signature; the client submits it on the task, activating the extension.
const toPay = await client.sendMessage(message(call("echo", input)), withX402);
const offer = x402(toPay)["x402.payment.required"].accepts[0];
say("to-pay", { ...view(toPay), activated: answered.get(v1 ? "A2A-Extensions" : "X-A2A-Extensions") });
const { value: signature } = await lines.next();
const proof = {
  "x402.payment.status": "payment-submitted",
  "x402.payment.payload": { x402Version: 1, scheme: offer.scheme, network: offer.network, payload: { signature, nonce: offer.extra.nonce } },
};
const paid = await client.sendMessage(message([part("text", "paid")], { taskId: toPay.id, metadata: proof }), withX402);
say("paid", { ...view(paid), activated: answered.get(v1 ? "A2A-Extensions" : "X-A2A-Extensions") });
say("get-paid", view(await client.getTask({ id: toPay.id })));

// x402's stock payload shape ({transaction}) is taken; this one pays
// nothing, so the payment fails and fresh requirements follow. Then the
// client rejects paying.
const stockTask = await client.sendMessage(message(call("echo", input)));
const stock = {
  "x402.payment.status": "payment-submitted",
  "x402.payment.payload": { x402Version: 1, scheme: "exact", network: offer.network, payload: { transaction: Buffer.from("not a transaction").toString("base64") } },
};
say("stock-payload", { payload: stock["x402.payment.payload"] });
say("stock", view(await client.sendMessage(message([part("text", "paid")], { taskId: stockTask.id, metadata: stock }))));
const rejected = await client.sendMessage(message([part("text", "no")], { taskId: stockTask.id, metadata: { "x402.payment.status": "payment-rejected" } }));
say("rejected", view(rejected));
process.exit(0);
