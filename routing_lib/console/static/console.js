// routelake console: plain JavaScript, no build step, no third-party code.
// Every name on the page is data from brokers: it only ever becomes a text node
// (textContent / createTextNode) or an attribute value set with setAttribute, never markup.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const PERM_READ = 4;
const PERM_WRITE = 2;
const LIVE_POLL_MS = 3000;

// ---- DOM helpers ------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

function setAttrs(node, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) throw new Error("event handlers are added with addEventListener");
    node.setAttribute(key, value === true ? "" : String(value));
  }
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function link(text, params, attrs) {
  const a = el("a", { href: urlFor(params), ...(attrs || {}) }, text);
  a.addEventListener("click", (event) => {
    if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
    event.preventDefault();
    navigate(params);
  });
  return a;
}

function table(headers, rows, attrs) {
  return el(
    "table",
    attrs,
    el("thead", null, el("tr", null, headers.map((h) => el("th", null, h)))),
    el("tbody", null, rows),
  );
}

// ---- formatting -------------------------------------------------------------------------

function fmtTime(ms) {
  if (ms === null || ms === undefined) return "—";
  return new Date(ms).toISOString().replace("T", " ");
}

function fmtDuration(ms) {
  if (ms === null || ms === undefined) return "—";
  const s = Math.round(ms / 1000);
  if (Math.abs(s) < 120) return s + " s";
  if (Math.abs(s) < 7200) return Math.round(s / 60) + " min";
  if (Math.abs(s) < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

function fmtPerm(perm) {
  return (perm & PERM_READ ? "R" : "-") + (perm & PERM_WRITE ? "W" : "-") + " (" + perm + ")";
}

function fmtDataVersion(v) {
  if (!v) return "—";
  return v.stateVersion + "/" + v.counter + " @" + fmtTime(v.timestamp);
}

function parseTime(text) {
  const value = text.trim();
  if (/^-?\d+$/.test(value)) return Number(value);
  const parsed = Date.parse(value);
  return Number.isNaN(parsed) ? null : parsed;
}

// ---- state in the URL -------------------------------------------------------------------

const VIEWS = ["fleet", "topics", "topic", "broker", "changes", "health"];

function currentState() {
  const q = new URLSearchParams(window.location.search);
  const at = q.get("at");
  let view = q.get("view");
  if (!VIEWS.includes(view)) view = q.get("topic") ? "topic" : q.get("broker") ? "broker" : "fleet";
  return {
    view,
    at: at !== null && /^-?\d+$/.test(at) ? Number(at) : null,
    topic: q.get("topic"),
    broker: q.get("broker"),
    q: q.get("q") || "",
    from: q.get("from"),
    to: q.get("to"),
    fbroker: q.get("fbroker") || "",
    ftopic: q.get("ftopic") || "",
  };
}

// params: changes to the current state; `at` is kept unless given (null: live).
function urlFor(params) {
  const state = { ...currentState(), ...params };
  const q = new URLSearchParams();
  if (state.view === "topic" && state.topic !== null) q.set("topic", state.topic);
  else if (state.view === "broker" && state.broker !== null) q.set("broker", state.broker);
  else if (state.view !== "fleet") q.set("view", state.view);
  if (state.view === "topics" && state.q) q.set("q", state.q);
  if (state.view === "changes") {
    for (const key of ["from", "to", "fbroker", "ftopic"]) if (state[key]) q.set(key, state[key]);
  }
  if (state.at !== null && state.at !== undefined) q.set("at", String(state.at));
  const text = q.toString();
  return "/" + (text ? "?" + text : "");
}

function navigate(params, replace) {
  const url = urlFor(params);
  if (replace) window.history.replaceState(null, "", url);
  else window.history.pushState(null, "", url);
  render();
}

// ---- data -------------------------------------------------------------------------------

async function api(path, params) {
  const q = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined && value !== "") q.set(key, String(value));
  }
  const response = await fetch("/console/api/" + path + (q.toString() ? "?" + q : ""), {
    headers: { Accept: "application/json" },
  });
  let body;
  try {
    body = await response.json();
  } catch (err) {
    body = { status: "error", message: "HTTP " + response.status };
  }
  if (!response.ok && body.status !== "error") {
    body = { status: "error", message: "HTTP " + response.status + ": " + JSON.stringify(body) };
  }
  return body;
}

// ---- the frame: header, time control ----------------------------------------------------

