// The approval page. The approver's secret key is imported into WebCrypto
// (non-extractable) and stays in this page's memory; the server sees only
// signatures. The session token lives in memory too (no cookie, no
// storage): reloading the page signs out. Everything shown is put into the
// document as text, never as markup.
"use strict";

(() => {
  const LOGIN_PURPOSE = "ipc approver login";
  /** Seconds an approval or a decline stays valid (capped by the operation's expiry). */
  const TTL = 600;
  let key = null;
  let session = null;
  let approver = null;

  const $ = (id) => document.getElementById(id);

  // JCS (RFC 8785) of what the page signs: objects (keys sorted by UTF-16
  // code units, JS's default sort), arrays, strings, safe integers,
  // booleans and null, each as JSON.stringify writes it (which is JCS's
  // form for these). A flat approval signs exactly as before.
  function jcs(v) {
    if (v === null || typeof v === "boolean" || typeof v === "string") return JSON.stringify(v);
    if (typeof v === "number") {
      if (!Number.isSafeInteger(v)) throw new Error("only safe integers can be signed");
      return JSON.stringify(v);
    }
    if (Array.isArray(v)) return "[" + v.map(jcs).join(",") + "]";
    if (typeof v === "object") {
      const parts = Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + jcs(v[k]));
      return "{" + parts.join(",") + "}";
    }
    throw new Error("only strings, integers, booleans, lists and objects can be signed");
  }

  const b64 = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)));
  const b64url = (s) => s.replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");

  function randomHex(n) {
    const b = new Uint8Array(n);
    crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  }

  // A secret key file of `ipc keygen`: {"alg":"ed25519","secret":B64 seed,"public":B64}.
  async function importKeyFile(text) {
    let f;
    try {
      f = JSON.parse(text);
    } catch (_) {
      throw new Error("the key is not a key file (JSON from `ipc keygen`)");
    }
    if (!f || f.alg !== "ed25519" || typeof f.secret !== "string" || typeof f.public !== "string") {
      throw new Error("the key file must hold alg \"ed25519\", \"secret\" and \"public\"");
    }
    const jwk = { kty: "OKP", crv: "Ed25519", d: b64url(f.secret), x: b64url(f.public) };
    return crypto.subtle.importKey("jwk", jwk, { name: "Ed25519" }, false, ["sign"]);
  }

  async function sign(obj, withKey) {
    const msg = new TextEncoder().encode(jcs(obj));
    return b64(await crypto.subtle.sign({ name: "Ed25519" }, withKey || key, msg));
  }

  async function call(method, path, body) {
    const headers = { "Content-Type": "application/json" };
    if (session) headers.Authorization = "Approver " + session;
    const r = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
      cache: "no-store",
    });
    let data = null;
    try {
      data = await r.json();
    } catch (_) {
      data = null;
    }
    return { status: r.status, data };
  }

  function say(text, isError) {
    const m = $("message");
    m.textContent = text;
    m.className = isError ? "error" : "";
  }

  async function signIn(name, keyText) {
    const k = await importKeyFile(keyText);
    const c = await call("POST", "/v1/approver/challenge", { approver: name });
    if (c.status !== 200) throw new Error((c.data && c.data.error) || "no challenge");
    const login = {
      approver: name,
      challenge: c.data.challenge,
      origin: location.origin,
      purpose: LOGIN_PURPOSE,
    };
    const s = await call("POST", "/v1/approver/session", { login, signature: await sign(login, k) });
    if (s.status !== 200) throw new Error((s.data && s.data.error) || "sign-in refused");
    key = k;
    session = s.data.session;
    approver = s.data.approver;
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  // One value's lines as the server folded them (escaped there: every
  // control, newline, bidi or zero-width mark is already visible text),
  // each element of a list in its own block, with the registry's name.
  function valueCell(v) {
    const td = el("td", null, "value-cell");
    const value = el("div", null, "value" + (v.list ? " list" : ""));
    v.items.forEach((lines, i) => {
      const item = el("div", null, "item");
      for (const line of lines) item.appendChild(el("div", line, "line"));
      value.appendChild(item);
      if (v.list && v.names[i]) item.appendChild(el("div", v.names[i], "registry-name"));
    });
    if (v.list && v.items.length === 0) value.appendChild(el("div", "(none)", "none"));
    td.appendChild(value);
    if (!v.list && v.names[0]) td.appendChild(el("div", v.names[0], "registry-name"));
    if (v.secret) td.appendChild(el("div", "a secret: shown as its commitment", "secret"));
    if (v.too_long) {
      td.appendChild(el("div", v.chars + " characters in all: too long to be shown whole", "too-long"));
    }
    return td;
  }

  function card(op) {
    const box = el("article", null, "op " + op.status);
    box.dataset.op = op.operation_hash;
    const whom = op.owner === op.user ? op.user : op.user + " of " + op.owner;
    // the pack's own words for the action first, its name below
    const h = el("h3");
    h.appendChild(el("span", (op.description || op.action) + " \u2014 for " + whom, "title"));
    h.appendChild(el("span", op.status, "status " + op.status));
    box.appendChild(h);
    box.appendChild(el("p", op.action + " (" + op.pack + ")", "action"));
    const t = el("table");
    const head = el("tr", null, "head");
    ["", "value", "from"].forEach((x) => head.appendChild(el("th", x)));
    t.appendChild(head);
    for (const v of op.values) {
      const tr = el("tr");
      tr.dataset.param = v.name;
      tr.appendChild(el("th", v.name, "param"));
      tr.appendChild(valueCell(v));
      const from = el("td", v.source, "origin");
      from.dataset.kind = v.origin_kind;
      from.title = v.origin;
      if (v.new) from.appendChild(el("div", "NEW: not among the owner's records", "new"));
      tr.appendChild(from);
      t.appendChild(tr);
    }
    box.appendChild(t);
    const dl = el("dl");
    const row = (k, v, cls) => {
      dl.appendChild(el("dt", k));
      dl.appendChild(el("dd", v, cls));
    };
    if (op.refusal) row("Cannot be approved", op.refusal, "refusal");
    for (const w of op.why) row("Why", w, "why");
    row("Level", op.level + ", " + op.level_text, "level");
    row("Approval by", op.approve_by, "approve-by");
    row("Approved by", op.approved_by.length ? op.approved_by.join(", ") : "no one yet", "approved-by");
    if (op.expired_approvals.length) {
      row("Expired", "the approval of " + op.expired_approvals.join(", ") +
        " expired: it counts for nothing, approve again", "expired-approvals");
    }
    if (op.declined_by.length) row("Declined by", op.declined_by.join(", "), "declined-by");
    row("Expires", op.expires + (op.status === "expired" ? " (expired)" : ""), "expires");
    row("Operation", op.operation_hash, "hash");
    box.appendChild(dl);
    const mine = op.approved_by.includes(approver);
    const open = op.status === "waiting";
    const yes = el("button", mine ? "Approved" : "Approve", "approve");
    yes.type = "button";
    yes.disabled = !open || mine || !op.approvable;
    yes.addEventListener("click", () => act("approve", op));
    box.appendChild(buttons(yes, declineButton(!open,
      "Decline this operation? It is final: it can no longer be approved.",
      () => act("decline", op))));
    return box;
  }

  // A card's buttons, in a row that wraps on a narrow screen.
  function buttons(...children) {
    const row = el("div", null, "actions");
    for (const c of children) row.appendChild(c);
    return row;
  }

  // Decline in two steps, since it is final: the first click only asks
  // (the question, "Confirm decline" and "Keep" take the button's place);
  // nothing is signed or sent before "Confirm decline".
  function declineButton(disabled, question, decline) {
    const slot = el("span", null, "decline-slot");
    const no = el("button", "Decline", "decline");
    no.type = "button";
    no.disabled = disabled;
    const ask = el("span", null, "decline-ask");
    ask.appendChild(el("span", question, "confirm-text"));
    const sure = el("button", "Confirm decline", "confirm-decline");
    sure.type = "button";
    const keep = el("button", "Keep", "keep");
    keep.type = "button";
    ask.appendChild(sure);
    ask.appendChild(keep);
    no.addEventListener("click", () => {
      slot.replaceChildren(ask);
      sure.focus();
    });
    keep.addEventListener("click", () => {
      slot.replaceChildren(no);
      no.focus();
    });
    sure.addEventListener("click", () => {
      sure.disabled = true;
      keep.disabled = true;
      decline();
    });
    slot.appendChild(no);
    return slot;
  }

  // A child mandate waiting for this user: what it allows in plain words,
  // each claim value with what the registry calls it and, marked, one no
  // registry of hers holds; she signs the mandate itself (its JCS).
  function mandateCard(m) {
    const s = m.shown;
    const box = el("article", null, "mandate");
    box.dataset.mandate = m.mandate.id;
    box.appendChild(el("h3", "Mandate " + (s.mandate || m.mandate.id) + " for " + (s.user || m.mandate.user)));
    if (s.refusal) {
      box.appendChild(el("p", s.refusal, "refusal"));
      return box;
    }
    box.appendChild(el("p", s.summary, "summary"));
    const t = el("table");
    for (const c of s.claims) {
      const tr = el("tr");
      tr.dataset.claim = c.name;
      tr.appendChild(el("th", c.name, "param"));
      const td = el("td", null, "value-cell");
      if (c.items.length === 0) td.appendChild(el("div", "(none)", "none"));
      c.items.forEach((lines, i) => {
        const item = el("div", null, "item");
        for (const line of lines) item.appendChild(el("div", line, "line"));
        if (c.names[i]) item.appendChild(el("div", c.names[i], "registry-name"));
        if (c.in_registry[i] === false) item.appendChild(el("div", "NOT IN ANY REGISTRY OF YOURS", "new"));
        td.appendChild(item);
      });
      tr.appendChild(td);
      t.appendChild(tr);
    }
    box.appendChild(t);
    const dl = el("dl");
    const row = (k, v, cls) => {
      dl.appendChild(el("dt", k));
      dl.appendChild(el("dd", v, cls));
    };
    row("Pack", s.pack, "pack");
    row("Owner", s.owner, "owner");
    row("Scopes", s.scopes.join(", "), "scopes");
    row("Budget", s.budget + " in at most " + s.calls + " calls", "budget");
    row("Valid from", s.issued, "issued");
    row("Expires", s.expires, "expires");
    row("Narrows", s.parent, "parent");
    // where each critical value may come from (the signed `sources`)
    for (const g of s.sources) {
      const words = g.params.join(", ") + ": " + g.from.join(" or ");
      row("Values from", g.wider ? words + " (WIDER than the values named)" : words, g.wider ? "sources refusal" : "sources");
    }
    for (const w of s.widens) row("Widens", w, "refusal");
    box.appendChild(dl);
    const yes = el("button", "Confirm and sign", "confirm");
    yes.type = "button";
    yes.disabled = s.widens.length > 0;
    yes.addEventListener("click", () => decideMandate("confirm", m));
    box.appendChild(buttons(yes, declineButton(false,
      "Decline this mandate? The agent gets nothing from it.",
      () => decideMandate("decline", m))));
    return box;
  }

  // POSTs the body `makeBody` resolves to `path`, says `done` of the
  // receipt or the refusal, and refreshes the lists.
  async function post(path, makeBody, done) {
    try {
      const r = await call("POST", path, await makeBody());
      if (r.status === 200) {
        say(done + " (receipt " + r.data.receipt.seq + ")");
      } else {
        say("Refused: " + ((r.data && r.data.error) || r.status), true);
      }
    } catch (e) {
      say(String(e.message || e), true);
    }
    await refresh();
  }

  async function decideMandate(kind, m) {
    const body = async () => kind === "confirm"
      ? { id: m.mandate.id, signature: await sign(m.mandate) }
      : { id: m.mandate.id };
    await post("/v1/approver/mandates/" + kind, body,
      (kind === "confirm" ? "Issued mandate " : "Declined mandate ") + m.mandate.id);
  }

  async function refreshMandates() {
    const r = await call("GET", "/v1/approver/mandates");
    if (r.status !== 200) return;
    $("mandate-list").replaceChildren(...r.data.mandates.map((m) => mandateCard(m)));
    $("mandates").hidden = r.data.mandates.length === 0;
  }

  let serverNow = 0;

  // Shadow mode, said on the page: those decisions are recorded, not
  // enforced, and nothing of theirs waits for an approver.
  function showShadow(sh) {
    const parts = [];
    if (sh && sh.tenants && sh.tenants.length) parts.push("tenants " + sh.tenants.join(", "));
    if (sh && sh.packs && sh.packs.length) parts.push("packs " + sh.packs.join(", "));
    const e = $("shadow");
    e.textContent = parts.length
      ? "SHADOW MODE for " + parts.join("; ") +
        ": their decisions are recorded and not enforced; none of them waits here for approval."
      : "";
    e.hidden = parts.length === 0;
  }

  async function refresh() {
    const r = await call("GET", "/v1/approver/operations");
    if (r.status !== 200) {
      say((r.data && r.data.error) || "cannot read the operations", true);
      return;
    }
    serverNow = r.data.now;
    showShadow(r.data.shadow);
    const list = $("list");
    list.replaceChildren(...r.data.operations.map((op) => card(op)));
    $("empty").hidden = r.data.operations.length > 0;
    await refreshMandates();
  }

  // The signed approval or decline of `op`, as the server verifies it.
  async function signed(kind, op, withKey) {
    const expires_at = Math.min(op.expires_at, (serverNow || Math.floor(Date.now() / 1000)) + TTL);
    if (kind === "approve") {
      const approval = { approver, operation_hash: op.operation_hash, expires_at, nonce: randomHex(16) };
      return { approval, signature: await sign(approval, withKey) };
    }
    const decline = { approver, operation_hash: op.operation_hash, expires_at, verdict: "decline" };
    return { decline, signature: await sign(decline, withKey) };
  }

  async function act(kind, op) {
    await post("/v1/approver/" + kind, () => signed(kind, op),
      (kind === "approve" ? "Approved " : "Declined ") + op.action);
  }

  async function onSignIn() {
    const name = $("approver").value.trim();
    let text = $("keytext").value.trim();
    const file = $("keyfile").files[0];
    try {
      if (!text && file) text = await file.text();
      if (!name || !text) throw new Error("give your approver name and your secret key file");
      await signIn(name, text);
      $("keytext").value = "";
      $("keyfile").value = "";
      $("signin").hidden = true;
      $("who").hidden = false;
      $("who-name").textContent = approver;
      $("operations").hidden = false;
      say("");
      await refresh();
    } catch (e) {
      say("Sign-in failed: " + String(e.message || e), true);
    }
  }

  async function onLogout() {
    await call("POST", "/v1/approver/logout");
    key = null;
    session = null;
    approver = null;
    $("list").replaceChildren();
    $("mandate-list").replaceChildren();
    $("mandates").hidden = true;
    $("signin").hidden = false;
    $("who").hidden = true;
    $("operations").hidden = true;
    say("Signed out");
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("signin-button").addEventListener("click", onSignIn);
    $("refresh").addEventListener("click", refresh);
    $("logout").addEventListener("click", onLogout);
  });

  // For the browser tests: the page's own functions (the key is not
  // extractable, the session is this page's anyway).
  window.ipcApproval = {
    jcs,
    signed,
    sign,
    refresh,
    refreshMandates,
    post: (path, body) => call("POST", path, body),
    approver: () => approver,
  };
})();
