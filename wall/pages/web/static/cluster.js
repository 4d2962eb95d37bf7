// The live wall of a public cluster's page. It connects with spectate=1:
// a read-only ghost, neither announced nor counted, whose frames the node
// refuses; this script never sends one. Everything a frame carries is put
// in the page as text (textContent), never as HTML. After any close but
// the cluster's deletion (a node restarting sends "node shutting down")
// it reconnects, waiting longer each time (1 s doubling to 30 s, with
// jitter), and says so meanwhile. Who is online comes from the public API
// (GET /v1/clusters/{id}: handles masked as on every outside surface). The
// boards are boards.js's: it is handed the board frames.

import { oneAtATime, onBoardFrame, refreshBoards } from "./boards.js";

const minRetry = 1000; // ms before the first reconnection
const maxRetry = 30000; // ms between reconnections, at most

const page = document.getElementById("cluster");
const wall = document.getElementById("wall");
const status = document.getElementById("wall-status");
const count = document.getElementById("member-count");
const members = document.getElementById("members");
const clusterID = page.dataset.cluster;
const api = `/v1/clusters/${encodeURIComponent(clusterID)}`;
const maxShown = Number(wall.dataset.max) || 100;
let retry = minRetry;
let ended = false;
let welcomed = false; // a welcome came before: the next is a reconnection
let lastReason = ""; // the reason of the last closed frame

function setStatus(text, state) {
  status.textContent = text;
  status.dataset.state = state;
}

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

// Members are fetched one request at a time; a change meanwhile asks for
// one more once it ends.
const refreshMembers = oneAtATime(async () => {
  const resp = await fetch(api, { headers: { Accept: "application/json" }, cache: "no-store" });
  if (!resp.ok) return;
  const list = ((await resp.json()).cluster || {}).members || [];
  count.textContent = String(list.length);
  members.replaceChildren(...list.map((h) => el("li", "member", String(h))));
});

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

// linked puts text in box, the board (#slug) and the post (p_<id>) the
// node resolved in it as links to them on this page.
function linked(box, text, f) {
  const refs = [];
  if (typeof f.board === "string" && f.board && document.getElementById("board-" + f.board)) {
    refs.push(["#" + f.board, "#board-" + f.board]);
  }
  if (typeof f.ref === "string" && f.ref && document.getElementById("post-" + f.ref)) refs.push([f.ref, "#post-" + f.ref]);
  let rest = text;
  for (;;) {
    let next = null;
    for (const [word, href] of refs) {
      const at = rest.indexOf(word);
      if (at >= 0 && (next === null || at < next.at)) next = { at, word, href };
    }
    if (next === null) break;
    const a = el("a", "ref", next.word);
    a.href = next.href;
    box.append(rest.slice(0, next.at), a);
    rest = rest.slice(next.at + next.word.length);
  }
  box.append(rest);
}

function showMessage(f) {
  const atBottom = wall.scrollHeight - wall.scrollTop - wall.clientHeight < 24;
  const li = el("li", "message");
  if (Number.isFinite(f.ts)) {
    const at = new Date(f.ts);
    const time = el("time", "", clock(at));
    time.dateTime = at.toISOString();
    li.append(time, " ");
  }
  const text = el("span", "text");
  linked(text, payloadText(f.payload), f);
  li.append(el("span", "from", String(f.from)), ": ", text);
  wall.append(li);
  while (wall.children.length > maxShown) wall.firstElementChild.remove();
  if (atBottom) wall.scrollTop = wall.scrollHeight;
}

// handlers act on the frames by kind; a kind not here is ignored.
const handlers = {
  welcome() {
    retry = minRetry;
    lastReason = "";
    setStatus("live", "live");
    refreshMembers();
    if (welcomed) refreshBoards(); // board frames may have been missed meanwhile
    welcomed = true;
  },
  presence: refreshMembers,
  message: showMessage,
  board: onBoardFrame,
  closed(f) {
    lastReason = String(f.reason);
    if (lastReason === "cluster deleted") {
      ended = true;
      setStatus("closed: the cluster was deleted", "closed");
    }
  },
};

// gone reports whether the cluster no longer exists (its lookup is 404);
// an unreachable node is not that.
async function gone() {
  try {
    return (await fetch(api, { headers: { Accept: "application/json" }, cache: "no-store" })).status === 404;
  } catch {
    return false;
  }
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${location.host}${api}/ws?spectate=1`);
  let live = false;
  ws.onmessage = (ev) => {
    let f;
    try {
      f = JSON.parse(ev.data);
    } catch {
      return;
    }
    if (f && f.kind === "welcome") live = true;
    const handle = f && handlers[f.kind];
    if (handle) handle(f);
  };
  ws.onclose = async () => {
    if (ended) return;
    if (!live && (await gone())) {
      ended = true;
      setStatus("closed: the cluster no longer exists", "closed");
      return;
    }
    const wait = Math.round(retry * (0.75 + Math.random() / 2));
    const why = lastReason ? `disconnected (${lastReason})` : "disconnected";
    setStatus(`${why}: reconnecting in ${Math.max(1, Math.round(wait / 1000))} s`, "down");
    setTimeout(() => {
      setStatus("reconnecting", "connecting");
      connect();
    }, wait);
    retry = Math.min(2 * retry, maxRetry);
  };
}

connect();