let shownVersion = null; // the snapshot version on the page
let span = null;
let renderSeq = 0;

function showSnapshot(snapshot, at) {
  const box = document.getElementById("snapshot");
  box.replaceChildren();
  if (!snapshot) return;
  shownVersion = snapshot.version;
  span = snapshot.span;
  box.append(
    el("span", { id: "snapshot-version", title: JSON.stringify(snapshot.versions) },
      "snapshot v" + snapshot.version),
    " · watermark ",
    el("span", { id: "watermark", title: String(snapshot.watermark) }, fmtTime(snapshot.watermark)),
    " · lag ",
    el("span", { id: "lag" }, fmtDuration(snapshot.lagMs)),
  );
  const bar = document.getElementById("timebar");
  bar.hidden = false;
  const slider = document.getElementById("at-slider");
  slider.min = String(span.from);
  slider.max = String(span.to);
  slider.value = String(at === null ? span.to : at);
  document.getElementById("at-input").value = at === null ? "" : String(at);
  const label = document.getElementById("at-label");
  label.replaceChildren(
    at === null
      ? el("strong", { id: "mode", class: "live" }, "live")
      : el("strong", { id: "mode", class: "past" }, "as of " + fmtTime(at) + " (" + at + ")"),
  );
}

function setupFrame() {
  const slider = document.getElementById("at-slider");
  slider.addEventListener("input", () => {
    document.getElementById("at-input").value = slider.value;
  });
  slider.addEventListener("change", () => navigate({ at: Number(slider.value) }));
  const go = () => {
    const value = parseTime(document.getElementById("at-input").value);
    if (value === null) {
      document.getElementById("at-label").replaceChildren(el("span", { class: "error" },
        "not a time: give epoch milliseconds or an ISO date"));
      return;
    }
    navigate({ at: value });
  };
  document.getElementById("at-go").addEventListener("click", go);
  document.getElementById("at-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter") go();
  });
  document.getElementById("live").addEventListener("click", () => navigate({ at: null }));
  for (const a of document.querySelectorAll("#tabs a")) {
    a.addEventListener("click", (event) => {
      event.preventDefault();
      navigate({ view: a.dataset.view });
    });
  }
  window.addEventListener("popstate", render);
  window.setInterval(followLive, LIVE_POLL_MS);
}

// In live mode, show a newer snapshot when the lookup serves one (the search view keeps
// what the person typed: it refreshes on the next search).
async function followLive() {
  const state = currentState();
  if (state.at !== null || state.view === "topics" || document.hidden || shownVersion === null) {
    return;
  }
  try {
    const response = await fetch("/healthz");
    const body = await response.json();
    const version = body.versions ? body.versions.route_progress : null;
    if (version !== null && version !== undefined && version !== shownVersion) render();
  } catch (err) {
    // the server is restarting: try again at the next tick
  }
}

function setActiveTab(view) {
  const tab = view === "topic" ? "topics" : view === "broker" ? "fleet" : view;
  for (const a of document.querySelectorAll("#tabs a")) {
    a.classList.toggle("active", a.dataset.view === tab);
  }
}

async function render() {
  const state = currentState();
  const seq = ++renderSeq;
  const main = document.getElementById("main");
  main.dataset.state = "loading";
  setActiveTab(state.view);
  let content;
  try {
    content = await VIEW_RENDERERS[state.view](state);
  } catch (err) {
    content = errorBox("The console could not show this view: " + err);
  }
  if (seq !== renderSeq) return; // a newer navigation won
  main.replaceChildren(content);
  main.dataset.view = state.view;
  main.dataset.state = "ready";
  document.documentElement.dataset.readyAt = String(Math.round(performance.now()));
}

function errorBox(message) {
  return el("div", { class: "error", id: "error" }, message);
}

function noData(body) {
  document.getElementById("timebar").hidden = true;
  document.getElementById("snapshot").replaceChildren();
  shownVersion = null;
  return el("div", { id: "no-data" }, el("h2", null, "No data yet"), el("p", null, body.message));
}

// Common handling of an answer: no data yet, an error, or the view built by `build`.
function answered(body, at, build) {
  if (body.status === "empty") return noData(body);
  if (body.status !== "ok") return errorBox(body.message || "error");
  showSnapshot(body.snapshot, at);
  return build(body);
}

// ---- views ------------------------------------------------------------------------------

