// chart.js: the messages-per-second chart, drawn on a canvas.

export const palette = ["#2f6fdf", "#e0682b", "#1f9d6c", "#b03fb8", "#c9a400", "#d43d51", "#8a94a6"];

// drawChart draws series (from Rates.series) as one line per type, the
// newest second at the right edge, and fills legend with the types and
// their rate over the last 10 seconds.
export function drawChart(canvas, series, legend) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);

  const left = 44, right = 6, top = 6, bottom = 18;
  const pw = w - left - right, ph = h - top - bottom;
  const n = series.seconds || 60;
  const ymax = 4 * niceStep(Math.max(1, ...series.lines.map((l) => Math.max(0, ...l.values))) / 4);

  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#6a7383";
  g.strokeStyle = "#e6e9ee";
  g.lineWidth = 1;
  g.textAlign = "right";
  g.textBaseline = "middle";
  for (let i = 0; i <= 4; i++) {
    const v = (ymax * i) / 4, y = top + ph - (ph * i) / 4;
    g.beginPath();
    g.moveTo(left, Math.round(y) + 0.5);
    g.lineTo(left + pw, Math.round(y) + 0.5);
    g.stroke();
    g.fillText(shortNumber(v), left - 6, y);
  }
  g.textAlign = "center";
  g.textBaseline = "top";
  const step = n > 120 ? 60 : n > 30 ? 15 : 5;
  for (let k = 0; k * step <= n; k++) {
    const x = left + pw - (pw * k * step) / n;
    const label = k === 0 ? "now" : step === 60 ? `-${k} min` : `-${k * step} s`;
    g.fillText(label, Math.min(Math.max(x, left + 14), left + pw - 12), top + ph + 4);
  }
  g.save();
  g.translate(10, top + ph / 2);
  g.rotate(-Math.PI / 2);
  g.fillText("msg/s", 0, -6);
  g.restore();

  series.lines.forEach((line, k) => {
    g.strokeStyle = line.type === "other" ? palette[palette.length - 1] : palette[k % (palette.length - 1)];
    g.lineWidth = 1.5;
    g.beginPath();
    line.values.forEach((v, i) => {
      const x = left + (pw * (i + 0.5)) / n, y = top + ph - (ph * v) / ymax;
      if (i === 0) g.moveTo(x, y);
      else g.lineTo(x, y);
    });
    g.stroke();
  });

  if (!legend) return;
  legend.replaceChildren();
  if (!series.lines.length) {
    const li = document.createElement("li");
    li.textContent = "no messages yet";
    li.className = "r";
    legend.append(li);
  }
  series.lines.forEach((line, k) => {
    const li = document.createElement("li");
    const sw = document.createElement("i");
    sw.style.background = line.type === "other" ? palette[palette.length - 1] : palette[k % (palette.length - 1)];
    const t = document.createElement("span");
    t.className = "t";
    t.textContent = line.type === "" ? "(no type)" : line.type;
    t.title = t.textContent;
    const recent = line.values.slice(-10);
    const r = document.createElement("span");
    r.className = "r";
    r.textContent = shortNumber(recent.reduce((a, b) => a + b, 0) / Math.max(1, recent.length)) + "/s";
    li.append(sw, t, r);
    legend.append(li);
  });
}

// niceStep returns the grid step at or above v: 1, 1.5, 2, 2.5, 3, 4, 5, 6
// or 8 times a power of ten, and at least 1 (counts are whole).
function niceStep(v) {
  if (v <= 1) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function shortNumber(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1).replace(/\.0$/, "") + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1).replace(/\.0$/, "") + "k";
  return v >= 10 || v === 0 ? String(Math.round(v)) : v.toFixed(1);
}
