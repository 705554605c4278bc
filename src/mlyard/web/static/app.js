// mlyard web UI behaviour that htmx attributes do not cover: relative times, confirmations,
// the status filter, and the live log tabs.
"use strict";

function formatDuration(seconds) {
  seconds = Math.max(0, Math.floor(seconds));
  if (seconds < 60) return `${seconds}s`;
  let minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes}m${String(seconds % 60).padStart(2, "0")}s`;
  let hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours}h${String(minutes % 60).padStart(2, "0")}m`;
  return `${Math.floor(hours / 24)}d${String(hours % 24).padStart(2, "0")}h`;
}

function refreshTimes(root) {
  const now = Date.now();
  root.querySelectorAll("time[data-relative]").forEach((element) => {
    const delta = (now - Date.parse(element.getAttribute("datetime"))) / 1000;
    if (Number.isNaN(delta)) return;
    element.textContent = Math.abs(delta) < 5 ? "just now"
      : delta > 0 ? `${formatDuration(delta)} ago` : `in ${formatDuration(-delta)}`;
  });
}

document.addEventListener("submit", (event) => {
  const question = event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
  // A search form leaves its blank fields out of the address: /jobs?status=FAILED, not …&q=&queue=.
  if (!event.defaultPrevented && event.target.getAttribute("role") === "search") {
    event.target.querySelectorAll("input, select").forEach((field) => {
      if (field.name && field.value === "") field.disabled = true;
    });
    // Back to the page (bfcache) must find the fields usable again.
    window.addEventListener("pageshow", () => event.target.querySelectorAll(":disabled").forEach((field) => {
      field.disabled = false;
    }), { once: true });
  }
});

// A log panel streams while its tab is shown; leaving the tab closes the stream and keeps its
// place, so the browser's few connections per server stay free for the rest of the page.
class LogPanel {
  constructor(panel) {
    this.panel = panel;
    this.output = panel.querySelector("pre.log");
    this.state = panel.querySelector("[data-log-state]");
    this.attempt = null;
    this.offset = 0;
    this.done = false;
    this.source = null;
  }

  open() {
    if (this.done || this.source) return;
    let url = this.panel.dataset.stream;
    if (this.attempt) url += `&attempt=${this.attempt}&offset=${this.offset}`;
    this.source = new EventSource(url);
    this.state.textContent = "waiting for output…";
    this.source.addEventListener("log", (event) => {
      const data = JSON.parse(event.data);
      const [attempt, offset] = event.lastEventId.split(":");
      this.attempt = Number(attempt);
      this.offset = Number(offset);
      const atBottom = this.output.scrollHeight - this.output.scrollTop - this.output.clientHeight < 40;
      this.output.append(data.text);
      if (atBottom) this.output.scrollTop = this.output.scrollHeight;
      this.state.textContent = `attempt ${data.attempt} · live`;
    });
    this.source.addEventListener("end", (event) => {
      const data = JSON.parse(event.data);
      this.done = true;
      this.close();
      this.state.textContent = data.attempt ? `attempt ${data.attempt} · complete` : "no output: the job never started";
    });
    this.source.addEventListener("failure", (event) => {
      this.done = true;
      this.close();
      this.state.textContent = JSON.parse(event.data).message;
    });
    this.source.onerror = () => {
      if (this.done) return;
      // A refused stream (429: too many open, 401) is not retried by the browser.
      if (this.source && this.source.readyState === EventSource.CLOSED) {
        this.close();
        this.state.textContent = "the live log is not available now (too many open?); reload the page later";
      } else {
        this.state.textContent = "reconnecting…";
      }
    };
  }

  close() {
    if (this.source) this.source.close();
    this.source = null;
  }
}

function setUpTabs(list) {
  const tabs = Array.from(list.querySelectorAll('[role="tab"]'));
  const panels = new Map(tabs.map((tab) => {
    const element = document.getElementById(tab.getAttribute("aria-controls"));
    return [tab, new LogPanel(element)];
  }));
  const select = (chosen, focus) => {
    for (const tab of tabs) {
      const selected = tab === chosen;
      tab.setAttribute("aria-selected", String(selected));
      tab.tabIndex = selected ? 0 : -1;
      panels.get(tab).panel.hidden = !selected;
      if (!selected) panels.get(tab).close();
    }
    panels.get(chosen).open();
    if (focus) chosen.focus();
  };
  tabs.forEach((tab, index) => {
    tab.addEventListener("click", () => select(tab, false));
    tab.addEventListener("keydown", (event) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (step) select(tabs[(index + step + tabs.length) % tabs.length], true);
      if (event.key === "Home") select(tabs[0], true);
      if (event.key === "End") select(tabs[tabs.length - 1], true);
    });
  });
  if (tabs.length) select(tabs[0], false);
  window.addEventListener("pagehide", () => panels.forEach((panel) => panel.close()));
}

// Ctrl+Enter (Cmd+Enter) in an editor submits its form, as in most code review and chat tools.
document.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && event.target.matches("[data-submit-shortcut]")) {
    event.preventDefault();
    event.target.form.requestSubmit();
  }
});

// The Content-Security-Policy refuses style attributes in markup; styles set from a script
// are allowed, so sizes come as data attributes.
function applySizes(root) {
  root.querySelectorAll("[data-width-percent]").forEach((element) => {
    element.style.width = `${Number(element.dataset.widthPercent)}%`;
  });
  root.querySelectorAll("[data-left-percent]").forEach((element) => {
    element.style.left = `${Number(element.dataset.leftPercent)}%`;
  });
}

document.addEventListener("htmx:afterSettle", (event) => applySizes(event.target));

document.addEventListener("DOMContentLoaded", () => {
  applySizes(document);
  document.querySelectorAll("select[data-autosubmit]").forEach((select) => {
    select.addEventListener("change", () => select.form.requestSubmit());
  });
  document.querySelectorAll('[role="tablist"]').forEach(setUpTabs);
  refreshTimes(document);
  setInterval(() => refreshTimes(document), 10000);
});
