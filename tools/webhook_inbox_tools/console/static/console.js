// The health page's backlog plot: one sample of /health.json every few seconds while the page
// is open, drawn with uPlot. No inline script (the page's CSP allows only files from here).
(function () {
  "use strict";
  const node = document.getElementById("backlog-plot");
  if (!node || typeof uPlot === "undefined") return;
  const every = Math.max(1, Number(node.dataset.every || 3)) * 1000;
  const series = ["received", "processing", "failed", "dead_letter"];
  const colours = ["#1d4f91", "#6a3fa0", "#8a4b00", "#b3261e"];
  const data = [[]].concat(series.map(() => [])).concat([[]]);
  const summary = document.getElementById("plot-summary");
  const plot = new uPlot({
    width: Math.max(320, node.clientWidth || 800),
    height: 240,
    series: [{}].concat(series.map((name, i) => ({ label: name, stroke: colours[i], width: 2 })))
      .concat([{ label: "oldest unfinished (s)", stroke: "#4a4a4a", dash: [4, 4], scale: "s" }]),
    axes: [{}, { label: "events" }, { side: 1, scale: "s", label: "age (s)", grid: { show: false } }],
  }, data, node);
  async function sample() {
    try {
      const reply = await fetch("/health.json", { credentials: "same-origin" });
      if (!reply.ok) return;
      const point = await reply.json();
      data[0].push(point.at);
      series.forEach((name, i) => data[i + 1].push(point.counts[name] || 0));
      data[series.length + 1].push(point.oldest_unfinished_age_s);
      if (data[0].length > 600) data.forEach((column) => column.shift());
      plot.setData(data);
      const owed = (point.counts.received || 0) + (point.counts.processing || 0) + (point.counts.failed || 0);
      summary.textContent = `${owed} event(s) owed work, ${point.counts.dead_letter || 0} dead-lettered, samples: ${data[0].length}`;
    } catch (error) {
      summary.textContent = "could not sample the backlog: " + error;
    }
  }
  sample();
  setInterval(sample, every);
  window.addEventListener("resize", () => plot.setSize({ width: Math.max(320, node.clientWidth), height: 240 }));
})();

// The arrivals plot: one line per provider over the chosen window, from the page's JSON block.
(function () {
  "use strict";
  const node = document.getElementById("arrivals-plot");
  const source = document.getElementById("arrivals-data");
  if (!node || !source || typeof uPlot === "undefined") return;
  const plot = JSON.parse(source.textContent);
  if (!plot.series.length) return;
  const palette = ["#1d4f91", "#b3261e", "#1e6b2e", "#6a3fa0", "#8a4b00", "#00695c", "#4a4a4a"];
  const chart = new uPlot({
    width: Math.max(320, node.clientWidth || 800),
    height: 220,
    series: [{}].concat(plot.series.map((s, i) => ({
      label: s.provider, stroke: palette[i % palette.length], width: 2,
    }))),
    axes: [{}, { label: "events" }],
  }, [plot.x].concat(plot.series.map((s) => s.counts)), node);
  window.addEventListener("resize", () => chart.setSize({ width: Math.max(320, node.clientWidth), height: 220 }));
})();