async function fleetView(state) {
  const body = await api("fleet", { at: state.at });
  return answered(body, state.at, () => {
    const fleet = body.fleet;
    const c = fleet.counts;
    const summary = el("p", { id: "counts" },
      c.clusters + " clusters · " + c.groups + " broker groups · " + c.brokers + " brokers (" +
      c.liveBrokers + " live) · " + c.topics + " topics");
    const rows = [];
    for (const cluster of fleet.clusters) {
      for (const group of cluster.groups) {
        const brokers = group.brokers.length ? group.brokers : [null];
        brokers.forEach((b, i) => {
          const first = i === 0;
          rows.push(el("tr", { class: "broker" + (b && !b.live ? " dead" : "") },
            el("td", { class: "cluster" }, first ? cluster.name : ""),
            el("td", { class: "group" }, first ? link(group.name, { view: "broker", broker: group.name }) : ""),
            el("td", null, first ? (group.zone || "") : ""),
            el("td", { class: "perm", title: "topics carried / of which writable" },
              first ? group.writableTopics + " / " + group.topics + " writable" : ""),
            el("td", null, b ? String(b.id) : ""),
            el("td", null, b ? b.role : "no brokers"),
            el("td", { class: "addr" }, b ? b.addr : ""),
            el("td", { class: "live" }, b ? (b.live ? "live" : "not live") : ""),
            el("td", null, b ? fmtTime(b.aliveSince) : ""),
            el("td", null, b ? fmtTime(b.lastHeartbeat) : ""),
            el("td", null, b ? fmtDataVersion(b.dataVersion) : ""),
          ));
        });
      }
    }
    const note = state.at === null ? null : el("p", { class: "muted" },
      "State at T rebuilt from the history tables (routectl as-of): heartbeats and " +
      "dataVersion are not versioned, so they show only in live mode.");
    return el("section", { id: "fleet" }, el("h2", null, "Fleet"), summary, note,
      table(["cluster", "broker group", "zone", "write permission", "id", "role", "address",
        "liveness", "alive since", "last heartbeat", "dataVersion"], rows, { id: "fleet-table" }));
  });
}

async function topicsView(state) {
  const input = el("input", { type: "search", id: "topic-search", value: state.q,
    placeholder: "topic name: prefix or any part", autocomplete: "off", size: 40 });
  const results = el("div", { id: "topic-results" });
  const section = el("section", { id: "topics" }, el("h2", null, "Topics"),
    el("label", { for: "topic-search" }, "Search "), input, results);
  let seq = 0;
  const search = async (first) => {
    const mine = ++seq;
    const started = performance.now();
    const body = await api("topics", { q: input.value, at: state.at });
    if (mine !== seq) return null;
    const content = answered(body, state.at, () => {
      const items = body.topics.map((name) =>
        el("li", null, link(name, { view: "topic", topic: name })));
      const what = body.query
        ? body.prefixCount + " starting with it; showing " + body.topics.length +
          (body.more ? " (more match: type more)" : "")
        : "showing the first " + body.topics.length;
      return el("div", null,
        el("p", { id: "search-summary", "data-ms": String(Math.round(performance.now() - started)) },
          body.total + " topics · " + what),
        el("ul", { id: "topic-list" }, items));
    });
    if (content.id === "no-data") return content;
    results.replaceChildren(content);
    results.dataset.query = input.value;
    if (!first) {
      window.history.replaceState(null, "", urlFor({ view: "topics", q: input.value }));
      document.documentElement.dataset.searchedAt = String(Math.round(performance.now()));
    }
    return null;
  };
  let timer = null;
  input.addEventListener("input", () => {
    window.clearTimeout(timer);
    timer = window.setTimeout(() => search(false), 50);
  });
  const empty = await search(true);
  return empty || section;
}

