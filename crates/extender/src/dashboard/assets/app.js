// hami-rs dashboard: a read-only view of hami-scheduler's state, built from its JSON API
// (/api/v1/...). Plain DOM, no framework, no build step. Every text node is created
// with textContent (never innerHTML), so names from the cluster are never markup.
"use strict";

(() => {
  const POLL_MS = 2000;
  const ROW = 34; // px; the same as --row in app.css
  const OVERSCAN = 8;

  // ---- DOM and formatting ------------------------------------------------------------

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const gib = (mib) => (mib / 1024).toFixed(1);
  const gpusOf = (cores) => (cores / 100).toFixed(2);
  const share = (a) => (a.total > 0 ? Math.round((a.used * 100) / a.total) : 0);
  const nodeLink = (name) => h("a", { href: "#/nodes/" + encodeURIComponent(name) }, name);
  const podLink = (ns, name) =>
    h("a", { href: "#/pods/" + encodeURIComponent(ns) + "/" + encodeURIComponent(name) }, ns + "/" + name);

  function bar(a) {
    const p = a.total > 0 ? Math.min(100, (a.used * 100) / a.total) : 0;
    const tone = a.total > 0 && a.used >= a.total ? " bad" : p >= 80 ? " warn" : "";
    const fill = h("div", { class: "fill" });
    fill.style.width = p + "%";
    return h("div", { class: "bar" + tone, role: "img", "aria-label": Math.round(p) + "% allocated" }, fill);
  }

  function meter(what, a, text) {
    return h("div", { class: "meter", "data-meter": what, "data-used": a.used, "data-total": a.total },
      h("span", { class: "what" }, what), bar(a), h("span", { class: "num" }, text));
  }

  function card(id, label, value, sub, a) {
    return h("div", { class: "card", id: "card-" + id, "data-value": value, "data-used": a ? a.used : null, "data-total": a ? a.total : null },
      h("div", { class: "label" }, label),
      h("div", { class: "value" }, value),
      a ? bar(a) : null,
      sub ? h("div", { class: "sub" }, sub) : null);
  }

  function age(at) {
    const s = Math.max(0, Math.round(Date.now() / 1000 - at));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    if (s < 86400) return Math.floor(s / 3600) + "h";
    return Math.floor(s / 86400) + "d";
  }

  function panel(title, ...children) {
    return h("section", { class: "panel" }, h("h2", {}, title), ...children);
  }

  // ---- API: polling with ETags, so an unchanged answer costs a 304 ---------------------

  const etags = new Map();
  const bodies = new Map();

  async function getJSON(url) {
    const headers = {};
    if (etags.has(url)) headers["If-None-Match"] = etags.get(url);
    const resp = await fetch(url, { headers, cache: "no-store" });
    if (resp.status === 304 && bodies.has(url)) return { data: bodies.get(url), changed: false };
    const data = await resp.json().catch(() => null);
    if (!resp.ok) {
      const err = new Error((data && data.error) || url + ": HTTP " + resp.status);
      err.status = resp.status;
      throw err;
    }
    const tag = resp.headers.get("ETag");
    if (tag) {
      etags.set(url, tag);
      bodies.set(url, data);
    }
    return { data, changed: true };
  }

  // ---- Virtualised list: a scroll box whose rows exist only while in view --------------

  class VList {
    constructor(cols, titles, renderRow, id) {
      this.cols = cols;
      this.renderRow = renderRow;
      this.items = [];
      this.head = h("div", { class: "vhead " + cols }, titles.map((t) => h("span", {}, t)));
      this.spacer = h("div", { class: "vspacer" });
      this.el = h("div", { class: "vlist", id, role: "list" }, this.spacer);
      this.el.addEventListener("scroll", () => this.paint(), { passive: true });
    }

    set(items) {
      this.items = items;
      this.spacer.style.height = items.length * ROW + "px";
      this.el.style.height = Math.min(420, Math.max(ROW, items.length * ROW)) + "px";
      this.el.dataset.count = items.length;
      this.paint();
    }

    paint() {
      const top = this.el.scrollTop;
      const height = this.el.clientHeight || 420;
      const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
      const last = Math.min(this.items.length, Math.ceil((top + height) / ROW) + OVERSCAN);
      const rows = [];
      for (let i = first; i < last; i++) {
        const row = this.renderRow(this.items[i]);
        row.classList.add("vrow", this.cols);
        row.setAttribute("role", "listitem");
        row.style.top = i * ROW + "px";
        rows.push(row);
      }
      this.spacer.replaceChildren(...rows);
    }
  }

  // ---- Views -------------------------------------------------------------------------

  function stateCell(n) {
    const tags = [];
    if (n.reason) tags.push(h("span", { class: "tag bad", title: n.reason }, n.reason));
    for (const u of n.unavailable) {
      tags.push(h("span", { class: "tag bad", title: u.reason }, u.vendor + " unavailable"));
    }
    if (!tags.length) tags.push(h("span", { class: "tag ok" }, "schedulable"));
    return h("span", {}, tags);
  }

  function nodeRow(n) {
    return h("div", { "data-node": n.name },
      h("span", { class: "mono" }, nodeLink(n.name)),
      h("span", { class: "num", "data-field": "gpus" }, n.gpus),
      h("span", { title: n.models.join(", ") }, n.models.join(", ") || "—"),
      h("span", { "data-field": "memory" }, gib(n.memory_mib.used) + " / " + gib(n.memory_mib.total) + " GiB"),
      h("span", {}, bar(n.cores)),
      h("span", { class: "num" }, n.slots.used + "/" + n.slots.total),
      h("span", { class: "num", "data-field": "pods" }, n.pods),
      h("span", { class: "num" }, n.fragmentation.fragmented_gpus.toFixed(2)),
      stateCell(n));
  }

  function pendingRow(p) {
    return h("div", { "data-pod": p.namespace + "/" + p.name },
      h("span", { class: "mono" }, podLink(p.namespace, p.name)),
      h("span", { class: "muted" }, age(p.at) + " ago"),
      h("span", { title: p.summary }, p.summary));
  }

  function overviewView() {
    const cards = h("div", { class: "cards" });
    const models = h("tbody", { id: "models" });
    const pending = h("div", { id: "pending-preview" });
    const filter = h("input", { type: "search", id: "node-filter", placeholder: "Filter by node or model", "aria-label": "Filter nodes" });
    const shown = h("span", { class: "muted", id: "node-count" });
    const list = new VList("cols-nodes",
      ["Node", "GPUs", "Models", "Memory", "Compute", "Slots", "Pods", "Frag.", "State"], nodeRow, "node-list");
    let data = null;

    function showNodes() {
      const q = filter.value.trim().toLowerCase();
      const items = q
        ? data.nodes.filter((n) => n.name.toLowerCase().includes(q) || n.models.some((m) => m.toLowerCase().includes(q)))
        : data.nodes;
      shown.textContent = items.length + " of " + data.nodes.length + " nodes";
      list.set(items);
    }
    filter.addEventListener("input", () => data && showNodes());

    const root = h("div", { id: "overview" },
      h("h1", {}, "Cluster"),
      cards,
      panel("GPUs by model",
        h("table", {},
          h("thead", {}, h("tr", {}, ["Vendor", "Model", "GPUs", "Memory allocated", "", "Compute allocated", "Slots"].map((t) => h("th", {}, t)))),
          models)),
      panel("Pending pods", pending),
      panel("Nodes", h("div", { class: "toolbar" }, filter, shown), list.head, list.el));

    function update(d) {
      data = d;
      const s = d.summary;
      const f = s.fragmentation;
      const ratio = f.free_gpus > 0 ? Math.round((f.fragmented_gpus * 100) / f.free_gpus) : 0;
      cards.replaceChildren(
        card("nodes", "Nodes with GPUs", s.nodes, d.nodes.length + " nodes watched"),
        card("gpus", "GPUs", s.gpus, s.by_model.length + " models"),
        card("memory", "Memory, GiB", gib(s.memory_mib.used) + " / " + gib(s.memory_mib.total),
          share(s.memory_mib) + "% allocated, " + gib(s.memory_mib.total - Math.min(s.memory_mib.used, s.memory_mib.total)) + " GiB free", s.memory_mib),
        card("cores", "Compute, GPUs", gpusOf(s.cores.used) + " / " + gpusOf(s.cores.total),
          share(s.cores) + "% allocated", s.cores),
        card("slots", "Slots taken", s.slots.used + " / " + s.slots.total, "containers sharing GPUs", s.slots),
        card("fragmentation", "Fragmented, GPUs", f.fragmented_gpus.toFixed(2),
          ratio + "% of " + f.free_gpus.toFixed(2) + " free GPUs no typical task can use"),
        card("pending", "Pending pods", d.pending.length, "refused by /filter"));
      models.replaceChildren(...s.by_model.map((m) =>
        h("tr", { "data-model": m.model },
          h("td", {}, m.vendor),
          h("td", {}, m.model),
          h("td", { class: "num" }, m.gpus),
          h("td", { class: "num" }, gib(m.memory_mib.used) + " / " + gib(m.memory_mib.total) + " GiB"),
          h("td", {}, bar(m.memory_mib)),
          h("td", { class: "num" }, gpusOf(m.cores.used) + " / " + gpusOf(m.cores.total) + " GPUs"),
          h("td", { class: "num" }, m.slots.used + "/" + m.slots.total))));
      pending.replaceChildren(d.pending.length === 0
        ? h("p", { class: "muted" }, "No pod is waiting for GPUs.")
        : h("div", {},
          h("table", {}, h("tbody", {}, d.pending.slice(0, 5).map((p) =>
            h("tr", { "data-pod": p.namespace + "/" + p.name },
              h("td", { class: "mono" }, podLink(p.namespace, p.name)),
              h("td", { class: "muted" }, age(p.at) + " ago"),
              h("td", {}, p.summary))))),
          d.pending.length > 5 ? h("p", {}, h("a", { href: "#/pending" }, "All " + d.pending.length + " pending pods")) : null));
      showNodes();
    }
    return { root, url: "/api/v1/cluster", update };
  }

  function pendingView() {
    const list = new VList("cols-pending", ["Pod", "Refused", "Why (FilteringFailed)"], pendingRow, "pending-list");
    const count = h("p", { class: "muted" });
    const root = h("div", { id: "pending" }, h("h1", {}, "Pending pods"),
      panel("Pods hami-scheduler found no node for", count, list.head, list.el));
    function update(d) {
      count.textContent = d.pending.length === 0
        ? "None: every GPU pod was placed."
        : d.pending.length + " pods; open one for the reasons per node.";
      list.set(d.pending);
    }
    return { root, url: "/api/v1/cluster", update };
  }

  function gpuCard(g) {
    const tags = [];
    if (!g.healthy) tags.push(h("span", { class: "tag bad" }, "unhealthy"));
    if (g.cordoned) tags.push(h("span", { class: "tag warn" }, "cordoned"));
    if (g.mode && g.mode !== "hami-core") tags.push(h("span", { class: "tag" }, g.mode));
    return h("div", { class: "gpu", "data-uuid": g.uuid },
      h("h3", {}, "GPU " + g.index + " · " + g.model, tags),
      h("div", { class: "uuid mono" }, g.uuid + " · NUMA " + g.numa + " · " + g.vendor),
      meter("Memory", g.memory_mib, g.memory_mib.used + " / " + g.memory_mib.total + " MiB"),
      meter("Compute", g.cores, g.cores.used + " / " + g.cores.total + " %"),
      meter("Slots", g.slots, g.slots.used + " / " + g.slots.total),
      g.pods.length === 0
        ? h("p", { class: "muted" }, "No pod on this GPU.")
        : h("ul", {}, g.pods.map((p) =>
          h("li", { "data-pod": p.namespace + "/" + p.name },
            podLink(p.namespace, p.name),
            h("span", { class: "muted" }, p.memory_mib + " MiB · " + p.cores + "%" + (p.slots > 1 ? " · " + p.slots + " containers" : ""))))));
  }

  function nodeView(name) {
    const title = h("h1", {}, name);
    const cards = h("div", { class: "cards" });
    const notes = h("div", {});
    const gpus = h("div", { class: "gpus", id: "gpus" });
    const root = h("div", { id: "node", "data-node": name }, title, cards, notes, panel("GPUs", gpus));
    function update(d) {
      cards.replaceChildren(
        card("gpus", "GPUs", d.gpus, d.models.join(", ")),
        card("memory", "Memory, GiB", gib(d.memory_mib.used) + " / " + gib(d.memory_mib.total), share(d.memory_mib) + "% allocated", d.memory_mib),
        card("cores", "Compute, GPUs", gpusOf(d.cores.used) + " / " + gpusOf(d.cores.total), share(d.cores) + "% allocated", d.cores),
        card("slots", "Slots taken", d.slots.used + " / " + d.slots.total, null, d.slots),
        card("pods", "Pods", d.pods, "holding GPUs here"),
        card("fragmentation", "Fragmented, GPUs", d.fragmentation.fragmented_gpus.toFixed(2), "of " + d.fragmentation.free_gpus.toFixed(2) + " free"));
      const lines = [];
      if (d.reason) lines.push(h("p", { class: "error" }, "Takes no GPU pod: " + d.reason));
      for (const u of d.unavailable) {
        lines.push(h("p", { class: "error" }, u.gpus + " " + u.vendor + " devices taken out of scheduling: " + u.reason));
      }
      notes.replaceChildren(...lines);
      gpus.replaceChildren(...(d.devices.length ? d.devices.map(gpuCard) : [h("p", { class: "muted" }, "No GPU registered.")]));
    }
    return { root, url: "/api/v1/nodes/" + encodeURIComponent(name), update };
  }

  function verdictRow(v) {
    return h("div", { "data-node": v.node, class: v.chosen ? "chosen" : "" },
      h("span", { class: "mono" }, nodeLink(v.node)),
      v.reason === null
        ? h("span", { class: "fits" }, "fits, node score " + v.score.toFixed(2) + (v.chosen ? "  ← chosen" : ""))
        : h("span", { class: "nofit", title: v.reason }, v.reason));
  }

  function podView(ns, name) {
    const facts = h("div", {});
    const verdict = h("p", { class: "verdict", id: "verdict" });
    const filter = h("input", { type: "search", placeholder: "Filter nodes", "aria-label": "Filter nodes" });
    const list = new VList("cols-verdicts", ["Node", "Result"], verdictRow, "verdicts");
    const nodes = panel("Node by node", h("div", { class: "toolbar" }, filter), list.head, list.el);
    const root = h("div", { id: "pod", "data-pod": ns + "/" + name }, h("h1", {}, ns + "/" + name), facts, verdict, nodes);
    let rows = [];
    function showRows() {
      const q = filter.value.trim().toLowerCase();
      list.set(q ? rows.filter((r) => r.node.toLowerCase().includes(q) || (r.reason || "").toLowerCase().includes(q)) : rows);
    }
    filter.addEventListener("input", showRows);
    function update(d) {
      const items = [
        h("span", { class: "tag" }, d.phase || "no phase"),
        d.bound_node ? h("span", {}, " bound to ", nodeLink(d.bound_node)) : h("span", { class: "muted" }, " not bound"),
      ];
      facts.replaceChildren(h("p", {}, items),
        d.refused ? h("p", { id: "refused" }, h("strong", {}, "/filter refused it " + age(d.refused.at) + " ago: "), d.refused.summary) : null);
      const failed = Object.keys(d.failed_nodes).length;
      const total = failed + Object.keys(d.scores).length;
      if (d.holds_on) {
        verdict.replaceChildren("Placed: holds GPUs on ", nodeLink(d.holds_on), ".");
      } else if (!d.asks_for_devices) {
        verdict.replaceChildren("Asks for no GPU hami-scheduler places: any node will do.");
      } else if (d.node) {
        verdict.replaceChildren(h("span", { class: "fits" }, "Fits now: "), "hami-scheduler would place it on ", nodeLink(d.node),
          " (" + (total - failed) + " of " + total + " nodes fit).");
      } else {
        verdict.replaceChildren(h("span", { class: "nofit" }, "No node fits: "), failed + " of " + total + " nodes do not meet the request.");
      }
      rows = Object.entries(d.scores)
        .map(([node, score]) => ({ node, score, reason: null, chosen: node === d.node }))
        .sort((a, b) => (b.chosen - a.chosen) || (b.score - a.score) || a.node.localeCompare(b.node))
        .concat(Object.entries(d.failed_nodes).map(([node, reason]) => ({ node, score: 0, reason, chosen: false })));
      nodes.hidden = rows.length === 0;
      showRows();
    }
    return { root, url: "/api/v1/pods/" + encodeURIComponent(ns) + "/" + encodeURIComponent(name) + "/explain", update };
  }

  // ---- Routing (deep links: #/, #/pending, #/nodes/NAME, #/pods/NS/NAME) -------------

  function viewFor(hash) {
    const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
    if (parts[0] === "nodes" && parts.length === 2) return ["node", nodeView(parts[1])];
    if (parts[0] === "pods" && parts.length === 3) return ["pod", podView(parts[1], parts[2])];
    if (parts[0] === "pending") return ["pending", pendingView()];
    return ["overview", overviewView()];
  }

  const main = document.getElementById("view");
  const status = document.getElementById("status");
  let current = null;
  let timer = null;

  function setStatus(ok, text) {
    status.textContent = text;
    status.classList.toggle("offline", !ok);
  }

  async function refresh() {
    clearTimeout(timer);
    const view = current;
    try {
      const cluster = await getJSON("/api/v1/cluster");
      document.getElementById("pending-count").textContent = cluster.data.pending.length || "";
      document.getElementById("scheduler").textContent = cluster.data.scheduler + (cluster.data.synced ? "" : " (syncing)");
      const answer = view.url === "/api/v1/cluster" ? cluster : await getJSON(view.url);
      if (view === current && (answer.changed || !view.shown)) {
        view.update(answer.data);
        view.shown = true;
        if (!main.contains(view.root)) main.replaceChildren(view.root);
      }
      setStatus(true, "live · updated " + new Date().toLocaleTimeString());
    } catch (e) {
      if (view === current && e.status === 404) {
        view.shown = false;
        main.replaceChildren(h("div", { class: "panel error", id: "not-found" }, e.message));
      }
      setStatus(false, "offline: " + e.message + " (retrying)");
    } finally {
      main.setAttribute("aria-busy", "false");
      if (view === current) timer = setTimeout(refresh, POLL_MS);
    }
  }

  function navigate() {
    const [name, view] = viewFor(location.hash);
    current = view;
    for (const a of document.querySelectorAll("[data-nav]")) {
      a.classList.toggle("active", a.dataset.nav === name);
    }
    main.replaceChildren(view.root);
    main.setAttribute("aria-busy", "true");
    refresh();
  }

  window.addEventListener("hashchange", navigate);
  navigate();
})();
