// Time-series charts (uPlot) that fetch their data from the server and refresh themselves.
//
// Markup: <figure class="chart" data-chart="URL" data-refresh="SECONDS" data-unit="UNIT"
//                 [data-y-max="100"]><figcaption>Title</figcaption></figure>
// URL answers JSON {"x": [epoch seconds], "series": [{"label": str, "values": [number|null]}],
//                   "final": bool}; "final" stops the refreshing (a job that has ended).
// After each draw the figure carries data-points (values drawn, nulls left out), which is what
// tests and screen readers can count on; a canvas alone says nothing.
"use strict";

const PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#4b5563"];

function formatValue(value, unit) {
  if (value == null || Number.isNaN(value)) return "–";
  if (unit === "bytes" || unit === "bytes/s") {
    const suffix = unit === "bytes/s" ? "/s" : "";
    for (const [name, scale] of [["Gi", 2 ** 30], ["Mi", 2 ** 20], ["Ki", 2 ** 10]]) {
      if (Math.abs(value) >= scale) return `${(value / scale).toPrecision(3)} ${name}B${suffix}`;
    }
    return `${Math.round(value)} B${suffix}`;
  }
  // Four significant digits without trailing zeros: 0.5, 12.35, 1,234 — not 0.5000.
  const text = Math.abs(value) >= 1000 ? Math.round(value).toLocaleString("en") : String(Number(value.toPrecision(4)));
  return unit ? `${text} ${unit}` : text;
}

class Chart {
  constructor(figure) {
    this.figure = figure;
    this.url = figure.dataset.chart;
    this.unit = figure.dataset.unit || "";
    this.yMax = figure.dataset.yMax ? Number(figure.dataset.yMax) : null;
    this.refresh = Number(figure.dataset.refresh || 0) * 1000;
    this.plot = null;
    this.labels = "";
    this.timer = null;
    this.holder = document.createElement("div");
    this.holder.className = "chart-plot";
    this.empty = document.createElement("p");
    this.empty.className = "chart-empty muted";
    this.empty.textContent = figure.dataset.emptyText || "No data yet.";
    figure.append(this.holder, this.empty);
    new ResizeObserver(() => this.resize()).observe(this.holder);
  }

  size() {
    return { width: Math.max(200, this.holder.clientWidth), height: Number(this.figure.dataset.height || 180) };
  }

  resize() {
    if (this.plot) this.plot.setSize(this.size());
  }

  build(payload) {
    if (this.plot) this.plot.destroy();
    const unit = this.unit;
    const series = [{}].concat(payload.series.map((line, index) => ({
      label: line.label,
      stroke: PALETTE[index % PALETTE.length],
      width: 1.5,
      spanGaps: false,
      value: (plot, value) => formatValue(value, unit),
    })));
    const range = this.yMax == null
      ? (plot, min, max) => [Math.min(0, min ?? 0), max > 0 ? max * 1.1 : 1]
      : (plot, min, max) => [0, Math.max(this.yMax, max ?? 0)];
    this.plot = new uPlot({
      ...this.size(),
      series,
      // One moment only (a job's first sample): uPlot would spread it over years; show a minute.
      scales: { x: { time: true, range: (plot, min, max) => (max - min < 1 ? [min - 30, max + 30] : [min, max]) },
                y: { range } },
      axes: [{}, { size: 70, values: (plot, ticks) => ticks.map((tick) => formatValue(tick, unit)) }],
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
    }, this.columns(payload), this.holder);
    this.labels = payload.series.map((line) => line.label).join("\n");
  }

  columns(payload) {
    return [payload.x].concat(payload.series.map((line) => line.values));
  }

  draw(payload) {
    const points = payload.series.reduce((total, line) => total + line.values.filter((v) => v != null).length, 0);
    this.empty.hidden = points > 0;
    this.holder.hidden = points === 0;
    if (points) {
      const labels = payload.series.map((line) => line.label).join("\n");
      if (!this.plot || labels !== this.labels) this.build(payload);
      else this.plot.setData(this.columns(payload));
    }
    this.figure.dataset.points = String(points);
  }

  async load() {
    let response;
    try {
      response = await fetch(this.url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    } catch (error) {
      this.figure.dataset.state = "offline";
      return this.schedule();
    }
    if (response.status === 401) {
      window.location.assign(`/login?next=${encodeURIComponent(location.pathname + location.search)}`);
      return;
    }
    if (!response.ok) {
      this.figure.dataset.state = "error";
      this.empty.textContent = `Could not load the chart (HTTP ${response.status}).`;
      this.empty.hidden = false;
      return;
    }
    const payload = await response.json();
    this.draw(payload);
    this.figure.dataset.state = payload.final ? "final" : "live";
    if (!payload.final) this.schedule();
  }

  schedule() {
    // A chart that htmx swapped out of the page stops asking.
    if (this.refresh > 0 && this.figure.isConnected) this.timer = setTimeout(() => this.load(), this.refresh);
  }

  stop() {
    clearTimeout(this.timer);
  }
}

function setUpCharts(root) {
  root.querySelectorAll("figure[data-chart]:not([data-ready])").forEach((figure) => {
    figure.dataset.ready = "";
    const chart = new Chart(figure);
    chart.load();
    window.addEventListener("pagehide", () => chart.stop());
  });
}

document.addEventListener("DOMContentLoaded", () => setUpCharts(document));
// Charts inside fragments that htmx swaps in later.
document.addEventListener("htmx:afterSettle", (event) => setUpCharts(event.target));
