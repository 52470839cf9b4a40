/* Leaderboard page: draw the Plotly charts, sort the tables, compare chosen agents.
 *
 * - Charts: every <div data-chart data-source=ID> is drawn from the JSON in <script id=ID>.
 *   The mode bar is vertical on the right (layout.modebar) so it never covers the title.
 * - Sorting: each <th data-sort> gets a button (so Tab reaches it and Enter or Space
 *   presses it); pressing it orders the rows by each cell's data-value (numbers, or text
 *   with data-type="text"); the first press uses the column's better direction
 *   (data-better="higher" sorts descending), the next reverses it. Empty values last.
 * - Selection: ticking agents' checkboxes redraws every chart of the section with only their
 *   traces (each trace's `meta` is its agent id); none ticked shows every listed agent.
 *   The ticked ids are mirrored in the address (?agents=1,2) so a comparison can be shared.
 */
(function () {
  "use strict";

  const CONFIG = { displaylogo: false, responsive: true, displayModeBar: "hover" };

  const figures = new Map();  // chart div -> its full figure (every listed agent)

  function drawCharts(section) {
    for (const div of section.querySelectorAll("div[data-chart]")) {
      const source = document.getElementById(div.dataset.source);
      if (!source) continue;
      const fig = JSON.parse(source.textContent);
      figures.set(div, fig);
      Plotly.newPlot(div, fig.data, fig.layout, CONFIG);
    }
  }

  /* Redraw a chart with the chosen agents' traces only (all of them when none is chosen);
   * the interval chart also shrinks to the rows it keeps. */
  function drawChosen(div, chosen) {
    const fig = figures.get(div);
    if (!fig) return;
    const data = chosen.size === 0
      ? fig.data
      : fig.data.filter((trace) => chosen.has(String(trace.meta)));
    const layout = Object.assign({}, fig.layout);
    if (div.dataset.chart === "ci") layout.height = 120 + 32 * Math.max(1, data.length);
    Plotly.react(div, data, layout, CONFIG);
  }

  function selectedIds(section) {
    return new Set(
      Array.from(section.querySelectorAll("input.pick:checked"), (box) => box.value)
    );
  }

  function applySelection(section) {
    const chosen = selectedIds(section);
    for (const div of section.querySelectorAll("div[data-chart]")) drawChosen(div, chosen);
    const status = section.querySelector(".selection-status");
    if (status) {
      status.textContent = chosen.size === 0
        ? "Showing every listed agent in the charts."
        : "Comparing " + chosen.size + " ticked agent" + (chosen.size === 1 ? "" : "s") + ".";
    }
    const all = new Set();
    for (const other of document.querySelectorAll("section.board")) {
      for (const id of selectedIds(other)) all.add(id);
    }
    const url = new URL(window.location.href);
    if (all.size) url.searchParams.set("agents", Array.from(all).join(","));
    else url.searchParams.delete("agents");
    window.history.replaceState(null, "", url);
  }

  function cellKey(row, index, isText) {
    const raw = row.cells[index].dataset.value;
    if (raw === undefined || raw === "") return null;
    return isText ? raw.toLowerCase() : parseFloat(raw);
  }

  function sortBy(table, th) {
    const index = Array.prototype.indexOf.call(th.parentNode.children, th);
    const isText = th.dataset.type === "text";
    let ascending;
    if (th.getAttribute("aria-sort") === "ascending") ascending = false;
    else if (th.getAttribute("aria-sort") === "descending") ascending = true;
    else ascending = isText || th.dataset.better !== "higher";
    for (const other of th.parentNode.children) other.removeAttribute("aria-sort");
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    rows.sort((a, b) => {
      const x = cellKey(a, index, isText);
      const y = cellKey(b, index, isText);
      if (x === null && y === null) return 0;
      if (x === null) return 1;
      if (y === null) return -1;
      const order = x < y ? -1 : x > y ? 1 : 0;
      return ascending ? order : -order;
    });
    for (const row of rows) body.appendChild(row);
  }

  function markHeaders(table) {
    for (const th of table.querySelectorAll("th[data-sort]")) {
      const mark = document.createElement("span");
      mark.className = "better";
      if (th.dataset.better === "higher") {
        mark.textContent = " ▲";
        mark.title = "higher is better";
      } else if (th.dataset.better === "lower") {
        mark.textContent = " ▼";
        mark.title = "lower is better";
      }
      const button = document.createElement("button");
      button.type = "button";
      button.className = "sort";
      while (th.firstChild) button.appendChild(th.firstChild);
      button.appendChild(mark);
      th.appendChild(button);
      th.classList.add("sort-key");
      th.addEventListener("click", () => sortBy(table, th));
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    for (const section of document.querySelectorAll("section.board")) {
      const table = section.querySelector("table.sortable");
      if (table) markHeaders(table);
      drawCharts(section);
      for (const box of section.querySelectorAll("input.pick")) {
        box.addEventListener("change", () => applySelection(section));
      }
      const clear = section.querySelector(".clear-selection");
      if (clear) {
        clear.addEventListener("click", () => {
          for (const box of section.querySelectorAll("input.pick")) box.checked = false;
          applySelection(section);
        });
      }
      if (selectedIds(section).size) applySelection(section);
    }
  });
})();
