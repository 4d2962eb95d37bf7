// The page of private clusters (GET /join): a visitor gives a cluster id
// (or comes with it after # in the address, which no request carries) and
// its member token, and joins as a libp2p peer: the page derives the
// cluster's wire key from the token and seals and opens every message
// itself (wallui.js, peer.js). Nothing shows before the join.

import { joinForm } from "./wallui.js";

const form = document.getElementById("join-form");
if (form && location.hash.length > 1) form.elements.cluster.value = decodeURIComponent(location.hash.slice(1));
joinForm(form, {
  cluster: () => form.elements.cluster.value.trim(),
  token: () => form.elements.token.value.trim(),
  joining() {
    document.getElementById("members-section").hidden = false;
    document.getElementById("wall-section").hidden = false;
  },
  left: () => location.reload(),
});
