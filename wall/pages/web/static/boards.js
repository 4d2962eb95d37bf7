// The boards of a public cluster's page, kept current from the board
// frames of the page's socket (cluster.js hands them to onBoardFrame):
// on each, the board's posts (or the list of boards) are fetched again
// from the node's public JSON API and drawn again, with DOM APIs and
// textContent only, never as HTML. The map is drawn again too, with the
// arithmetic of wall/boardmap.go (keep them alike). An age-gated board's
// posts are never fetched: the page does not declare its reader an adult.

const svgNS = "http://www.w3.org/2000/svg";

// The map's size and fitting: boardmap.go's constants.
const mapWidth = 640;
const mapHeight = 320;
const mapPadFrac = 0.1;
const mapMinPad = 0.5;
const mapMinCos = 0.25;
const mapMaxGrid = 8;
const gridSteps = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 45, 90];

const page = document.getElementById("cluster");
const section = document.getElementById("boards-section");
const api = page ? `/v1/clusters/${encodeURIComponent(page.dataset.cluster)}/boards` : "";

// placed holds, by board slug, the shown posts that have a location:
// {id, board, markerTitle, lat, lon}. It starts from the map the node
// drew.
const placed = new Map();

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function seedPlaced() {
  for (const m of section.querySelectorAll("circle.marker")) {
    const title = m.querySelector("title");
    const list = placed.get(m.dataset.board) || [];
    list.push({
      id: m.dataset.post,
      board: m.dataset.board,
      markerTitle: title ? title.textContent : "",
      lat: Number(m.dataset.lat),
      lon: Number(m.dataset.lon),
    });
    placed.set(m.dataset.board, list);
  }
}

// effective merges props levels from the top down, as the node does.
function effective(...levels) {
  const eff = {};
  for (const l of levels) {
    for (const [k, v] of Object.entries(l || {})) {
      if (v !== null && v !== undefined && v !== "") eff[k] = v;
    }
  }
  if (eff.where === "none") delete eff.where;
  return eff;
}

const pad2 = (n) => String(n).padStart(2, "0");

function shownTime(iso) {
  const d = new Date(iso);
  return `${d.getUTCFullYear()}-${pad2(d.getUTCMonth() + 1)}-${pad2(d.getUTCDate())} ${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())} UTC`;
}

// excerpt is boardpage.go's: the first characters of body (code points,
// as Go's runes), with an ellipsis when there are more.
function excerpt(body) {
  const max = Number(section.dataset.excerpt) || 280;
  const chars = Array.from(body || "");
  return chars.length <= max ? chars.join("") : chars.slice(0, max).join("") + "…";
}

function postItem(p) {
  const eff = p.effective_props || {};
  const li = el("li", "post");
  li.dataset.post = p.id;
  li.append(el("h4", "post-title", p.title));
  const body = excerpt(p.body);
  if (body) li.append(el("p", "excerpt", body));
  const meta = el("p", "post-meta");
  if (eff.where && eff.where.label) meta.append(el("span", "where", eff.where.label));
  if (eff.lang) meta.append(el("span", "lang", eff.lang));
  meta.append(el("span", "author", "by " + p.author), el("span", "ttl", "ttl " + p.ttl));
  if (p.expires_at) {
    const exp = el("span", "expires", "expires ");
    const time = el("time", "", shownTime(p.expires_at));
    time.dateTime = new Date(p.expires_at).toISOString().slice(0, 19) + "Z";
    exp.append(time);
    meta.append(exp);
  } else {
    meta.append(el("span", "expires", "never expires"));
  }
  li.append(meta);
  return li;
}

function boardItem(slug) {
  return section.querySelector(`li.board[data-board="${CSS.escape(slug)}"]`);
}

// showPosts draws a board's posts (an answer of GET .../posts) and
// notes its located ones for the map.
function showPosts(slug, answer) {
  const li = boardItem(slug);
  if (!li) return;
  const box = li.querySelector(".board-posts");
  const posts = answer.posts || [];
  if (posts.length) {
    const ol = el("ol", "posts");
    for (const p of posts) ol.append(postItem(p));
    box.replaceChildren(ol);
  } else {
    box.replaceChildren(el("p", "no-posts", "No live post."));
  }
  if (answer.next_cursor) box.append(el("p", "more-posts", `The newest ${posts.length} live posts are shown.`));
  placed.set(
    slug,
    posts
      .filter((p) => p.effective_props && p.effective_props.where)
      .map((p) => {
        const w = p.effective_props.where;
        return { id: p.id, board: slug, markerTitle: w.label ? `${w.label} — ${p.title}` : p.title, lat: w.lat, lon: w.lon };
      }),
  );
}