function routeTables(route) {
  if (!route) return el("p", { id: "no-route", class: "muted" }, "No route: TOPIC_NOT_EXIST");
  const brokers = route.brokerDatas.map((b) =>
    el("tr", null,
      el("td", null, link(b.brokerName, { view: "broker", broker: b.brokerName })),
      el("td", null, b.cluster),
      el("td", { class: "addr" }, Object.entries(b.brokerAddrs).map(([id, addr]) => id + "=" + addr).join(", ")),
      el("td", null, b.zoneName || ""),
      el("td", null, b.enableActingMaster ? "yes" : "no")));
  const queues = route.queueDatas.map((q) =>
    el("tr", null, el("td", null, q.brokerName), el("td", null, String(q.readQueueNums)),
      el("td", null, String(q.writeQueueNums)), el("td", null, fmtPerm(q.perm)),
      el("td", null, String(q.topicSysFlag))));
  return el("div", null,
    el("h3", null, "Brokers"),
    table(["broker group", "cluster", "brokerAddrs (id=address)", "zone", "acting master"], brokers,
      { id: "route-brokers" }),
    el("h3", null, "Queues"),
    table(["broker group", "read queues", "write queues", "perm", "topicSysFlag"], queues,
      { id: "route-queues" }),
    route.orderTopicConf ? el("p", null, "orderTopicConf: ", el("code", null, route.orderTopicConf)) : null,
    el("details", null, el("summary", null, "TopicRouteData as clients get it (JSON)"),
      el("pre", { id: "route-json" }, JSON.stringify(route, null, 1))));
}

async function topicView(state) {
  if (!state.topic) return errorBox("no topic given");
  const body = await api("route", { topic: state.topic, at: state.at });
  return answered(body, state.at, () => {
    const end = body.snapshot.watermark;
    const lanes = groupBy(body.timeline, (v) => v.brokerName);
    const chart = timeline(lanes, body.snapshot.span.from, end, state.at, (v) => ({
      cls: v.perm & PERM_WRITE ? "bar rw" : v.perm & PERM_READ ? "bar ro" : "bar none",
      label: fmtPerm(v.perm) + " r" + v.readQueueNums + "/w" + v.writeQueueNums,
      title: v.brokerName + ": " + fmtTime(v.from) + " → " + (v.to === null ? "now" : fmtTime(v.to)) +
        ", perm " + fmtPerm(v.perm) + ", read " + v.readQueueNums + ", write " + v.writeQueueNums +
        (v.startedBy ? ", started by " + v.startedBy : "") + (v.endedBy ? ", ended by " + v.endedBy : ""),
    }));
    const rows = body.timeline.map((v) => el("tr", { class: "version" },
      el("td", null, v.brokerName), el("td", null, fmtTime(v.from)),
      el("td", null, v.to === null ? "(current)" : fmtTime(v.to)), el("td", null, fmtPerm(v.perm)),
      el("td", null, v.readQueueNums + " / " + v.writeQueueNums), el("td", null, v.startedBy || ""),
      el("td", null, v.endedBy || "")));
    return el("section", { id: "topic" },
      el("h2", null, "Topic ", el("span", { id: "topic-name" }, body.topic)),
      el("p", { class: "muted" }, state.at === null ? "Route as clients get it now (GET_ROUTEINFO_BY_TOPIC)."
        : "Route at " + fmtTime(state.at) + ", from the history tables."),
      routeTables(body.route),
      el("h3", null, "Route over time"), chart,
      table(["broker group", "from", "to", "perm", "read / write queues", "started by", "ended by"],
        rows, { id: "topic-timeline" }));
  });
}

async function brokerView(state) {
  if (!state.broker) return errorBox("no broker group given");
  const body = await api("broker", { name: state.broker });
  return answered(body, state.at, () => {
    const end = body.snapshot.watermark;
    const lanes = groupBy(body.liveness, (i) => i.cluster + " " + i.addr);
    const chart = timeline(lanes, body.snapshot.span.from, end, state.at, (i) => ({
      cls: "bar alive",
      label: i.end ? "→ " + i.end : "",
      endCls: i.end ? "end " + i.end.toLowerCase() : null,
      title: i.addr + " alive " + fmtTime(i.from) + " → " + (i.to === null ? "now" : fmtTime(i.to) + " (" + i.end + ")"),
    }));
    const rows = body.liveness.map((i) => el("tr", { class: "interval" },
      el("td", null, i.cluster), el("td", { class: "addr" }, i.addr), el("td", null, fmtTime(i.from)),
      el("td", null, i.to === null ? "(alive)" : fmtTime(i.to)), el("td", { class: "end" }, i.end || "")));
    const members = body.membership.map((m) => el("tr", null,
      el("td", null, m.cluster), el("td", { class: "addr" }, m.addr), el("td", null, String(m.brokerId)),
      el("td", null, fmtTime(m.from)), el("td", null, m.to === null ? "(current)" : fmtTime(m.to)),
      el("td", null, m.startReason || ""), el("td", null, m.endReason || "")));
    return el("section", { id: "broker" },
      el("h2", null, "Broker group ", el("span", { id: "broker-name" }, body.name)),
      el("h3", null, "Liveness (brokerLiveTable) over time"), chart,
      table(["cluster", "address", "alive from", "to", "ended by"], rows, { id: "liveness" }),
      el("h3", null, "Membership (brokerAddrTable)"),
      table(["cluster", "address", "broker id", "from", "to", "start", "end"], members, { id: "membership" }),
      el("p", null, link("Operators' changes of this group", { view: "changes", fbroker: body.name })));
  });
}

