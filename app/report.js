// The page of app/report.py: builds each chart from the inline arrays and the figure builders' templates.
// Every string from the sentence arrives escaped ("html"/"labels") for plotly, or raw for text nodes.
(function () {
  "use strict";
  let D = null;  // the page's data (app.report.deflated), read at the end
  let CONFIG = null;
  const copy = (x) => JSON.parse(JSON.stringify(x));
  const range = (n) => Array.from({length: n}, (_, i) => i);

  function inflate(b64) {  // base64 of zlib data -> a Response over the inflated bytes
    const bytes = Uint8Array.from(atob(b64.trim()), (c) => c.charCodeAt(0));
    return new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate")));
  }
  async function unpack(p) {  // app.report.pack: deflated 16-bit steps above lo, base64
    const view = new DataView(await inflate(p.b64).arrayBuffer());
    const out = new Float32Array(view.byteLength / 2);
    for (let i = 0; i < out.length; i++) out[i] = p.lo + p.step * view.getUint16(2 * i, true);
    return {shape: p.shape, v: out};
  }
  async function unpackAll(node) {  // every packed array in the data, in place
    if (!node || typeof node !== "object") return;
    for (const key of Object.keys(node)) {
      const value = node[key];
      if (value && typeof value === "object" && typeof value.b64 === "string") node[key] = await unpack(value);
      else await unpackAll(value);
    }
  }
  function matrix(a, offset, q, k) {  // rows of a flat array
    return range(q).map((i) => Array.from(a.v.subarray(offset + i * k, offset + (i + 1) * k)));
  }
  const weights = {};  // filled once the arrays are unpacked (at the end)

  function head(kind, layer, h) {  // (Q, K) of a 0-based layer and head, or the mean over heads (h = "mean")
    const a = weights[kind], [, H, q, k] = a.shape;
    if (h !== "mean") return matrix(a, ((layer * H) + h) * q * k, q, k);
    const z = range(q).map(() => new Array(k).fill(0));
    for (let hh = 0; hh < H; hh++) {
      const m = matrix(a, ((layer * H) + hh) * q * k, q, k);
      for (let i = 0; i < q; i++) for (let j = 0; j < k; j++) z[i][j] += m[i][j] / H;
    }
    return z;
  }

  // a figure from app.figures.attention_heatmap's template: z, positions and the hover's tokens filled in
  function heat(div, tpl, z, qhtml, khtml, title) {
    const t = copy(tpl), tr = t.traces[0], q = z.length, k = q ? z[0].length : 0;
    Object.assign(tr, {z: z, x: range(k), y: range(q),
                       customdata: z.map((row, i) => row.map((_, j) => [qhtml[i], khtml[j], i + 1, j + 1]))});
    if (title !== undefined) t.layout.title.text = title;
    return Plotly.react(div, [tr].concat(t.traces.slice(1)), t.layout, CONFIG);
  }

  function control(section, label, options, value, onchange) {
    const wrap = document.createElement("label"), sel = document.createElement("select");
    wrap.textContent = label + " ";
    for (const [v, text] of options) {
      const o = document.createElement("option");
      o.value = String(v); o.textContent = text; sel.appendChild(o);
    }
    sel.value = String(value);
    sel.addEventListener("change", () => onchange(sel.value));
    wrap.appendChild(sel);
    section.querySelector(".controls").appendChild(wrap);
    return sel;
  }
  function chart(section, cls) {
    const div = document.createElement("div");
    div.className = "chart " + (cls || "");
    section.querySelector(".body").appendChild(div);
    return div;
  }
  function note(section, text) {
    const p = document.createElement("p");
    p.className = "note"; p.textContent = text;
    section.querySelector(".body").appendChild(p);
    return p;
  }
  const kindOptions = () => Object.keys(D.kinds).map((k) => [k, D.kinds[k].name]);
  const layersOf = (kind) => weights[kind].shape[0];
  const headsOf = (kind) => weights[kind].shape[1];

  const views = {};

  views.heatmap = function (section) {
    const state = {kind: "cross", layer: layersOf("cross") - 1, head: "mean"};
    const div = chart(section, "heatmap-chart");
    let layerSel, headSel;
    const draw = () => {
      const K = D.kinds[state.kind];
      const title = `${K.name} · layer ${state.layer + 1} · ` + (state.head === "mean" ? "mean over heads" :
        `head ${state.head + 1}`);
      return heat(div, K.heatmap, head(state.kind, state.layer, state.head), K.queries.html, K.keys.html, title);
    };
    const fill = () => {  // the layer and head lists of the chosen type
      layerSel.innerHTML = ""; headSel.innerHTML = "";
      for (const l of range(layersOf(state.kind))) layerSel.add(new Option(`layer ${l + 1}`, String(l)));
      headSel.add(new Option("mean over heads", "mean"));
      for (const h of range(headsOf(state.kind))) headSel.add(new Option(`head ${h + 1}`, String(h)));
      state.layer = Math.min(state.layer, layersOf(state.kind) - 1);
      layerSel.value = String(state.layer); headSel.value = String(state.head);
    };
    const kindSel = control(section, "Type", kindOptions(), state.kind, (v) => { state.kind = v; fill(); draw(); });
    layerSel = control(section, "Layer", [], 0, (v) => { state.layer = +v; draw(); });
    headSel = control(section, "Head", [], "mean", (v) => { state.head = v === "mean" ? "mean" : +v; draw(); });
    fill();
    note(section, "Rows are queries, columns keys; hover a cell for both tokens and the weight (colours: 0 to 1)." +
                  (D.kinds.cross.decimals < 3 ? " The weights of this large model are rounded to 2 decimals, to " +
                                                "keep the page small." : ""));
    views.openHead = (kind, layer, h) => {  // the all-heads grid opens a head here
      state.kind = kind; kindSel.value = kind; fill();
      state.layer = layer; state.head = h; layerSel.value = String(layer); headSel.value = String(h);
      draw(); section.scrollIntoView();
    };
    return draw();
  };

  views.all_heads = function (section) {
    let kind = "cross";
    const div = chart(section, "grid-chart");
    const draw = () => {
      const K = D.kinds[kind], a = weights[kind], [L, H, q, k] = a.shape, [gap, bh, bw] = K.blocks;
      const rows = L * bh - gap, cols = H * bw - gap;
      const z = range(rows).map(() => new Array(cols).fill(null));
      const custom = range(rows).map(() => new Array(cols).fill(null));
      for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
        const m = matrix(a, ((l * H) + h) * q * k, q, k);
        for (let i = 0; i < q; i++) for (let j = 0; j < k; j++) {
          z[l * bh + i][h * bw + j] = m[i][j];
          custom[l * bh + i][h * bw + j] = [l + 1, h + 1, K.queries.html[i], K.keys.html[j]];
        }
      }
      const t = copy(K.grid), tr = t.traces[0];
      delete tr.hoverinfo;
      Object.assign(tr, {z: z, customdata: custom, hovertemplate: "layer %{customdata[0]} · head %{customdata[1]}" +
                         "<br>query <b>%{customdata[2]}</b><br>key <b>%{customdata[3]}</b><br>weight %{z:.3f}" +
                         "<extra></extra>"});
      return Plotly.react(div, [tr], t.layout, CONFIG);
    };
    control(section, "Type", kindOptions(), kind, (v) => { kind = v; draw(); });
    note(section, "Every layer and head on one colour scale (0 to 1). Click a head to open it in the heatmap above.");
    return draw().then(() => div.on("plotly_click", (ev) => {
      const c = ev.points && ev.points[0] && ev.points[0].customdata;
      if (c && views.openHead) views.openHead(kind, c[0] - 1, c[1] - 1);
    }));
  };

  views.lines = function (section) {
    const state = {kind: "cross", layer: layersOf("cross") - 1, threshold: 0.05};
    const div = chart(section, "lines-chart");
    const draw = () => {
      const K = D.kinds[state.kind], [, H, q, k] = weights[state.kind].shape, n = Math.max(q, k);
      const yq = range(q).map((i) => q > 1 ? -i * (n - 1) / (q - 1) : 0);
      const yk = range(k).map((j) => k > 1 ? -j * (n - 1) / (k - 1) : 0);
      const traces = [], per = range(H).map((h) => head(state.kind, state.layer, h));
      for (let h = 0; h < H; h++) {  // app.figures.attention_lines: one colour per head, strength by weight
        const colour = D.colours[h % D.colours.length];
        traces.push({type: "scatter", x: [null], y: [null], mode: "lines", line: {color: colour, width: 3},
                     name: `head ${h + 1}`, legendgroup: `h${h}`});
        D.buckets.forEach(([low0, high, alpha, width], b) => {
          const low = b === 0 ? Math.max(low0, state.threshold) : low0, xs = [], ys = [];
          for (let i = 0; i < q; i++) for (let j = 0; j < k; j++) {
            const w = per[h][i][j];
            if (w >= low && w < high) { xs.push(0, 1, null); ys.push(yq[i], yk[j], null); }
          }
          if (xs.length) traces.push({type: "scatter", x: xs, y: ys, mode: "lines", line: {color: colour, width: width},
                                      opacity: alpha, name: `head ${h + 1}`, legendgroup: `h${h}`, showlegend: false,
                                      hoverinfo: "skip"});
        });
      }
      const hoverQ = range(q).map((i) => [`query ${i}: <b>${K.queries.html[i]}</b>`].concat(range(H).map((h) => {
        let j = 0;
        for (let jj = 1; jj < k; jj++) if (per[h][i][jj] > per[h][i][j]) j = jj;
        return `head ${h + 1} → ${K.keys.html[j]} (${per[h][i][j].toFixed(2)})`;
      })).join("<br>"));
      const size = (m) => (m <= 30 ? 12 : m <= 60 ? 10 : 8) + 1;
      traces.push({type: "scatter", x: new Array(q).fill(0), y: yq, mode: "markers+text", text: K.queries.html,
                   textposition: "middle left", marker: {size: 7, color: "#444"}, hovertext: hoverQ, hoverinfo: "text",
                   showlegend: false, textfont: {size: size(q)}});
      traces.push({type: "scatter", x: new Array(k).fill(1), y: yk, mode: "markers+text", text: K.keys.html,
                   textposition: "middle right", marker: {size: 7, color: "#444"}, hoverinfo: "text",
                   hovertext: K.keys.html.map((t, j) => `key ${j}: <b>${t}</b>`), showlegend: false,
                   textfont: {size: size(k)}});
      const layout = copy(K.lines.layout);
      layout.title.text = `${K.name} · layer ${state.layer + 1}`;
      return Plotly.react(div, traces, layout, CONFIG);
    };
    let layerSel;
    const fill = () => {
      layerSel.innerHTML = "";
      for (const l of range(layersOf(state.kind))) layerSel.add(new Option(`layer ${l + 1}`, String(l)));
      state.layer = Math.min(state.layer, layersOf(state.kind) - 1); layerSel.value = String(state.layer);
    };
    control(section, "Type", kindOptions(), state.kind, (v) => { state.kind = v; fill(); draw(); });
    layerSel = control(section, "Layer", [], 0, (v) => { state.layer = +v; draw(); });
    control(section, "Hide weights below", [0, 0.02, 0.05, 0.1, 0.2, 0.3].map((t) => [t, String(t)]), 0.05,
            (v) => { state.threshold = +v; draw(); });
    fill();
    note(section, "Queries on the left, keys on the right, one colour per head; hover a token to see where each " +
                  "head sends it, click a head in the legend to hide it.");
    return draw();
  };

  views.step = function (section) {
    const S = D.step, state = {step: 0, layer: layersOf("cross") - 1};
    const said = note(section, "");
    const top = chart(section, "topk-chart"), look = chart(section, "step-cross-chart");
    const draw = () => {
      const s = S.steps[state.step], n = s.html.length, t = copy(S.topk), tr = t.traces[0];
      said.textContent = "Output so far: " + D.target.raw.slice(0, state.step).join("  ") +
        `  [${D.target.raw[state.step]}]  (kept piece: p = ${s.p.toFixed(3)})`;
      Object.assign(tr, {x: s.probs, y: range(n), customdata: s.html, text: s.probs.map((p) =>
        (100 * p).toFixed(1) + "%"), marker: {color: range(n).map((i) => i === s.chosen ? "#2e7d32" : "#9ecae1")}});
      Object.assign(t.layout.yaxis, {tickvals: range(n), ticktext: s.html});
      t.layout.xaxis.range = [0, Math.max(...s.probs, 0) * 1.2 + 0.02];
      t.layout.height = 120 + 30 * n;
      const a = weights.cross, [, H, T, Sn] = a.shape;
      const rows = range(H).map((h) => head("cross", state.layer, h)[state.step]);
      const mean = range(Sn).map((j) => rows.reduce((acc, r) => acc + r[j], 0) / H);
      const title = S.cross.layout.title.text.replace("@@TOKEN@@", D.target.html[state.step]);
      return Promise.all([Plotly.react(top, [tr], t.layout, CONFIG),
                          heat(look, S.cross, [mean].concat(rows), S.heads, D.source.html, title)]);
    };
    control(section, "Output step", D.target.raw.map((t, i) => [i, `${i + 1}: ${t}`]), 0,
            (v) => { state.step = +v; draw(); });
    control(section, "Cross-attention layer", range(layersOf("cross")).map((l) => [l, `layer ${l + 1}`]),
            state.layer, (v) => { state.layer = +v; draw(); });
    return draw();
  };

  views.masks = function (section) {
    const M = D.masks;
    let pad = M.pads[M.pads.length - 1];
    const divs = {}, keys = ["encoder", "causal", "decoder", "cross"];
    for (const key of keys) divs[key] = chart(section, "mask-chart mask-" + key);
    const draw = () => Promise.all(keys.map((key) => {
      const P = M[String(pad)], a = P[key], [q, k] = a.shape, m = matrix(a, 0, q, k);
      const qt = key === "encoder" ? P.source_tokens : P.decoder_tokens;
      const kt = key === "encoder" || key === "cross" ? P.source_tokens : P.decoder_tokens;
      const t = copy(M.templates[key]), tr = t.traces[0];
      Object.assign(tr, {z: m, x: range(k), y: range(q), customdata: m.map((row, i) => row.map((v, j) =>
        [qt.html[i], kt.html[j], v > 0.5 ? "may attend" : "blocked"]))});
      Object.assign(t.layout.xaxis, {tickvals: range(k), ticktext: kt.labels});
      Object.assign(t.layout.yaxis, {tickvals: range(q), ticktext: qt.labels});
      return Plotly.react(divs[key], [tr].concat(t.traces.slice(1)), t.layout, CONFIG);
    }));
    control(section, "Padding after each sentence", M.pads.map((p) => [p, String(p)]), pad,
            (v) => { pad = +v; draw(); });
    note(section, "Green: may attend; pink: blocked (the score is set to −∞ before the softmax, so the weight is " +
                  "exactly 0). Padding shows the sentence as it sits in a batch next to longer ones.");
    return draw();
  };

  views.positional = function (section) {
    const P = D.positional, table = P.table, sim = P.similarity;
    note(section, `The sinusoidal encoding for d_model = ${P.d_model} over ${P.length} positions; the model's own ` +
                  `table differs from the formula by at most ${P.model_diff.toExponential(1)}.`);
    const draw = () => {
      const t1 = copy(P.heatmap), t2 = copy(P.similarity_tpl);
      t1.traces[0].z = matrix(table, 0, table.shape[0], table.shape[1]);
      t2.traces[0].z = matrix(sim, 0, sim.shape[0], sim.shape[1]);
      const waves = copy(P.waves), norms = copy(P.norms);
      return Promise.all([Plotly.react(chart(section, "pe-table"), t1.traces, t1.layout, CONFIG),
                          Plotly.react(chart(section, "pe-waves"), waves.data, waves.layout, CONFIG),
                          Plotly.react(chart(section, "pe-similarity"), t2.traces, t2.layout, CONFIG),
                          Plotly.react(chart(section, "pe-norms"), norms.data, norms.layout, CONFIG)]);
    };
    return draw();
  };

  views.attribution = function (section) {
    const A = D.attribution, src = A.source, tgt = A.target;
    note(section, `Method: ${A.method.replace(/_/g, " ")}. How much each source piece and each earlier output ` +
                  "piece drove each output piece's log-probability (red positive, blue negative).");
    return Promise.all([
      heat(chart(section, "attr-source"), A.source_tpl, matrix(src, 0, ...src.shape), D.target.html, D.source.html),
      heat(chart(section, "attr-target"), A.target_tpl, matrix(tgt, 0, ...tgt.shape), D.target.html,
           D.decoder_input.html)]);
  };

  views.lens = function (section) {
    const Lz = D.lens, a = Lz.chosen;
    const done = heat(chart(section, "lens-chart"), Lz.template, matrix(a, 0, ...a.shape), Lz.layers.html,
                      D.target.html);
    const table = document.createElement("table");
    table.className = "lens";
    const headRow = table.insertRow();
    for (const text of ["output piece", "top from layer"].concat(Lz.layers.raw)) {
      const th = document.createElement("th"); th.textContent = text; headRow.appendChild(th);
    }
    D.target.raw.forEach((piece, t) => {
      const row = table.insertRow();
      for (const text of [`${t + 1}: ${piece}`, Lz.first[t] ? String(Lz.first[t]) : "never"]
        .concat(Lz.top.map((layer) => layer[t]))) row.insertCell().textContent = text;
    });
    section.querySelector(".body").appendChild(table);
    return done;
  };

  views.flow = function (section) {  // app.flowgraph.step_figures: one whole figure per output piece
    const F = D.flow, div = chart(section, "flow-chart");
    const draw = (i) => Plotly.react(div, F.figures[i].data, F.figures[i].layout, CONFIG);
    control(section, "Output piece", F.figures.map((_, i) => [i, `${i + 1}: ${D.target.raw[i]}`]), 0,
            (v) => draw(Number(v)));
    note(section, `Each block's terms (a head's share from one position, the feed-forward block, the residual) ` +
                  `weighted by their closeness to the block's output; the terms of ${F.threshold} and more, ` +
                  "followed back from the output piece (Ferrando and Voita, 2024).");
    return draw(0);
  };

  const read = inflate(document.getElementById("attn-data").textContent).json().then((data) => {
    D = data;
    CONFIG = Object.assign({}, D.config, {responsive: true});
    window.attentionReport.data = D;
    return unpackAll(D);
  });
  window.attentionReport = {data: null, ready: read.then(() => {
    for (const kind of Object.keys(D.kinds)) weights[kind] = D.kinds[kind].weights;
    return Promise.all(D.views.map((v) => {
      const section = document.getElementById(v);
      return Promise.resolve(views[v](section)).then(() => section.setAttribute("data-drawn", "1"));
    }));
  })};
})();
