// The encoder walk-through page (opennmt_lite/inspection/html.py): draws every step of the JSON
// block #inspect-data. Small tensors become HTML tables (every value, exact value on hover and
// in data-v), larger ones canvases (value on hover). When done, <body data-status> is "ok";
// a script error sets it to "error" and is written into #script-errors.
"use strict";
(function () {
  var errors = [];
  function fail(message) {
    errors.push(message);
    var pre = document.getElementById("script-errors");
    pre.hidden = false;
    pre.textContent = "Script error:\n" + errors.join("\n");
    document.body.setAttribute("data-status", "error");
  }
  window.addEventListener("error", function (event) { fail(String(event.message || event)); });

  var DATA = JSON.parse(document.getElementById("inspect-data").textContent);
  var MASKED = -1e30;     // float32.min marks a masked logit
  var TABLE_LIMIT = 16;   // rows and columns drawn as a table when the values are exact
  var selected = 0;       // the sentence shown in the attention and alignment overviews

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      if (key === "text") node.textContent = attrs[key]; else node.setAttribute(key, attrs[key]);
    });
    (children || []).forEach(function (child) {
      if (child !== null && child !== undefined)
        node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    });
    return node;
  }
  function anchor(name) { return "step-" + name.replace(/[^A-Za-z0-9_]+/g, "-"); }
  function fmt(v) {
    if (v === null) return "NaN";
    if (v <= MASKED) return "min";
    if (Number.isInteger(v) && Math.abs(v) < 1e6) return String(v);
    return String(Number(v.toPrecision(3)));
  }
  function product(list) { return list.reduce(function (a, b) { return a * b; }, 1); }

  // ---- tensors ---------------------------------------------------------------------------
  function Tensor(step) {
    var t = step.tensor;
    this.t = t;
    this.kind = step.kind;
    this.axes = t.display.map(function (a) { return t.axes[a]; });
    while (this.axes.length < 2) this.axes.unshift("");
    this.leadAxes = this.axes.slice(0, -2);
    if (t.values) {
      this.panels = product(t.lead); this.rows = t.rows; this.cols = t.cols;
      var shown = t.values.filter(function (v) { return v !== null && v > MASKED; });
      this.lo = shown.length ? Math.min.apply(null, shown) : 0;
      this.hi = shown.length ? Math.max.apply(null, shown) : 0;
    } else {
      var p = t.preview, raw = atob(p.bytes);
      this.codes = new Uint8Array(raw.length);
      for (var i = 0; i < raw.length; i++) this.codes[i] = raw.charCodeAt(i);
      this.panels = p.panels; this.rows = p.rows; this.cols = p.cols; this.lo = p.lo; this.hi = p.hi;
      this.level = (p.hi - p.lo) / 254;  // the value of one quantization level
    }
    if (step.kind !== "tensor" || /\/mask$/.test(step.name)) {
      this.lo = Math.min(this.lo, 0); this.hi = Math.max(this.hi, 1);  // colour scale of probabilities, the mask
    }
  }
  Tensor.prototype.leadIndex = function (panel) {  // panel number -> index on each leading axis
    var index = [], lead = this.t.lead;
    for (var k = lead.length - 1; k >= 0; k--) { index.unshift(panel % lead[k]); panel = Math.floor(panel / lead[k]); }
    return index;
  };
  Tensor.prototype.get = function (panel, r, c) {  // {v, index (exact values only), masked}
    var t = this.t, n = t.strides.length;
    if (t.values) {
      var lead = this.leadIndex(panel), index = r * t.strides[n - 2] + c * t.strides[n - 1];
      for (var k = 0; k < lead.length; k++) index += lead[k] * t.strides[k];
      var v = t.values[index];
      return {v: v, index: index, masked: v !== null && v <= MASKED};
    }
    var code = this.codes[(panel * this.rows + r) * this.cols + c];
    return {v: this.t.preview.lo + code * this.level, index: null, masked: code === 255};
  };
  Tensor.prototype.batchOf = function (panel) {
    var k = this.leadAxes.indexOf("batch");
    return k < 0 ? undefined : this.leadIndex(panel)[k];
  };

  function label(axis, i, batch) {
    if (axis === "batch") return "sentence " + i;
    if (axis === "head") return "head " + i;
    if ((axis === "time" || axis === "query" || axis === "key") && batch !== undefined) {
      var source = DATA.sources[batch];
      return i < source.length ? source.tokens[i] : "(pad)";
    }
    if (axis === "target" && batch !== undefined && DATA.targets) {
      var target = DATA.targets[batch].tokens;
      return i < target.length ? target[i] : "(pad)";
    }
    return String(i);
  }

  // Colours: white to dark blue for non-negative values, blue-white-red around 0 otherwise.
  function colour(tensor, v) {
    var lo = tensor.lo, hi = tensor.hi, x, r, g, b;
    if (lo < 0 && hi > 0) {
      x = v / Math.max(-lo, hi);
      if (x < 0) { r = 255 + x * 196; g = 255 + x * 160; b = 255 + x * 10; }
      else { r = 255 - x * 75; g = 255 - x * 230; b = 255 - x * 220; }
    } else {
      x = hi > lo ? (v - lo) / (hi - lo) : 0;
      r = 255 - x * 247; g = 255 - x * 207; b = 255 - x * 148;
    }
    return "rgb(" + Math.round(r) + "," + Math.round(g) + "," + Math.round(b) + ")";
  }
  function dark(tensor, v) {
    var lo = tensor.lo, hi = tensor.hi;
    return lo < 0 && hi > 0 ? Math.abs(v) / Math.max(-lo, hi) > 0.6 : hi > lo && (v - lo) / (hi - lo) > 0.55;
  }

  // ---- one panel: a table or a canvas -----------------------------------------------------
  function panelLabels(tensor, panel, r, c) {
    var batch = tensor.batchOf(panel);
    var rowBatch = tensor.axes[tensor.axes.length - 2] === "batch" ? r : batch;
    return [label(tensor.axes[tensor.axes.length - 2], r, batch),
            label(tensor.axes[tensor.axes.length - 1], c, rowBatch)];
  }
  function hover(tensor, panel, r, c, cell) {
    var names = panelLabels(tensor, panel, r, c), axes = tensor.axes.slice(-2);
    var value = cell.masked ? "float32.min (masked)" : (cell.index === null ? "≈ " : "") + String(cell.v);
    return axes[0] + " " + r + " (" + names[0] + "), " + axes[1] + " " + c + " (" + names[1] + "): " + value;
  }
  function table(tensor, panel) {
    var rowAxis = tensor.axes[tensor.axes.length - 2], colAxis = tensor.axes[tensor.axes.length - 1];
    var batch = tensor.batchOf(panel);
    var head = el("tr", {}, [el("th", {"class": "corner", text: rowAxis + " \\ " + colAxis})]);
    for (var c = 0; c < tensor.cols; c++) head.appendChild(el("th", {text: label(colAxis, c, batch)}));
    var rows = [head];
    for (var r = 0; r < tensor.rows; r++) {
      var tr = el("tr", {}, [el("th", {text: label(rowAxis, r, batch)})]);
      for (c = 0; c < tensor.cols; c++) {
        var cell = tensor.get(panel, r, c);
        var td = el("td", {"data-index": cell.index, "data-v": cell.v === null ? "NaN" : String(cell.v),
                           title: hover(tensor, panel, r, c, cell), text: fmt(cell.v)});
        if (cell.masked) td.className = "masked";
        else if (cell.v !== null) {
          td.style.background = colour(tensor, cell.v);
          if (dark(tensor, cell.v)) td.className = "dark";
        }
        tr.appendChild(td);
      }
      rows.push(tr);
    }
    return el("table", {"class": "heat"}, rows);
  }
  function canvas(tensor, panel) {
    var rowAxis = tensor.axes[tensor.axes.length - 2], colAxis = tensor.axes[tensor.axes.length - 1];
    var batch = tensor.batchOf(panel);
    var size = Math.max(2, Math.min(14, Math.floor(480 / Math.max(tensor.cols, tensor.rows))));
    var rowLabels = tensor.rows <= 80, colLabels = tensor.cols <= 80;
    function width(axis, count) {  // pixels for the longest of `count` labels (10 characters at most)
      var longest = 0;
      for (var i = 0; i < count; i++) longest = Math.max(longest, Math.min(10, label(axis, i, batch).length));
      return 6 * longest + 8;
    }
    var left = rowLabels ? width(rowAxis, tensor.rows) : 4, top = colLabels ? width(colAxis, tensor.cols) : 4;
    var node = el("canvas", {width: left + tensor.cols * size + 4, height: top + tensor.rows * size + 4});
    var g = node.getContext("2d");
    g.font = Math.max(8, Math.min(11, size + 2)) + "px sans-serif";
    g.fillStyle = "#222";
    if (rowLabels) {
      g.textAlign = "right"; g.textBaseline = "middle";
      for (var r = 0; r < tensor.rows; r++) g.fillText(label(rowAxis, r, batch).slice(0, 10), left - 3, top + (r + 0.5) * size);
    }
    if (colLabels) {
      g.textAlign = "left"; g.textBaseline = "middle";
      for (var c = 0; c < tensor.cols; c++) {
        g.save(); g.translate(left + (c + 0.5) * size, top - 3); g.rotate(-Math.PI / 2);
        g.fillText(label(colAxis, c, batch).slice(0, 10), 0, 0); g.restore();
      }
    }
    for (r = 0; r < tensor.rows; r++) {
      for (c = 0; c < tensor.cols; c++) {
        var cell = tensor.get(panel, r, c);
        g.fillStyle = cell.masked ? "#999" : colour(tensor, cell.v);
        g.fillRect(left + c * size, top + r * size, size, size);
        if (cell.masked && size >= 4) {
          g.strokeStyle = "#555"; g.beginPath();
          g.moveTo(left + c * size, top + (r + 1) * size); g.lineTo(left + (c + 1) * size, top + r * size); g.stroke();
        }
      }
    }
    node.addEventListener("mousemove", function (event) {
      var box = node.getBoundingClientRect();
      var c = Math.floor((event.clientX - box.left - left) / size), r = Math.floor((event.clientY - box.top - top) / size);
      node.title = r >= 0 && c >= 0 && r < tensor.rows && c < tensor.cols ? hover(tensor, panel, r, c, tensor.get(panel, r, c)) : "";
    });
    return node;
  }
  function figure(tensor, panel, className) {
    var lead = tensor.leadIndex(panel), caption = [];
    for (var k = 0; k < lead.length; k++) {
      var axis = tensor.leadAxes[k], text = label(axis, lead[k]);
      if (axis !== "batch" && axis !== "head") text = axis + " " + text;
      if (axis === "batch") {
        var sentence = DATA.sources[lead[k]].tokens.join(" ");
        text += ": " + (sentence.length > 40 ? sentence.slice(0, 40) + "…" : sentence);
      }
      caption.push(text);
    }
    var small = tensor.t.values && tensor.rows <= TABLE_LIMIT && tensor.cols <= TABLE_LIMIT;
    return el("figure", {"class": "panel " + (className || ""), "data-panel": panel},
              [caption.length ? el("figcaption", {text: caption.join(" · ")}) : null,
               small ? table(tensor, panel) : canvas(tensor, panel)]);
  }

  // ---- steps -------------------------------------------------------------------------------
  var number = 0;
  function header(step) {
    var t = step.tensor, parts = [step.name];
    var children = [el("h3", {}, [el("span", {"class": "number", text: step.kind === "note" ? "" : String(++number)}), step.title]),
                    el("code", {"class": "equation", text: step.equation})];
    if (t) {
      parts.push("shape [" + t.shape.join(", ") + "]", t.dtype);
      if (t.stats) ["min", "max", "mean", "std"].forEach(function (key) {
        parts.push(key + " " + Number(t.stats[key].toPrecision(4)));  // float32.min too, as a number
      });
      parts.push("axes: " + t.display.map(function (a) { return t.axes[a]; }).join(" × "));
      children.push(el("div", {"class": "meta", text: parts.join(" · ")}));
      if (t.preview) {
        var full = t.display.map(function (a) { return t.shape[a]; });
        children.push(el("div", {"class": "summary", text: "Large tensor, summarised: drawn from its first " +
          t.preview.panels + " of " + product(t.lead) + " panels, " + t.preview.rows + " of " + t.rows + " rows and " +
          t.preview.cols + " of " + t.cols + " columns (display shape [" + full.join(", ") + "]), colours quantized " +
          "to 255 levels; the statistics above cover every value."}));
      }
    }
    return children;
  }
  function stepSection(step) {
    var children = header(step);
    if (step.tensor) {
      var tensor = new Tensor(step), panels = el("div", {"class": "panels"});
      for (var p = 0; p < tensor.panels; p++) panels.appendChild(figure(tensor, p, step.kind === "attention" ? "attention-panel" : ""));
      children.push(panels);
    }
    return el("section", {"class": "step " + step.kind, id: anchor(step.name), "data-step": step.name, "data-kind": step.kind}, children);
  }

  // The maps of one sentence: one row per layer, one map per head.
  function overview(kind, className) {
    var box = el("div", {"class": "overview"});
    DATA.steps.filter(function (s) { return s.kind === kind; }).forEach(function (step) {
      var tensor = new Tensor(step), heads = step.tensor.lead[1], row = el("div", {"class": "panels"});
      var layer = step.group.split(" ")[1];
      for (var h = 0; h < heads; h++) {
        var map = figure(tensor, selected * heads + h, className);
        map.setAttribute("data-layer", layer); map.setAttribute("data-head", h);
        row.appendChild(map);
      }
      box.appendChild(el("h4", {}, [el("a", {href: "#" + anchor(step.name), text: "layer " + layer}), " — " + step.title]));
      box.appendChild(el("code", {"class": "equation", text: step.equation}));
      box.appendChild(row);
    });
    return box;
  }

  function intro() {
    var about = DATA.about, rows = [];
    Object.keys(about.model || {}).forEach(function (key) {
      rows.push(el("tr", {}, [el("th", {text: key}), el("td", {text: String(about.model[key])})]));
    });
    var sources = DATA.sources.map(function (s, b) {
      var target = DATA.targets ? DATA.targets[b] : null;
      return el("tr", {}, [el("th", {text: "sentence " + b}), el("td", {text: s.tokens.join(" ")}),
                           el("td", {text: s.ids.join(" ")}), el("td", {text: String(s.length)}),
                           el("td", {text: target ? target.tokens.join(" ") + (target.finished ? "" : " …") : ""})]);
    });
    return el("header", {}, [
      el("h1", {text: about.title || "Encoder walk-through"}),
      el("p", {text: "Weights: " + (about.weights || "?") + ". Every step of the encoder, in the order of the computation; " +
                     "hover a cell for its exact value. Colours: white → blue for non-negative tensors, blue ← white → red " +
                     "around 0 otherwise, one scale per tensor; hatched grey = masked (float32.min)."}),
      el("table", {"class": "sources"}, [el("tr", {}, [el("th"), el("th", {text: "tokens"}), el("th", {text: "ids"}),
        el("th", {text: "length"}), el("th", {text: "target " + (about.target_origin ? "(" + about.target_origin + ")" : "")})])].concat(sources)),
      el("details", {}, [el("summary", {text: "Model"}), el("table", {"class": "model"}, rows)]),
      about.generated ? el("p", {"class": "meta", text: about.generated}) : null]);
  }

  function build() {
    var app = document.getElementById("app"), toc = el("ol");
    app.textContent = "";
    app.appendChild(intro());
    app.appendChild(el("nav", {}, [el("h2", {text: "Contents"}), toc,
      el("button", {type: "button", id: "expand", text: "expand all layers"}),
      el("button", {type: "button", id: "collapse", text: "collapse all layers"})]));
    var groups = [], byGroup = {};
    DATA.steps.forEach(function (step) {
      if (step.kind === "alignment") return;
      if (!byGroup[step.group]) { byGroup[step.group] = []; groups.push(step.group); }
      byGroup[step.group].push(step);
    });
    var layers = groups.filter(function (g) { return g.indexOf("layer ") === 0; }).length;
    groups.forEach(function (group, index) {
      var id = group.replace(/ /g, "-"), title = group.charAt(0).toUpperCase() + group.slice(1);
      var body = [el("summary", {}, [el("h2", {text: title})])], sub = null;
      byGroup[group].forEach(function (step) {
        var part = step.name.indexOf("/self_attention/") >= 0 ? "Self-attention" : step.name.indexOf("/ffn/") >= 0 ? "Feed-forward network" : null;
        if (part && part !== sub) { sub = part; body.push(el("h3", {"class": "part", id: id + "-" + part.split(/[- ]/)[0].toLowerCase(), text: part})); }
        body.push(stepSection(step));
      });
      var open = group.indexOf("layer ") !== 0 || layers <= 3 || group === "layer 0";
      var details = el("details", {"class": "group", id: id}, body);
      if (open) details.open = true;
      app.appendChild(details);
      toc.appendChild(el("li", {}, [el("a", {href: "#" + id, text: title}), " (" + byGroup[group].filter(function (s) { return s.tensor; }).length + " tensors)"]));
    });
    var select = el("select", {id: "sentence"}, DATA.sources.map(function (s, b) {
      return el("option", {value: b, text: "sentence " + b + ": " + s.tokens.join(" ")});
    }));
    var maps = el("div"), alignments = el("div");
    function draw() {
      maps.textContent = ""; maps.appendChild(overview("attention", "attention-map"));
      alignments.textContent = "";
      if (DATA.targets) alignments.appendChild(overview("alignment", "alignment-map"));
      else alignments.appendChild(el("p", {text: "No target: no cross-attention."}));
    }
    select.addEventListener("change", function () { selected = Number(select.value); draw(); });
    app.appendChild(el("section", {id: "maps"}, [el("h2", {text: "Attention maps and alignments"}),
      el("label", {}, ["Sentence: ", select]),
      el("h3", {id: "attention-maps", text: "Encoder self-attention, per layer and head (rows: queries, columns: keys)"}), maps,
      el("h3", {id: "alignments", text: "Decoder cross-attention, per layer and head (rows: target tokens output, columns: source tokens)"}),
      alignments]));
    toc.appendChild(el("li", {}, [el("a", {href: "#attention-maps", text: "Attention maps"})]));
    toc.appendChild(el("li", {}, [el("a", {href: "#alignments", text: "Alignments (cross-attention)"})]));
    draw();
    document.getElementById("expand").addEventListener("click", function () {
      document.querySelectorAll("details.group").forEach(function (d) { d.open = true; });
    });
    document.getElementById("collapse").addEventListener("click", function () {
      document.querySelectorAll("details.group").forEach(function (d) { if (d.id.indexOf("layer") === 0) d.open = false; });
    });
  }

  try {
    build();
    if (!errors.length) document.body.setAttribute("data-status", "ok");
  } catch (error) {
    fail(error && error.stack ? error.stack : String(error));
  }
})();