async function changesView(state) {
  const to = state.to || (state.at !== null ? String(state.at + 1) : "");
  const body = await api("changes", { from: state.from, to, broker: state.fbroker, topic: state.ftopic });
  return answered(body, state.at, () => {
    const field = (name, value, label) => el("label", null, label + " ",
      el("input", { name, id: "filter-" + name, value: value || "", size: 16 }));
    const form = el("form", { id: "changes-filter" },
      field("from", state.from, "from (ms)"), field("to", to, "to (ms, exclusive)"),
      field("fbroker", state.fbroker, "broker"), field("ftopic", state.ftopic, "topic"),
      el("button", { type: "submit" }, "Filter"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const data = new FormData(form);
      navigate({ view: "changes", from: data.get("from"), to: data.get("to"),
        fbroker: data.get("fbroker"), ftopic: data.get("ftopic") });
    });
    const rows = body.changes.map((c) => el("tr", { class: "change" },
      el("td", null, fmtTime(c.event_time)), el("td", null, c.event_type),
      el("td", null, c.broker_name || ""), el("td", null, c.topic || ""), el("td", null, c.cluster_name || ""),
      el("td", null, [c.namespace, c.key, c.value].filter((x) => x !== null && x !== undefined).join(" / ")),
      el("td", null, c.requested_by || ""), el("td", null, (c.source || "") + " @" + c.position)));
    return el("section", { id: "changes" }, el("h2", null, "Operators' changes (admin_events)"), form,
      el("p", { id: "changes-count" }, body.total + " changes" +
        (body.total > body.changes.length ? "; the latest " + body.changes.length + " shown" : "")),
      table(["time", "what", "broker", "topic", "cluster", "namespace / key / value", "requested by",
        "source @ offset"], rows, { id: "changes-table" }));
  });
}

async function healthView(state) {
  const body = await api("health", {});
  return answered(body, state.at, () => {
    const part = (title, id, data, columns, cells) => el("div", { id },
      el("h3", null, title + ": " + data.total),
      data.buckets.length ? barChart(data.buckets) : el("p", { class: "muted" }, "none"),
      Object.keys(data.reasons).length ? table(["reason", "count"],
        Object.entries(data.reasons).map(([r, n]) => el("tr", null, el("td", null, r), el("td", null, String(n)))))
        : null,
      data.latest.length ? el("h4", null, "Latest") : null,
      data.latest.length ? table(columns, data.latest.map((row) => el("tr", null, cells(row).map((v) =>
        el("td", null, v === null || v === undefined ? "" : String(v)))))) : null);
    const risks = body.routeRisks;
    const riskPart = (title, id, data, note) => el("div", { id },
      el("h3", null, title + ": " + data.total),
      el("p", { class: "muted" }, note),
      Object.keys(data.clusters).length ? table(["cluster", "topics (each links to its timeline)"],
        Object.entries(data.clusters).map(([cluster, topics]) => el("tr", null,
          el("td", null, cluster + " (" + data.counts[cluster] + ")"),
          el("td", { class: "risk-topics" }, topics.flatMap((t, i) =>
            [i ? ", " : "", link(t, { view: "topic", topic: t })]))))) : el("p", { class: "muted" }, "none"));
    return el("section", { id: "health" }, el("h2", null, "Health"),
      el("h3", null, "Route risks"),
      riskPart("Topics without a writable queue", "risk-unwritable", risks.withoutWritableQueue,
        "Producers fail with \"No route info of this topic\": no queue with write permission on a " +
        "broker group with a master, or gone with every group that held them."),
      riskPart("Topics on a single broker group", "risk-single-group", risks.singleBrokerGroup,
        "Every queue on one broker group: a single point of failure (system topics left out)."),
      el("p", { class: "muted" }, "Dead letters and late events, by the time the job saw them (seen_at_ms)."),
      part("Dead letters", "dead-letters", body.deadLetters, ["seen", "reason", "source @ offset", "record"],
        (r) => [fmtTime(r.seen_at_ms), r.reason, r.source + " @" + r.position,
          (r.raw_text || "").slice(0, 300)]),
      part("Late events", "late-events", body.lateEvents,
        ["seen", "event time", "published watermark", "broker", "type", "source @ offset"],
        (r) => [fmtTime(r.seen_at_ms), fmtTime(r.event_time), fmtTime(r.published_watermark),
          r.broker_name, r.event_type, r.source + " @" + r.position]));
  });
}