function showGated(li) {
  li.dataset.gated = "1";
  li.querySelector(".board-posts").replaceChildren(el("p", "age-restricted", "Age-restricted: its posts are not shown here."));
}

function newBoardItem(b, gated) {
  const li = el("li", "board");
  li.dataset.board = b.slug;
  li.append(el("h3", "board-name", b.name || b.slug));
  const meta = el("p", "board-meta");
  meta.append(el("span", "kind", b.kind));
  li.append(meta);
  if (b.about) li.append(el("p", "about", b.about));
  li.append(el("div", "board-posts"));
  if (gated) showGated(li);
  return li;
}

async function getJSON(url) {
  const resp = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
  const body = await resp.json().catch(() => ({}));
  return { status: resp.status, body };
}

// loadPosts fetches a board's posts again and draws them.
async function loadPosts(slug) {
  const li = boardItem(slug);
  if (!li || li.dataset.gated) return;
  const limit = Number(section.dataset.posts) || 20;
  const { status, body } = await getJSON(`${api}/${encodeURIComponent(slug)}/posts?limit=${limit}`);
  if (status === 200) showPosts(slug, body);
  else if (status === 403 && body.code === "age_gated") {
    showGated(li);
    placed.delete(slug);
  } else if (status === 404 && body.code === "board_not_found") {
    li.remove();
    placed.delete(slug);
  } else return;
  drawMap();
}

// loadBoards fetches the list of boards again: boards gone are removed,
// new ones added (by slug, up to the page's count) with their posts.
async function loadBoards() {
  const { status, body } = await getJSON(api);
  if (status !== 200) return;
  const list = document.getElementById("boards");
  const max = Number(section.dataset.maxBoards) || 50;
  const boards = (body.boards || []).slice(0, max);
  const keep = new Set(boards.map((b) => b.slug));
  for (const li of list.querySelectorAll("li.board")) {
    if (!keep.has(li.dataset.board)) {
      li.remove();
      placed.delete(li.dataset.board);
    }
  }
  const fresh = [];
  boards.forEach((b, i) => {
    if (boardItem(b.slug)) return;
    const gated = Number((effective(body.cluster_props, b.props).entry || {}).age_min) >= 18;
    const li = newBoardItem(b, gated);
    list.insertBefore(li, list.children[i] || null);
    if (!gated) fresh.push(b.slug);
  });
  document.getElementById("boards-empty").hidden = boards.length > 0;
  drawMap();
  for (const slug of fresh) refresh(slug);
}

// Fetches run one at a time per board (or for the list, key ""); frames
// that come meanwhile make one more fetch once it ends.
const running = new Set();
const again = new Set();

function refresh(key) {
  if (running.has(key)) {
    again.add(key);
    return;
  }
  running.add(key);
  (key === "" ? loadBoards() : loadPosts(key))
    .catch(() => {}) // the socket's reconnection fetches everything again
    .finally(() => {
      running.delete(key);
      if (again.delete(key)) refresh(key);
    });
}

// onBoardFrame acts on a board frame of the page's socket: a board
// deleted goes at once (a board made again under its slug is a new one);
// a board made, or a post on a board the page does not show yet, fetches
// the list; a post made or deleted fetches its board's posts.
export function onBoardFrame(f) {
  if (!section || typeof f.slug !== "string") return;
  const li = boardItem(f.slug);
  if (f.event === "board_deleted") {
    if (!li) return;
    li.remove();
    placed.delete(f.slug);
    document.getElementById("boards-empty").hidden = section.querySelector("li.board") !== null;
    drawMap();
  } else if (f.event === "board_created" || !li) refresh("");
  else refresh(f.slug);
}

// refreshBoards fetches every board again: the socket reconnected, and
// frames may have been missed meanwhile.
export function refreshBoards() {
  if (!section) return;
  refresh("");
  for (const li of section.querySelectorAll("li.board")) refresh(li.dataset.board);
}

// --- the map: wall/boardmap.go's fitting, drawn as SVG DOM ---

