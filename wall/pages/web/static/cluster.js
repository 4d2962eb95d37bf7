// The live wall of a public cluster's page. Until the visitor joins, it
// connects with spectate=1: a read-only ghost, neither announced nor
// counted, whose frames the node refuses; this script never sends one.
// A visitor who joins leaves that socket for the page's own libp2p peer
// (wallui.js). Everything a frame carries is put
// in the page as text (textContent), never as HTML. After any close but
// the cluster's deletion (a node restarting sends "node shutting down")
// it reconnects, waiting longer each time (1 s doubling to 30 s, with
// jitter), and says so meanwhile. Who is online comes from the public API
// (GET /v1/clusters/{id}: handles masked as on every outside surface). The
// boards are boards.js's: it is handed the board frames.

import { oneAtATime, onBoardFrame, refreshBoards } from "./boards.js";
import { el, joinForm, setStatus, showMembers, showMessage } from "./wallui.js";

const minRetry = 1000; // ms before the first reconnection
const maxRetry = 30000; // ms between reconnections, at most

const page = document.getElementById("cluster");
const clusterID = page.dataset.cluster;
const api = `/v1/clusters/${encodeURIComponent(clusterID)}`;
let spectator = null; // the socket, until the visitor joins
let retry = minRetry;
let ended = false;
let welcomed = false; // a welcome came before: the next is a reconnection
let lastReason = ""; // the reason of the last closed frame

// Members are fetched one request at a time; a change meanwhile asks for
// one more once it ends. Once the visitor joined, the page's peer lists
// them.
const refreshMembers = oneAtATime(async () => {
  const resp = await fetch(api, { headers: { Accept: "application/json" }, cache: "no-store" });
  if (!resp.ok) return;
  if (!ended) showMembers(((await resp.json()).cluster || {}).members || []);
});

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
  message: (f) => showMessage(f, linked),
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
  spectator = ws;
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

// A visitor who joins becomes a peer of the mesh (wallui.js): the
// spectator's socket closes, and the page's peer shows the wall.
joinForm(document.getElementById("join-form"), {
  cluster: () => clusterID,
  fill: linked,
  joining() {
    ended = true;
    spectator?.close();
  },
  left: () => location.reload(),
});
