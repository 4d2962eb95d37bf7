// The live wall of a public cluster's page. Until the visitor joins, it
// connects with spectate=1: a read-only ghost, neither announced nor
// counted, whose frames the node refuses; this script never sends one.
// A visitor who joins becomes the page's own libp2p peer (wallui.js),
// which hears the wall itself; the page then keeps a socket with
// spectate=events for what only the node tells: the board frames (the
// boards are boards.js's), a rename or a change of visibility
// (cluster_updated), the cluster's deletion. Everything a frame carries
// is put in the page as text (textContent), never as HTML. After any
// close but the cluster's deletion or its turning private (a node
// restarting sends "node shutting down") it reconnects, waiting longer
// each time (1 s doubling to 30 s, with jitter), and says so meanwhile.
// Who is online comes from the public API (GET /v1/clusters/{id}: handles
// masked as on every outside surface), and from the page's peer once
// joined.

import { oneAtATime, onBoardFrame, refreshBoards } from "./boards.js";
import { el, joinForm, setStatus, showMembers, showMessage } from "./wallui.js";

const minRetry = 1000; // ms before the first reconnection
const maxRetry = 30000; // ms between reconnections, at most

const page = document.getElementById("cluster");
const clusterID = page.dataset.cluster;
const api = `/v1/clusters/${encodeURIComponent(clusterID)}`;
let socket = null; // the socket open now
let session = null; // the page's peer, once the visitor joined
let joining = false; // the visitor is joining: the wall is the peer's
let retry = minRetry;
let ended = false;
let welcomed = false; // a welcome came before: the next is a reconnection
let lastReason = ""; // the reason of the last closed frame

// spectating reports whether the page shows the wall of its socket.
const spectating = () => !session && !joining;

// Members are fetched one request at a time; a change meanwhile asks for
// one more once it ends.
const refreshMembers = oneAtATime(async () => {
  const resp = await fetch(api, { headers: { Accept: "application/json" }, cache: "no-store" });
  if (!resp.ok) return;
  const members = ((await resp.json()).cluster || {}).members || [];
  if (!ended && spectating()) showMembers(members);
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

// renamed shows the cluster's new name (its slug when it has none) and
// slug: in the heading, the title, the command to chat and the address.
function renamed(name, slug) {
  const shown = name || slug;
  document.getElementById("cluster-name").textContent = shown;
  document.title = `${shown} · mesh`;
  const chat = document.getElementById("chat-slug");
  if (chat) chat.textContent = slug;
  if (location.pathname === `/clusters/${encodeURIComponent(page.dataset.slug)}`) {
    history.replaceState(history.state, "", `/clusters/${encodeURIComponent(slug)}${location.search}${location.hash}`);
  }
  page.dataset.slug = slug;
}

// end ends the page's live view for good, saying why: the socket closes,
// the page's peer leaves the cluster, and the ways to join go.
function end(why) {
  ended = true;
  setStatus(why, "closed");
  socket?.close();
  hide("join"); // nobody can join it now
  if (session) {
    session.leave();
    hide("joined");
  }
}

// hide hides the element of id; the keyboard's focus, when it was in it
// (the send box, say), goes to the status that says why, not to nowhere.
function hide(id) {
  const box = document.getElementById(id);
  const had = box.contains(document.activeElement);
  box.hidden = true;
  if (!had) return;
  const status = document.getElementById("wall-status");
  status.tabIndex = -1;
  status.focus();
}

// handlers act on the frames by kind; a kind not here is ignored.
const handlers = {
  welcome() {
    retry = minRetry;
    lastReason = "";
    if (spectating()) {
      setStatus("live", "live");
      refreshMembers();
    }
    if (welcomed) refreshBoards(); // board frames may have been missed meanwhile
    welcomed = true;
  },
  presence() {
    if (spectating()) refreshMembers();
  },
  message(f) {
    if (spectating()) showMessage(f, linked);
  },
  board: onBoardFrame,
  cluster_updated(f) {
    if (f.visibility !== "public") end("closed: the cluster was made private; its wall is for its members only now");
    else if (typeof f.slug === "string" && f.slug) renamed(typeof f.name === "string" ? f.name : "", f.slug);
  },
  closed(f) {
    lastReason = String(f.reason);
    if (lastReason === "cluster deleted") end("closed: the cluster was deleted");
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

// status says how the socket is, unless the page's peer does.
function status(text, state) {
  if (!session) setStatus(text, state);
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${location.host}${api}/ws?spectate=${session ? "events" : "1"}`);
  socket = ws;
  let live = false;
  ws.onmessage = (ev) => {
    let f;
    try {
      f = JSON.parse(ev.data);
    } catch {
      return;
    }
    if (ws !== socket) return;
    if (f && f.kind === "welcome") live = true;
    const handle = f && handlers[f.kind];
    if (handle) handle(f);
  };
  ws.onclose = async () => {
    if (ended || ws !== socket) return;
    if (!live && (await gone())) {
      end("closed: the cluster no longer exists");
      return;
    }
    const wait = Math.round(retry * (0.75 + Math.random() / 2));
    const why = lastReason ? `disconnected (${lastReason})` : "disconnected";
    status(`${why}: reconnecting in ${Math.max(1, Math.round(wait / 1000))} s`, "down");
    setTimeout(() => {
      if (ended || ws !== socket) return;
      status("reconnecting", "connecting");
      connect();
    }, wait);
    retry = Math.min(2 * retry, maxRetry);
  };
}

connect();

// A visitor who joins becomes a peer of the mesh (wallui.js): the page
// shows the wall its peer hears, and its socket is one of events alone.
joinForm(document.getElementById("join-form"), {
  cluster: () => clusterID,
  fill: linked,
  joining() {
    joining = true;
  },
  joined(s) {
    session = s;
    joining = false;
    if (ended) {
      s.leave();
      hide("joined");
      return;
    }
    const was = socket;
    connect();
    was?.close();
  },
  failed() {
    joining = false;
    if (ended || socket?.readyState !== WebSocket.OPEN) return;
    setStatus("live", "live"); // the spectator's socket shows the wall again
    refreshMembers();
  },
  left: () => location.reload(),
});
