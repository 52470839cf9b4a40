// Live progress of a submission page: poll its progress.json every few seconds and update the
// bar and figures in place (no reload); whenever more episodes are done, swap in the page's live
// part (episodes table, platform failures) from its sections/ fragment, and once the submission
// is no longer open fetch it a last time (now with the result per app) and stop.
(function () {
  "use strict";
  var POLL_MS = 2000;
  var box = document.querySelector("[data-testid=submission-progress]");
  if (!box || box.dataset.open !== "true") return;
  var bar = box.querySelector("progress");
  var text = box.querySelector("[data-testid=progress-text]");
  var apps = box.querySelector("[data-testid=progress-apps]");
  var times = box.querySelector("[data-testid=progress-times]");
  var status = document.querySelector("[data-testid=submission-status]");
  var cancel = document.querySelector("[data-testid=cancel-form]");
  var live = document.querySelector("[data-testid=submission-live]");
  var shownDone = live ? Number(live.dataset.done) : 0;

  function seconds(value) { return Math.round(value) + " s"; }

  function render(data) {
    bar.max = data.total;
    bar.value = data.done;
    text.textContent = data.done + "/" + data.total + " episodes done (" + Number(data.percent).toFixed(1) + "%)";
    apps.replaceChildren();
    Object.keys(data.by_app).forEach(function (appId) {
      var p = data.by_app[appId];
      var item = document.createElement("li");
      item.dataset.app = appId;
      var line = appId + ": " + p.done + "/" + p.total;
      if (p.errors) line += ", " + p.errors + " platform failure(s)";
      if (p.cancelled) line += ", " + p.cancelled + " cancelled";
      item.textContent = line;
      apps.appendChild(item);
    });
    var parts = [];
    if (data.queue_position) parts.push(data.queue_position + " submission(s) ahead in the queue");
    if (data.elapsed_s !== null) parts.push("elapsed " + seconds(data.elapsed_s));
    if (data.eta_s !== null) parts.push("about " + seconds(data.eta_s) + " left");
    times.textContent = parts.join(" · ");
    if (status) status.textContent = data.status + (data.incomplete ? " · incomplete" : "");
    if (!data.open && cancel) cancel.remove();
  }

  // Resolves once the live part shows ``data``'s state; rejects (and the next poll retries)
  // when the fragment could not be fetched.
  function refreshSections(data) {
    if (!live || (data.open && data.done === shownDone)) return Promise.resolve();
    return fetch(live.dataset.url, {headers: {Accept: "text/html"}, cache: "no-store"})
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (html) {
        live.innerHTML = html;
        shownDone = data.done;
        if (!data.open) live.dataset.state = "closed";
      });
  }

  function poll() {
    fetch(box.dataset.url, {headers: {Accept: "application/json"}, cache: "no-store"})
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (data) {
        render(data);
        return refreshSections(data).then(function () { return data; });
      })
      .then(function (data) {
        if (data.open) setTimeout(poll, POLL_MS);
      })
      .catch(function () { setTimeout(poll, POLL_MS * 2); });
  }

  setTimeout(poll, POLL_MS);
})();
