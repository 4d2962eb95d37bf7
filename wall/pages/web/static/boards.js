// The boards of a public cluster's page, kept current: on a board frame
// of the page's socket (cluster.js hands them to onBoardFrame), or after
// a reconnection, the boards section is fetched again as the node draws it
// (GET /clusters/{id}/boards: the section alone, map included) and swapped
// in, one fetch at a time. The node alone draws the boards and the map;
// this script only asks, swaps and keeps the focus where it was. A
// marker the keyboard focuses shows its posts under the map, as a tap
// does (its link targets them).

const page = document.getElementById("cluster");
const part = page ? `/clusters/${encodeURIComponent(page.dataset.cluster)}/boards` : "";

// oneAtATime wraps async fn so that it never runs twice at once: a call
// while it runs makes one more run once it ends. A failure waits for the
// next call (the socket's reconnection makes one).
export function oneAtATime(fn) {
  let busy = false;
  let again = false;
  const run = async () => {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      await fn();
    } catch {
      // the next call asks again
    } finally {
      busy = false;
      if (again) {
        again = false;
        run();
      }
    }
  };
  return run;
}

// onBoardFrame acts on a board frame: the boards are fetched again.
export function onBoardFrame() {
  refreshBoards();
}

// refreshBoards fetches the boards section again and swaps it in.
export const refreshBoards = oneAtATime(async () => {
  if (!document.getElementById("boards-section")) return;
  const resp = await fetch(part, { cache: "no-store" });
  if (resp.ok) swap(await resp.text());
});

// focusKey names the focused element of the section so that its
// counterpart in a fresh section can take the focus back.
function focusKey(e) {
  if (!e || !e.closest || !e.closest("#boards-section")) return "";
  if (e.dataset.place) return `.marker[data-place="${CSS.escape(e.dataset.place)}"]`;
  if (e.dataset.post) return `a[data-post="${CSS.escape(e.dataset.post)}"]`;
  return "";
}

function swap(html) {
  const section = document.getElementById("boards-section");
  const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("boards-section");
  if (!section || !fresh) return;
  const key = focusKey(document.activeElement);
  const shown = section.querySelector(".place.shown");
  section.replaceWith(document.adoptNode(fresh));
  if (shown) showPlace(shown.dataset.place);
  const back = key && document.querySelector(key);
  if (back) back.focus();
}

// showPlace shows the posts of marker n under the map, and only those.
function showPlace(n) {
  for (const p of document.querySelectorAll("#board-map .place")) p.classList.toggle("shown", p.dataset.place === n);
  for (const m of document.querySelectorAll("#board-map .marker")) m.classList.toggle("chosen", m.dataset.place === n);
}

// A marker focused (the keyboard) or clicked (a tap; its link then
// scrolls to the list) shows its posts.
for (const kind of ["focusin", "click"]) {
  document.addEventListener(kind, (ev) => {
    const m = ev.target.closest && ev.target.closest("#board-map .marker");
    if (m) showPlace(m.dataset.place);
  });
}
