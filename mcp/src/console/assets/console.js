// The CodeSpace console's only script (served from the binary; the CSP allows no other): draws
// the decisions chart (allows, denies and holds per hour, stacked) as SVG from the JSON in the
// chart element's data-buckets attribute. Text goes in through textContent, never as markup.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = { allow: "#2e8b47", deny: "#c0392b", hold: "#d08a1c" };
  function el(name, attrs) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, String(attrs[k]));
    return e;
  }
  function draw(box) {
    let buckets;
    try { buckets = JSON.parse(box.dataset.buckets || "[]"); } catch (e) { return; }
    const hours = new Map();
    for (const b of buckets) {
      const h = hours.get(b.hour) || { allow: 0, deny: 0, hold: 0, series: [] };
      h.allow += b.allow; h.deny += b.deny; h.hold += b.hold;
      h.series.push(b.profile + " / " + b.tool + ": " + b.allow + " allow, " + b.deny + " deny, " + b.hold + " hold");
      hours.set(b.hour, h);
    }
    const keys = Array.from(hours.keys()).sort();
    box.textContent = "";
    if (keys.length === 0) { box.textContent = "No decisions in this window."; return; }
    const W = 1000, H = 240, pad = 30;
    const max = Math.max(1, ...keys.map(k => { const h = hours.get(k); return h.allow + h.deny + h.hold; }));
    const bw = Math.max(2, (W - 2 * pad) / keys.length - 2);
    const svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "decisions per hour" });
    keys.forEach((k, i) => {
      const h = hours.get(k);
      let y = H - pad;
      const x = pad + i * (bw + 2);
      for (const kind of ["allow", "hold", "deny"]) {
        const hgt = (h[kind] / max) * (H - 2 * pad);
        if (hgt <= 0) continue;
        y -= hgt;
        const r = el("rect", { x: x, y: y, width: bw, height: hgt, fill: COLORS[kind] });
        const t = el("title", {});
        t.textContent = k + " " + kind + " " + h[kind] + "\n" + h.series.join("\n");
        r.appendChild(t);
        svg.appendChild(r);
      }
      if (i === 0 || i === keys.length - 1) {
        const label = el("text", { x: x, y: H - 8, "font-size": 12 });
        label.textContent = k.slice(5, 16).replace("T", " ");
        svg.appendChild(label);
      }
    });
    const top = el("text", { x: 2, y: pad - 6, "font-size": 12 });
    top.textContent = String(max);
    svg.appendChild(top);
    box.appendChild(svg);
    const legend = document.createElement("div");
    legend.className = "legend";
    for (const kind of ["allow", "hold", "deny"]) {
      const s = document.createElement("span");
      s.textContent = "■ " + kind + "  ";
      s.className = "k-" + kind;
      legend.appendChild(s);
    }
    box.appendChild(legend);
  }
  document.addEventListener("DOMContentLoaded", function () {
    const box = document.getElementById("chart");
    if (box) draw(box);
  });
})();
