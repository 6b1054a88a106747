// app/report.py's runtime: draws the charts of one block of views (its figures, built in Python by the figure
// builders, sit deflated in the element "<id>-data"): those on screen at once, an option's when it is picked.
window.attnDraw = window.attnDraw || function (uid) {
  "use strict";
  const root = document.getElementById(uid);
  const phone = () => window.matchMedia("(max-width: 700px)").matches;  // app.report.PHONE_PX: no toolbar there
  const b64 = document.getElementById(uid + "-data").textContent.trim();
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Response(stream).json().then((figs) => {
    const hint = (div, note) => {  // "swipe sideways" under a chart (above a table) wider than its box
      const box = div.parentElement;
      note = note || box.nextElementSibling;
      if (note && note.classList.contains("hint")) note.hidden = box.scrollWidth <= box.clientWidth + 2;
    };
    const tables = (scope) => scope.querySelectorAll(".scroll > table.values").forEach((table) => {
      if (table.offsetParent !== null) hint(table, table.parentElement.previousElementSibling);
    });
    window.addEventListener("resize", () => tables(root));
    const draw = (scope) => Promise.all(Array.from(scope.querySelectorAll(".chart[data-fig]"))
      .filter((div) => !div.dataset.drawn && div.offsetParent !== null).map((div) => {
        div.dataset.drawn = "1";
        const f = figs[+div.dataset.fig];
        const config = Object.assign({}, f.config, {responsive: true, displayModeBar: phone() ? false : "hover"});
        return Plotly.newPlot(div, f.data, f.layout, config).then(() => hint(div));
      }));
    root.querySelectorAll("select[data-choice]").forEach((sel) => sel.addEventListener("change", () => {
      const box = sel.closest(".choice");
      for (const option of box.querySelectorAll(":scope > .option")) option.hidden = option.dataset.i !== sel.value;
      tables(box);
      return draw(box);
    }));
    tables(root);
    return draw(root).then(() => root.querySelectorAll("section.view")
      .forEach((section) => section.setAttribute("data-drawn", "1")));
  });
};