const VIEW_RENDERERS = {
  fleet: fleetView, topics: topicsView, topic: topicView, broker: brokerView,
  changes: changesView, health: healthView,
};

// ---- charts (SVG built node by node) ----------------------------------------------------

function groupBy(items, key) {
  const lanes = new Map();
  for (const item of items) {
    const k = key(item);
    if (!lanes.has(k)) lanes.set(k, []);
    lanes.get(k).push(item);
  }
  return lanes;
}

const CHART = { width: 960, label: 220, lane: 22, axis: 24 };

function timeline(lanes, start, end, at, style) {
  if (lanes.size === 0) return el("p", { class: "muted" }, "no history");
  const width = CHART.width - CHART.label - 10;
  const first = Math.min(start, ...[...lanes.values()].flat().map((i) => i.from));
  const range = Math.max(1, end - first);
  const x = (t) => CHART.label + ((Math.min(Math.max(t, first), end) - first) / range) * width;
  const height = lanes.size * CHART.lane + CHART.axis;
  const chart = svg("svg", { class: "timeline", viewBox: "0 0 " + CHART.width + " " + height,
    width: CHART.width, height, role: "img" });
  let row = 0;
  for (const [name, items] of lanes) {
    const y = row * CHART.lane;
    chart.append(svg("text", { x: 4, y: y + 15, class: "lane-label" }, name));
    for (const item of items) {
      const s = style(item);
      const x0 = x(item.from);
      const x1 = x(item.to === null ? end : item.to);
      const bar = svg("rect", { x: x0, y: y + 3, width: Math.max(1, x1 - x0), height: CHART.lane - 6,
        class: s.cls, "data-from": item.from, "data-to": item.to === null ? "" : item.to },
      svg("title", null, s.title));
      chart.append(bar);
      if (s.endCls) chart.append(svg("rect", { x: x1 - 2, y: y + 1, width: 4, height: CHART.lane - 2, class: s.endCls }));
      if (s.label && x1 - x0 > 60) chart.append(svg("text", { x: x0 + 3, y: y + 15, class: "bar-label" }, s.label));
    }
    row += 1;
  }
  const axisY = lanes.size * CHART.lane;
  chart.append(svg("line", { x1: CHART.label, x2: CHART.label + width, y1: axisY + 2, y2: axisY + 2, class: "axis" }));
  chart.append(svg("text", { x: CHART.label, y: axisY + 18, class: "tick" }, fmtTime(first)));
  chart.append(svg("text", { x: CHART.label + width, y: axisY + 18, class: "tick end" }, fmtTime(end)));
  if (at !== null && at >= first && at <= end) {
    chart.append(svg("line", { x1: x(at), x2: x(at), y1: 0, y2: axisY, class: "at-marker" },
      svg("title", null, "T = " + fmtTime(at))));
  }
  return chart;
}

function barChart(buckets) {
  const height = 80;
  const max = Math.max(1, ...buckets.map((b) => b.n));
  const w = (CHART.width - 20) / buckets.length;
  const chart = svg("svg", { class: "bars", viewBox: "0 0 " + CHART.width + " " + (height + 20),
    width: CHART.width, height: height + 20, role: "img" });
  buckets.forEach((b, i) => {
    const h = (b.n / max) * height;
    chart.append(svg("rect", { x: 10 + i * w, y: height - h, width: Math.max(1, w - 1), height: h, class: "count" },
      svg("title", null, b.n + " from " + fmtTime(b.from) + " to " + fmtTime(b.to))));
  });
  chart.append(svg("text", { x: 10, y: height + 16, class: "tick" }, fmtTime(buckets[0].from)));
  chart.append(svg("text", { x: CHART.width - 10, y: height + 16, class: "tick end" },
    fmtTime(buckets[buckets.length - 1].to)));
  return chart;
}

setupFrame();
render();
