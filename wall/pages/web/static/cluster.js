// The live wall of a public cluster's page. It connects with spectate=1:
// a read-only ghost, neither announced nor counted, whose frames the node
// refuses; this script never sends one. Everything a frame carries is put
// in the page as text (textContent), never as HTML. The boards, when the
// page has them, are boards.js's: it is handed the board frames.

import { onBoardFrame, refreshBoards } from "./boards.js";

const maxShown = 200; // messages kept on the page, oldest dropped first
const maxRetry = 30000; // ms between reconnections, at most

const page = document.getElementById("cluster");
const wall = document.getElementById("wall");
const status = document.getElementById("wall-status");
const count = document.getElementById("member-count");
const online = new Set();
let retry = 1000;
let ended = false;
let welcomed = false; // a welcome came before: the next is a reconnection

function setStatus(text, state) {
  status.textContent = text;
  status.dataset.state = state;
}

function showCount() {
  count.textContent = String(online.size);
}

// payloadText is what a message shows: a string payload, an object's
// text, else the payload as JSON.
function payloadText(p) {
  if (typeof p === "string") return p;
  if (p && typeof p === "object" && typeof p.text === "string") return p.text;
  return JSON.stringify(p);
}

function span(className, text) {
  const el = document.createElement("span");
  el.className = className;
  el.textContent = text;
  return el;
}

function showMessage(f) {
  const li = document.createElement("li");
  li.className = "message";
  if (Number.isFinite(f.ts)) {
    const at = new Date(f.ts);
    const time = document.createElement("time");
    time.dateTime = at.toISOString();
    time.textContent = at.toLocaleTimeString();
    li.append(time, " ");
  }
  li.append(span("from", String(f.from)), ": ", span("text", payloadText(f.payload)));
  wall.append(li);
  while (wall.children.length > maxShown) wall.firstElementChild.remove();
}

// handlers act on the frames by kind; a kind not here is ignored.
const handlers = {
  welcome(f) {
    online.clear();
    for (const h of f.online || []) online.add(h);
    showCount();
    retry = 1000;
    setStatus("live", "live");
    if (welcomed) refreshBoards(); // board frames may have been missed meanwhile
    welcomed = true;
  },
  presence(f) {
    if (f.status === "online") online.add(f.agent);
    else online.delete(f.agent);
    showCount();
  },
  message: showMessage,
  board: onBoardFrame,
  closed(f) {
    ended = true;
    setStatus("closed: " + String(f.reason), "closed");
  },
};

function connect() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const id = encodeURIComponent(page.dataset.cluster);
  const ws = new WebSocket(`${scheme}//${location.host}/v1/clusters/${id}/ws?spectate=1`);
  ws.onmessage = (ev) => {
    let f;
    try {
      f = JSON.parse(ev.data);
    } catch {
      return;
    }
    const handle = f && handlers[f.kind];
    if (handle) handle(f);
  };
  ws.onclose = () => {
    if (ended) return;
    setStatus("disconnected: reconnecting", "down");
    setTimeout(connect, retry);
    retry = Math.min(2 * retry, maxRetry);
  };
}

connect();
