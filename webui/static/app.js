// jobapi operator UI: live updates, the log tail, countdowns, confirmations. Plain script,
// no build step: pages work without it, and it only makes them live.
"use strict";
(function () {
  const body = document.body;
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  const liveState = document.getElementById("live-state");

  function setState(text) { if (liveState) liveState.textContent = text; }

  // Confirmations for destructive forms.
  document.addEventListener("submit", function (ev) {
    const form = ev.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) ev.preventDefault();
  });
  document.addEventListener("focusin", function (ev) {
    if (ev.target.matches && ev.target.matches("[data-select-on-focus]")) ev.target.select();
  });

  // Countdowns: every element with data-deadline-ms shows the seconds left.
  function tickCountdowns() {
    const now = Date.now();
    document.querySelectorAll("[data-deadline-ms]").forEach(function (el) {
      const left = (Number(el.dataset.deadlineMs) - now) / 1000;
      el.textContent = left > 0 ? left.toFixed(1) + " s" : "expired (the sweeper retries it)";
      el.classList.toggle("expired", left <= 0);
    });
  }
  setInterval(tickCountdowns, 200);
  tickCountdowns();

  // Sections of the log: open the ones that hold the line in the address.
  function revealTarget() {
    if (!location.hash.startsWith("#L")) return;
    const el = document.getElementById(location.hash.slice(1));
    if (!el) return;
    for (let d = el.closest("details"); d; d = d.parentElement.closest("details")) d.open = true;
    el.scrollIntoView({ block: "center" });
  }
  window.addEventListener("hashchange", revealTarget);
  revealTarget();
  const foldAll = document.getElementById("fold-all");
  const unfoldAll = document.getElementById("unfold-all");
  if (foldAll) foldAll.addEventListener("click", function () { document.querySelectorAll("#log details.sec").forEach(function (d) { d.open = false; }); });
  if (unfoldAll) unfoldAll.addEventListener("click", function () { document.querySelectorAll("#log details.sec").forEach(function (d) { d.open = true; }); });

  function durationText(s) {
    s = Math.max(0, Math.round(s));
    const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, r = s % 60;
    const pad = function (n) { return String(n).padStart(2, "0"); };
    if (h > 0) return h + "h " + pad(m) + "m " + pad(r) + "s";
    if (m > 0) return m + "m " + pad(r) + "s";
    return r + "s";
  }

  // The log tail: each fetch returns the lines after the last one shown. Sections still open
  // at the end of one fetch are continued by the next; an end marker closes them.
  const log = document.getElementById("log");
  let tailBusy = false, tailAgain = false;
  function innermostOpen() {
    let container = log;
    for (;;) {
      const last = container.lastElementChild;
      if (last && last.matches("details.sec[data-open]")) { container = last.querySelector(":scope > .sec-body"); continue; }
      return container;
    }
  }
  function closeSection(name, end) {
    let body = innermostOpen();
    for (let d = body.closest("details.sec[data-open]"); d; d = d.parentElement.closest("details.sec[data-open]")) {
      d.removeAttribute("data-open");
      d.dataset.end = end;
      if (!d.hasAttribute("data-hide-duration")) {
        const dur = d.querySelector(":scope > summary .dur");
        if (dur) dur.textContent = durationText(end - Number(d.dataset.start));
      }
      if (d.dataset.name === name) return;
    }
  }
  function appendLog(html) {
    const follow = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
    const partial = log.querySelector(".ln.partial");
    if (partial) partial.remove();
    const tpl = document.createElement("template");
    tpl.innerHTML = html;
    Array.from(tpl.content.childNodes).forEach(function (node) {
      if (node.nodeType === 1 && node.classList.contains("sec-end")) { closeSection(node.dataset.name, Number(node.dataset.end)); return; }
      innermostOpen().appendChild(node);
    });
    if (follow) log.scrollTop = log.scrollHeight;
  }
  function tailLog() {
    if (!log || !log.hasAttribute("data-live-log")) return;
    if (tailBusy) { tailAgain = true; return; }
    tailBusy = true;
    const url = log.dataset.logUrl + "?from=" + log.dataset.nextOffset + "&line=" + log.dataset.nextLine;
    fetch(url, { headers: { "X-Requested-With": "fetch" }, credentials: "same-origin" }).then(function (res) {
      if (res.status === 401) { location.reload(); return; }
      if (!res.ok) return;
      return res.text().then(function (html) {
        const next = res.headers.get("X-Log-Next-Offset");
        const grew = next !== log.dataset.nextOffset || html.length > 0;
        if (grew) appendLog(html);
        log.dataset.nextOffset = next;
        log.dataset.nextLine = res.headers.get("X-Log-Next-Line");
        const size = document.getElementById("log-size");
        if (size) size.textContent = res.headers.get("X-Log-Size");
        if (res.headers.get("X-Log-Complete") === "true") {
          log.removeAttribute("data-live-log");
          const note = document.getElementById("log-live-note");
          if (note) note.textContent = "The job finished; this is its whole log.";
        } else if (Number(next) < Number(res.headers.get("X-Log-Size"))) {
          tailAgain = true; // more than one window arrived: keep reading
        }
      });
    }).catch(function () {}).finally(function () {
      tailBusy = false;
      if (tailAgain) { tailAgain = false; tailLog(); }
    });
  }

  // Live parts: on each notification, fetch the page's live part and put it in place.
  const live = document.getElementById("live");
  let refreshBusy = false, refreshAgain = false;
  function refresh() {
    if (!live) return;
    if (refreshBusy) { refreshAgain = true; return; }
    refreshBusy = true;
    const u = new URL(location.href);
    u.hash = "";
    u.searchParams.set("fragment", "1");
    const extra = live.dataset.fragmentQuery;
    if (extra) new URLSearchParams(extra).forEach(function (v, k) { u.searchParams.set(k, v); });
    fetch(u, { headers: { "X-Requested-With": "fetch" }, credentials: "same-origin" }).then(function (res) {
      if (res.status === 401) { location.reload(); return; }
      if (!res.ok) return;
      return res.text().then(function (html) {
        const focused = document.activeElement && live.contains(document.activeElement) && document.activeElement.id;
        live.innerHTML = html;
        if (focused) { const again = document.getElementById(focused); if (again) again.focus(); }
        tickCountdowns();
        body.dispatchEvent(new CustomEvent("jobapi:refreshed"));
      });
    }).catch(function () {}).finally(function () {
      refreshBusy = false;
      if (refreshAgain) { refreshAgain = false; refresh(); }
    });
  }

  // One stream per visible page. A browser opens at most six HTTP/1.1 connections to a
  // host, so a hidden tab gives its stream back and catches up when it is shown again.
  let es = null, opened = false;
  function connect() {
    if (es || document.visibilityState === "hidden") return;
    es = new EventSource("/events?" + body.dataset.live);
    es.addEventListener("open", function () {
      setState("live");
      body.dataset.liveConnected = "1";
      // Whatever changed while (re)connecting is fetched now.
      if (opened) { refresh(); tailLog(); }
      opened = true;
    });
    es.addEventListener("change", function () { refresh(); tailLog(); });
    es.addEventListener("error", function () { setState("live updates reconnecting…"); delete body.dataset.liveConnected; });
  }
  function disconnect() {
    if (!es) return;
    es.close();
    es = null;
    delete body.dataset.liveConnected;
    setState("live updates paused while the tab is hidden");
  }
  if (body.dataset.live && window.EventSource) {
    connect();
    document.addEventListener("visibilitychange", function () {
      if (document.visibilityState === "hidden") disconnect(); else connect();
    });
  }
  window.jobapi = { refresh: refresh, tailLog: tailLog, csrf: csrf };
})();
