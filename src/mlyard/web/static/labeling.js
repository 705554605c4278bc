// The labeling page (web/labeling_work.py): one item large in the middle, the classes as buttons
// with number-key shortcuts (1…9, 0 for the tenth), arrows for the previous and next item in the
// task's order, undo, Enter to submit, and boxes drawn and adjusted with the mouse through the
// vendored Annotorious. Every change is saved as it is made (a draft until submitted), so a
// browser closed mid-task loses at most the request in flight; the item after the current one is
// fetched and its image loaded ahead of time.
"use strict";

(() => {
  const root = document.getElementById("labeler");
  if (!root) return;
  const setup = JSON.parse(root.dataset.setup);
  const base = `/labeling/${setup.task}`;
  const csrf = document.body.getAttribute("hx-headers") ? JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRF-Token"] : "";
  const kind = setup.kind;
  const classes = setup.classes;
  const palette = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#65a30d", "#9333ea", "#ea580c"];
  const $ = (id) => document.getElementById(id);
  const stage = $("stage");
  const status = $("labeler-status");

  let item = null;          // the item shown, as the server drew it
  let chosen = [];          // the labels chosen for it (classification, multilabel, text)
  let current = classes[0]; // the class new boxes get
  let annotator = null;     // Annotorious, on a box task's image
  const boxLabels = new Map();
  const undone = [];        // {item, before}: what a classification undo restores
  const preloaded = new Map();
  let busy = Promise.resolve();

  function say(text, tone) {
    status.textContent = text;
    status.dataset.tone = tone || "";
  }

  async function call(method, url, body) {
    const response = await fetch(url, {
      method, credentials: "same-origin", redirect: "manual",
      headers: body === undefined ? {} : { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    // An ended session is a redirect to the login page: never read as "nothing left".
    if (response.type === "opaqueredirect" || !(response.headers.get("Content-Type") || "").includes("json")) {
      throw new Error("Your session has ended or the page is out of date: reload the page (what is saved stays)");
    }
    const answer = await response.json().catch(() => ({ error: `the server answered ${response.status}` }));
    if (!response.ok) throw new Error(answer.error || `the server answered ${response.status}`);
    return answer;
  }

  function showProgress(progress) {
    if (!progress) return;
    const mine = progress.mine === null || progress.mine === undefined ? progress.done : progress.mine;
    const bar = $("labeler-progress");
    bar.max = progress.items;
    bar.value = mine;
    $("progress-text").textContent = `${mine} of ${progress.items} labeled by you · ${progress.done} done in all`;
  }

  function own(shown) {
    return shown ? shown.annotations.find((annotation) => annotation.user === setup.user) || null : null;
  }

  // What the item starts as: the user's own annotation, else the labels imported into the task.
  function startingLabels(shown) {
    const mine = own(shown);
    if (mine) return { labels: mine.labels.slice(), boxes: mine.boxes.slice() };
    if (shown.prefill) return { labels: (shown.prefill.labels || []).slice(), boxes: (shown.prefill.boxes || []).slice() };
    return { labels: [], boxes: [] };
  }

  function drawButtons() {
    document.querySelectorAll("#classes button[data-class]").forEach((button) => {
      const name = button.dataset.class;
      const on = kind === "boxes" ? name === current : chosen.includes(name);
      button.setAttribute("aria-pressed", on ? "true" : "false");
    });
  }

  function drawBoxList() {
    const list = $("box-list");
    if (!list || !annotator) return;
    list.replaceChildren(...annotator.getAnnotations().map((annotation) => {
      const entry = document.createElement("li");
      entry.textContent = boxLabels.get(annotation.id) || current;
      entry.dataset.classIndex = String(classes.indexOf(entry.textContent));
      return entry;
    }));
  }

  function destroyAnnotator() {
    if (annotator) {
      annotator.destroy();
      annotator = null;
    }
    boxLabels.clear();
  }

  // Each box in its class's colour. Annotorious' own styles are inline attributes, which the
  // Content-Security-Policy refuses; rules added to a stylesheet through the CSSOM are allowed.
  const colours = new CSSStyleSheet();
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, colours];

  function colourOf(label) {
    return palette[Math.max(0, classes.indexOf(label)) % palette.length];
  }

  function paint() {
    const rules = [];
    boxLabels.forEach((label, id) => {
      const colour = colourOf(label);
      // More specific than the library's own `div[data-theme] .a9s-annotationlayer .a9s-inner`.
      rules.push(`div .a9s-annotationlayer g[data-id="${CSS.escape(id)}"] .a9s-inner { stroke: ${colour}; stroke-width: 2px; fill: ${colour}; fill-opacity: 0.15; }`);
    });
    classes.forEach((label, index) => {
      rules.push(`#box-list li[data-class-index="${index}"]::marker { color: ${colourOf(label)}; }`);
      rules.push(`#classes button[data-class-index="${index}"] kbd { border-color: ${colourOf(label)}; }`);
    });
    colours.replaceSync(rules.join("\n"));
  }

  // Boxes are stored in the original image's pixels; the page shows a rendition at most 1024 wide.
  function scale(image) {
    if (!item.size || !image.naturalWidth) return { x: 1, y: 1 };
    return { x: item.size[0] / image.naturalWidth, y: item.size[1] / image.naturalHeight };
  }

  function startAnnotator(image, boxes) {
    const factor = scale(image);
    // autoSave: an update on every move and resize, not only when the box is let go of.
    annotator = Annotorious.createImageAnnotator(image, { drawingEnabled: true, drawingMode: "drag", autoSave: true });
    annotator.setDrawingTool("rectangle");
    annotator.setAnnotations(boxes.map((box, index) => {
      const id = `box-${item.id}-${index}`;
      boxLabels.set(id, box.label);
      const x = box.x / factor.x, y = box.y / factor.y, w = box.width / factor.x, h = box.height / factor.y;
      return { id, bodies: [], target: { annotation: id, selector: { type: "RECTANGLE",
        geometry: { x, y, w, h, bounds: { minX: x, minY: y, maxX: x + w, maxY: y + h } } } } };
    }), true);
    // A deleted box keeps its class here, so that undoing the deletion brings it back as it was.
    annotator.on("createAnnotation", (annotation) => {
      if (!boxLabels.has(annotation.id)) boxLabels.set(annotation.id, current);
      changed();
    });
    annotator.on("updateAnnotation", changed);
    annotator.on("deleteAnnotation", changed);
    drawBoxList();
    paint();
  }

  function currentBoxes() {
    const image = $("item-image");
    const factor = scale(image);
    const limit = item.size || [image.naturalWidth, image.naturalHeight];
    return annotator.getAnnotations().map((annotation) => {
      const geometry = annotation.target.selector.geometry;
      // Clipped to the image on every side: what lies outside it is no part of the box.
      const left = Math.max(0, geometry.x * factor.x), top = Math.max(0, geometry.y * factor.y);
      const right = Math.min(limit[0], (geometry.x + geometry.w) * factor.x);
      const bottom = Math.min(limit[1], (geometry.y + geometry.h) * factor.y);
      return { label: boxLabels.get(annotation.id) || current, x: left, y: top, width: right - left, height: bottom - top };
    }).filter((box) => box.width > 0.5 && box.height > 0.5);
  }

  function changed() {
    paint();
    drawBoxList();
    save("draft");
  }

  function showRejection(shown) {
    const note = $("item-rejection");
    const mine = own(shown);
    if (mine && mine.status === "rejected") {
      note.textContent = `Rejected by ${mine.reviewed_by || "a reviewer"}: ${mine.comment}`;
      note.hidden = false;
    } else {
      note.hidden = true;
    }
  }

  function show(shown) {
    destroyAnnotator();
    item = shown;
    $("labeler-done").hidden = Boolean(shown);
    $("labeler-work").hidden = !shown;
    if (!shown) {
      root.dataset.item = root.dataset.ready = "";
      return;
    }
    const start = startingLabels(shown);
    chosen = start.labels;
    $("item-path").textContent = shown.line === null ? shown.path : `${shown.path}, line ${shown.line + 1}`;
    $("item-position").textContent = `item ${shown.position + 1}`;
    const mine = own(shown);
    $("item-state").textContent = mine ? mine.status : shown.prefill ? "pre-filled" : "new";
    root.dataset.item = String(shown.id);
    root.dataset.position = String(shown.position);
    showRejection(shown);
    if (kind === "text") {
      const text = document.createElement("pre");
      text.id = "item-text";
      text.textContent = shown.text;
      stage.replaceChildren(text);
    } else {
      const image = document.createElement("img");
      image.id = "item-image";
      image.alt = shown.path;
      image.draggable = false;
      stage.replaceChildren(image);
      root.dataset.ready = "";
      image.addEventListener("load", () => {
        if (kind === "boxes" && item === shown) startAnnotator(image, start.boxes);
        root.dataset.ready = String(shown.id);
      }, { once: true });
      image.src = shown.image;
    }
    if (kind === "text") root.dataset.ready = String(shown.id);
    drawButtons();
    preloadAfter(shown.position);
  }

  // The item after this one in order is usually the next one to label: its image loads now.
  async function preloadAfter(position) {
    try {
      const answer = await call("GET", `${base}/at.json?position=${position + 1}`);
      if (answer.item && answer.item.image && !preloaded.has(answer.item.image)) {
        const image = new Image();
        image.src = answer.item.image;
        preloaded.set(answer.item.image, image);
        if (preloaded.size > 20) preloaded.delete(preloaded.keys().next().value);
      }
      root.dataset.preloaded = answer.item ? String(answer.item.id) : "none";
    } catch (error) {
      root.dataset.preloaded = "failed";
    }
  }

  function queue(work) {
    busy = busy.then(work).catch((error) => say(error.message, "error"));
    return busy;
  }

  function save(state, labels, options) {
    const shown = item;
    if (kind === "boxes" && !annotator) {
      say("The image has not loaded: nothing to save yet", "error");
      return busy;
    }
    const body = kind === "boxes" ? { labels: [], boxes: currentBoxes(), status: state }
      : { labels: labels || chosen.slice(), boxes: [], status: state };
    // Progress is counted over the whole task: asked for on submits and undos, not on every drag.
    const progress = state === "submitted" || (options && options.progress) ? "?progress=1" : "";
    return queue(async () => {
      say("Saving…");
      const answer = await call("PUT", `${base}/items/${shown.id}/annotation.json${progress}`, body);
      shown.annotations = [answer.annotation];
      if (item === shown) $("item-state").textContent = answer.annotation.status;
      showProgress(answer.progress);
      say(`Saved (${answer.annotation.status})`, "saved");
    });
  }

  function go(url) {
    return queue(async () => {
      const answer = await call("GET", url);
      if (answer.progress) showProgress(answer.progress);
      if (answer.item || url.endsWith("next.json")) show(answer.item);
    });
  }

  function nextToLabel() {
    return go(`${base}/next.json`);
  }

  // What an undo restores: the item's labels as they were, never a reviewer's "rejected" (it
  // would go back to review unchanged) and, for an item never labeled, its pre-fill.
  function remember() {
    const mine = own(item);
    const start = mine ? { labels: mine.labels.slice(), status: mine.status === "submitted" ? "submitted" : "draft" }
      : { labels: item.prefill ? (item.prefill.labels || []).slice() : [], status: "draft" };
    undone.push({ item, before: start });
    if (undone.length > 100) undone.shift();
  }

  // Leaves the item with what is on screen saved: a box still selected is let go of first.
  function settle() {
    if (annotator) annotator.cancelSelected();
  }

  function submit(labels) {
    if (!item) return;
    if ((kind === "classification" || kind === "text") && !(labels || chosen).length) {
      say("Choose a class first", "error");
      return;
    }
    if (kind === "boxes" && !annotator) {
      say("The image has not loaded (or cannot be shown): nothing to submit; → skips it", "error");
      return;
    }
    settle();
    if (kind !== "boxes") remember();
    save("submitted", labels);
    nextToLabel();
  }

  function choose(label) {
    if (!item) return;
    if (kind === "boxes") {
      current = label;
      const selected = annotator ? annotator.getSelected() : [];
      selected.forEach((annotation) => boxLabels.set(annotation.id, label));
      drawButtons();
      if (selected.length) changed();
    } else if (kind === "multilabel") {
      remember();
      chosen = chosen.includes(label) ? chosen.filter((name) => name !== label) : chosen.concat([label]);
      drawButtons();
      save("draft");
    } else {
      chosen = [label];
      drawButtons();
      submit([label]);
    }
  }

  function undo() {
    if (kind === "boxes") {
      if (annotator && annotator.canUndo()) annotator.undo();
      return;
    }
    const last = undone.pop();
    if (!last) {
      say("Nothing to undo");
      return;
    }
    queue(async () => {
      const body = { labels: last.before.labels, boxes: [], status: last.before.status };
      const answer = await call("PUT", `${base}/items/${last.item.id}/annotation.json?progress=1`, body);
      last.item.annotations = [answer.annotation];
      showProgress(answer.progress);
      show(last.item);
      say("Undone", "saved");
    });
  }

  function step(offset) {
    if (!item) return;
    const position = item.position + offset;
    if (position < 0) return;
    settle();
    go(`${base}/at.json?position=${position}`);
  }

  function removeSelected() {
    if (!annotator) return;
    const selected = annotator.getSelected();
    if (!selected.length) return;
    selected.forEach((annotation) => annotator.removeAnnotation(annotation.id));
    changed();
  }

  document.querySelectorAll("#classes button[data-class]").forEach((button) => {
    button.addEventListener("click", () => choose(button.dataset.class));
  });
  $("previous").addEventListener("click", () => step(-1));
  $("next").addEventListener("click", () => step(1));
  $("undo").addEventListener("click", undo);
  $("submit").addEventListener("click", () => submit());
  if ($("remove-box")) $("remove-box").addEventListener("click", removeSelected);

  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input, textarea, select") || event.altKey || event.metaKey) return;
    if (event.ctrlKey) {
      if (event.key === "z" && kind !== "boxes") { event.preventDefault(); undo(); }
      return;  // Annotorious takes Ctrl+Z itself for boxes
    }
    if (/^[0-9]$/.test(event.key)) {
      const index = event.key === "0" ? 9 : Number(event.key) - 1;
      if (index < classes.length) { event.preventDefault(); choose(classes[index]); }
    } else if (event.key === "ArrowLeft") { event.preventDefault(); step(-1);
    } else if (event.key === "ArrowRight") { event.preventDefault(); step(1);
    } else if (event.key === "Enter" && !event.target.closest("button")) { event.preventDefault(); submit();
    } else if (event.key === "z" || event.key === "u") { event.preventDefault(); undo();
    } else if ((event.key === "Delete" || event.key === "Backspace") && kind === "boxes") { event.preventDefault(); removeSelected();
    } else if (event.key === "Escape" && annotator) { annotator.cancelSelected(); }
  });

  showProgress(setup.progress);
  nextToLabel();
})();
