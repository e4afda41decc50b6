document.addEventListener('click', (ev) => {
  const summary = ev.target.closest('.spec-summary');
  if (summary) {  // a reply's summary: its whole text, or its first line again (page.css)
    if (!getSelection().toString()) summary.classList.toggle('spec-open');
    return;
  }
  const cancel = ev.target.closest('.spec-unqueue');
  if (cancel) {  // a queued message's own cancel button: its exchange id into the hidden #spec-unqueue box
    const m = cancel.className.match(/\bqref-(\d+)\b/);
    const box = document.querySelector('#spec-unqueue textarea, #spec-unqueue input');
    if (!m || !box) return;
    cancel.disabled = true;
    box.value = m[1] + '|' + Date.now();
    box.dispatchEvent(new Event('input', {bubbles: true}));
    return;
  }
  const el = ev.target.closest('[class*="tref-"], [class*="rref-"]');
  if (!el) return;
  const m = el.className.match(/\b(tref|rref)-(\d+)-(\d+)\b/);
  if (!m) return;
  const ref = (m[1] === 'rref' ? 'round:' : '') + m[2] + ':' + m[3];
  const box = document.querySelector('#spec-pick textarea, #spec-pick input');
  if (!box) return;
  box.value = ref + '|' + Date.now();
  box.dispatchEvent(new Event('input', {bubbles: true}));
  showInspector();
});
// A click on a token brings the inspector (below the chat) into view once it shows that token's
// round, unless it is on screen already; a round clicked in the timeline beside it leaves it be.
function showInspector() {
  const panel = document.getElementById('spec-inspector');
  if (!panel) return;
  const r = panel.getBoundingClientRect();
  if (r.top >= 0 && r.top < window.innerHeight - 120) return;
  const seen = new MutationObserver(() => {
    seen.disconnect();
    panel.scrollIntoView({behavior: 'smooth', block: 'start'});
  });
  seen.observe(panel, {childList: true, subtree: true, characterData: true});
  setTimeout(() => seen.disconnect(), 5000);  // no answer (a token of a restored reply): stay
}
// Which panels that redraw while a reply streams are on screen ("charts", "timeline", "ledger"):
// written into the hidden #spec-panels box when it changes, so that the server redraws a panel
// live only while someone can see it (every panel is complete at a reply's end).
(function watchPanels() {
  const groups = {'plot-alpha': 'charts', 'plot-position': 'charts', 'plot-speed': 'charts', 'plot-theory': 'charts',
                  'spec-timeline': 'timeline', 'spec-ledger': 'ledger', 'plot-worth': 'ledger'};
  const els = Object.keys(groups).map(id => document.getElementById(id)).filter(Boolean);
  const box = document.querySelector('#spec-panels textarea, #spec-panels input');
  if (els.length < Object.keys(groups).length || !box || !window.IntersectionObserver) {
    setTimeout(watchPanels, 1000);
    return;
  }
  const seen = new Set();
  let last = null;
  const observer = new IntersectionObserver((entries) => {
    for (const e of entries) { if (e.isIntersecting) seen.add(e.target.id); else seen.delete(e.target.id); }
    const now = [...new Set([...seen].map(id => groups[id]))].sort().join(',');
    if (now === last) return;
    last = now;
    box.value = now;
    box.dispatchEvent(new Event('input', {bubbles: true}));
  });
  els.forEach(el => observer.observe(el));
})();
