(root) => {
  const boxes = [];
  for (const el of root.querySelectorAll(".js-plotly-plot text")) {
    if (!el.textContent.trim() || el.closest(".modebar-container")) continue;
    const r = el.getBoundingClientRect();
    if (r.width < 1 || r.height < 1 || getComputedStyle(el).visibility === "hidden" || +getComputedStyle(el).opacity === 0) continue;
    const b = el.getBBox(), m = el.getScreenCTM(), inset = 0.2 * b.height;  // the font box less its line gap
    const corners = [[b.x, b.y + inset], [b.x + b.width, b.y + inset], [b.x + b.width, b.y + b.height - inset],
                     [b.x, b.y + b.height - inset]];
    boxes.push({text: el.textContent, chart: el.closest(".js-plotly-plot"),
                pts: corners.map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f])});
  }
  const axes = (p) => [0, 1].map((i) => [p[i][1] - p[i + 1][1], p[i + 1][0] - p[i][0]]);
  const proj = (p, a) => { const v = p.map(([x, y]) => x * a[0] + y * a[1]); return [Math.min(...v), Math.max(...v)]; };
  const hit = (p, q) => [...axes(p), ...axes(q)].every((a) => {
    const n = Math.hypot(a[0], a[1]) || 1, [a0, a1] = proj(p, a).map((v) => v / n), [b0, b1] = proj(q, a).map((v) => v / n);
    return a1 > b0 + 0.5 && b1 > a0 + 0.5; });
  const pairs = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++)
    if (boxes[i].chart === boxes[j].chart && hit(boxes[i].pts, boxes[j].pts)) pairs.push([boxes[i].text, boxes[j].text]);
  return pairs;
}