// lonArc is the shortest arc holding every longitude of sorted lons.
function lonArc(lons) {
  const n = lons.length;
  let gap = -1;
  let at = 0;
  for (let i = 0; i < n; i++) {
    let g = lons[(i + 1) % n] - lons[i];
    if (i === n - 1) g += 360;
    if (g > gap) {
      gap = g;
      at = i;
    }
  }
  return { from: lons[(at + 1) % n], span: 360 - gap };
}

function fitMap(points) {
  const lons = points.map((p) => p.lon).sort((a, b) => a - b);
  let south = 90;
  let north = -90;
  for (const p of points) {
    south = Math.min(south, p.lat);
    north = Math.max(north, p.lat);
  }
  const { from, span } = lonArc(lons);
  const lonPad = Math.max(span * mapPadFrac, mapMinPad);
  const latPad = Math.max((north - south) * mapPadFrac, mapMinPad);
  const f = { unwrapFrom: from, west: from - lonPad, east: from + span + lonPad };
  if (f.east - f.west > 360) {
    const mid = from + span / 2;
    f.west = mid - 180;
    f.east = mid + 180;
  }
  f.south = Math.max(-90, south - latPad);
  f.north = Math.min(90, north + latPad);
  f.kx = Math.max(Math.cos((((f.south + f.north) / 2) * Math.PI) / 180), mapMinCos);
  const w = (f.east - f.west) * f.kx;
  const h = f.north - f.south;
  f.scale = Math.min(mapWidth / w, mapHeight / h);
  f.offX = (mapWidth - w * f.scale) / 2;
  f.offY = (mapHeight - h * f.scale) / 2;
  f.xOf = (u) => f.offX + (u - f.west) * f.kx * f.scale;
  f.x = (lon) => f.xOf(f.unwrapFrom + ((((lon - f.unwrapFrom) % 360) + 360) % 360));
  f.y = (lat) => f.offY + (f.north - lat) * f.scale;
  return f;
}

const num = (v) => v.toFixed(2);

function svg(tag, attrs) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

// gridStep is the finest step of gridSteps that cuts span in at most
// mapMaxGrid parts.
const gridStep = (span) => gridSteps.find((s) => span / s <= mapMaxGrid) || gridSteps[gridSteps.length - 1];

function graticule(f, g) {
  let step = gridStep(f.east - f.west);
  for (let i = Math.ceil(f.west / step); i * step <= f.east; i++) {
    const x = num(f.xOf(i * step));
    g.append(svg("line", { x1: x, y1: num(f.y(f.north)), x2: x, y2: num(f.y(f.south)) }));
  }
  step = gridStep(f.north - f.south);
  for (let i = Math.ceil(f.south / step); i * step <= f.north; i++) {
    const y = num(f.y(i * step));
    g.append(svg("line", { x1: num(f.xOf(f.west)), y1: y, x2: num(f.xOf(f.east)), y2: y }));
  }
}

// drawMap draws the map of the located posts of the boards shown, in
// the order of the boards.
function drawMap() {
  const fig = document.getElementById("board-map");
  const posts = [];
  for (const li of section.querySelectorAll("li.board")) posts.push(...(placed.get(li.dataset.board) || []));
  if (!posts.length) {
    fig.replaceChildren(el("p", "map-empty", "No post shown here has a place."));
    return;
  }
  const f = fitMap(posts);
  const box = [f.xOf(f.west), f.y(f.north), (f.east - f.west) * f.kx * f.scale, (f.north - f.south) * f.scale].map(num);
  const map = svg("svg", { class: "map", viewBox: box.join(" "), role: "img", "aria-label": "Map of the posts that have a place" });
  map.append(svg("rect", { class: "map-box", x: box[0], y: box[1], width: box[2], height: box[3] }));
  const grid = svg("g", { class: "graticule" });
  graticule(f, grid);
  const markers = svg("g", { class: "markers" });
  for (const p of posts) {
    const c = svg("circle", { class: "marker", cx: num(f.x(p.lon)), cy: num(f.y(p.lat)), r: "6" });
    Object.assign(c.dataset, { post: p.id, board: p.board, lat: String(p.lat), lon: String(p.lon) });
    const title = svg("title", {});
    title.textContent = p.markerTitle;
    c.append(title);
    markers.append(c);
  }
  map.append(grid, markers);
  fig.replaceChildren(map);
}

if (section) seedPlaced();
