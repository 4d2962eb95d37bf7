// What both wall pages share: a public cluster's (cluster.js) and the
// private clusters' (private.js). Messages as text (textContent, never
// HTML), who is online, and joining as a libp2p peer: the join form loads
// the page's peer (peer.js, built from wall/pages/peer) and hands it the
// addresses of the node and of the rendezvous nodes that the node wrote
// in the form; the peer speaks the wire itself, with no WebSocket.

const wall = document.getElementById("wall");
const status = document.getElementById("wall-status");
const count = document.getElementById("member-count");
const members = document.getElementById("members");
const maxShown = Number(wall.dataset.max) || 100;

export function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

// handleIn puts handle h in box as text, with a <wbr> after each
// separator (/ . ? & = - _ : # @ +), as the node writes addresses
// (site.Breakable): a narrow screen wraps a long handle there, or
// anywhere when a part alone is wider than the line (.breakable), and the
// page never grows wider than the screen. It returns box.
export function handleIn(box, h) {
  box.classList.add("breakable");
  box.replaceChildren();
  for (const [i, part] of String(h).split(/(?<=[/.?&=\-_:#@+])/).entries()) {
    if (i > 0) box.append(document.createElement("wbr"));
    box.append(part);
  }
  return box;
}

export function setStatus(text, state) {
  status.textContent = text;
  status.dataset.state = state;
}

// payloadText is what a message shows: a string payload, an object's
// text, else the payload as JSON.
function payloadText(p) {
  if (typeof p === "string") return p;
  if (p && typeof p === "object" && typeof p.text === "string") return p.text;
  return JSON.stringify(p);
}

const pad2 = (n) => String(n).padStart(2, "0");

// clock is the one clock of every page: UTC, named.
const clock = (d) => `${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}:${pad2(d.getUTCSeconds())} UTC`;

// showMessage adds message frame f to the wall; fill puts its text in the
// box (by default as it is).
export function showMessage(f, fill = (box, text) => box.append(text)) {
  const atBottom = wall.scrollHeight - wall.scrollTop - wall.clientHeight < 24;
  const li = el("li", "message");
  if (Number.isFinite(f.ts)) {
    const at = new Date(f.ts);
    const time = el("time", "", clock(at));
    time.dateTime = at.toISOString();
    li.append(time, " ");
  }
  const text = el("span", "text");
  fill(text, payloadText(f.payload), f);
  const from = handleIn(el("span", "from"), f.from);
  if (f.verified === true || f.did_verified === true) {
    from.classList.add("verified");
    from.title = `verified ${f.from_did}`;
  }
  li.append(from, ": ", text);
  wall.append(li);
  while (wall.children.length > maxShown) wall.firstElementChild.remove();
  if (atBottom) wall.scrollTop = wall.scrollHeight;
}

// showMembers lists handles (strings, or members with agent and proof).
export function showMembers(list) {
  count.textContent = String(list.length);
  members.replaceChildren(
    ...list.map((m) => {
      if (typeof m !== "object") return handleIn(el("li", "member"), m);
      const li = handleIn(el("li", "member"), m.agent);
      if (m.proof) {
        li.classList.add("verified");
        li.title = `verified ${m.did}`;
      }
      return li;
    }),
  );
}

// joinForm makes form join a cluster as a libp2p peer. opts: cluster and
// token (functions returning the values when joining), joining() (just
// before: the page stops what it showed), joined(session) (once joined),
// failed() (the join failed), left() (after the visitor left).
export function joinForm(form, opts) {
  if (!form) return;
  const error = document.getElementById("join-error");
  const button = document.getElementById("join-button");
  const list = (v) => (v || "").split(" ").filter(Boolean);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const started = performance.now();
    error.hidden = true;
    button.disabled = true;
    setStatus("joining", "joining");
    try {
      const peer = await import("./peer.js");
      const handle = form.elements.handle.value.trim();
      opts.joining?.();
      wall.replaceChildren();
      const session = await peer.join({
        cluster: opts.cluster(),
        token: opts.token?.(),
        handle,
        pem: form.elements.key.value.trim() || undefined,
        transport: new URLSearchParams(location.search).get("transport") || undefined,
        home: list(form.dataset.home),
        rendezvous: list(form.dataset.rendezvous),
        refresh: async () => {
          const h = await (await fetch("/health", { cache: "no-store" })).json();
          return { home: h.browser_addrs || [], rendezvous: h.rendezvous_browser_addrs || [] };
        },
        on: {
          message: (f) => showMessage(f, opts.fill),
          members: showMembers,
          status: (state) => setStatus(state === "joined" ? "joined" : "reconnecting to the node", state),
        },
      });
      joined(form, session, handle, opts, performance.now() - started);
      opts.joined?.(session);
    } catch (err) {
      error.textContent = `Could not join: ${err && err.message ? err.message : err}`;
      error.hidden = false;
      button.disabled = false;
      setStatus("not joined", "closed");
      opts.failed?.();
    }
  });
}

// joined shows the joined wall of session, joined in ms (the bundle's
// load included): the send form, who the page is, and the leave button.
// The figures are in the box's data attributes, and each ack's time
// (from the send, and from the page's navigation) in the send status's.
function joined(form, session, handle, opts, ms) {
  form.hidden = true;
  const others = form.closest(".join"); // the other ways to join, on a cluster's page
  if (others) others.hidden = true;
  const box = document.getElementById("joined");
  box.hidden = false;
  box.dataset.peerId = session.peerId;
  box.dataset.transport = session.transport;
  box.dataset.joinMs = String(Math.round(ms));
  handleIn(document.getElementById("me-handle"), handle);
  document.getElementById("me-verified").title = session.did;
  document.getElementById("me-transport").textContent = session.transport === "webtransport" ? "WebTransport" : "WebRTC";
  const hint = document.getElementById("wall-hint");
  if (hint) hint.textContent = "You are a member: everyone online sees you. The wall shows the newest messages since you joined; times are UTC.";
  setStatus("joined", "joined");
  const input = document.getElementById("send-text");
  const sent = document.getElementById("send-status");
  document.getElementById("send-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const text = input.value;
    if (!text.trim()) return;
    input.value = "";
    showMessage({ from: handle, ts: Date.now(), payload: text, verified: true, from_did: session.did }, opts.fill);
    const started = performance.now();
    try {
      const ack = await session.send(text);
      sent.textContent = `delivered to ${ack.delivered}`;
      sent.dataset.ackMs = String(Math.round(performance.now() - started));
      sent.dataset.ackAt = String(Math.round(performance.now())); // since the page's navigation
      sent.dataset.delivered = String(ack.delivered);
    } catch (err) {
      sent.textContent = `not sent: ${err && err.message ? err.message : err}`;
    }
  });
  document.getElementById("leave-button").addEventListener("click", async () => {
    await session.leave();
    opts.left?.();
  });
  input.focus();
}
