const root = element.querySelector('.spec-transcript');
const shown = new Map();  // exchange id -> {el, user, bot, label, notices, md, status, summary, parts}
let lastSeq = -1;
let fresh = false;  // apply() made a new exchange (a message sent, or the chat restored)

function slot(parent, cls) { const d = document.createElement('div'); d.className = cls; parent.appendChild(d); return d; }

function create(id) {
  const el = document.createElement('div');
  el.className = 'spec-ex'; el.dataset.ex = id;
  const user = slot(el, 'spec-msg spec-user'); user.dataset.testid = 'user';
  const bot = slot(el, 'spec-msg spec-bot'); bot.dataset.testid = 'bot';
  const head = slot(bot, 'spec-reply-head');
  const copy = document.createElement('button');
  copy.type = 'button'; copy.className = 'spec-copy-reply'; copy.textContent = 'copy'; copy.hidden = true;
  copy.title = 'copy the reply as the model wrote it (Markdown)';
  const s = {el, user, bot, label: slot(head, 'spec-label'), copy, notices: slot(bot, 'spec-notices'),
             md: slot(bot, 'spec-md'), status: slot(bot, 'spec-status-slot'), summary: slot(bot, 'spec-summary'),
             parts: {blocks: []}, userHtml: null};
  head.appendChild(copy);
  let after = null;  // keep the transcript in id order
  for (const [k, v] of shown) if (k > id && (after === null || k < after[0])) after = [k, v];
  root.insertBefore(el, after ? after[1].el : null);
  shown.set(id, s);
  sizes.observe(el);
  fresh = true;
  return s;
}

// A block is an HTML string, or a code block {head, lines, tail} whose lines are replaced one by one.
function setCode(div, block, old) {
  if (!old || typeof old !== 'object' || old.head !== block.head || old.tail !== block.tail) {
    div.innerHTML = block.head + block.tail;
    old = {lines: []};
  }
  const code = div.querySelector('code'), lines = code.children, had = old.lines;
  for (let i = 0; i < block.lines.length; i++) {
    if (had[i] === block.lines[i] && lines[i]) continue;
    let line = lines[i];
    if (!line) { line = document.createElement('span'); line.className = 'spec-line'; code.appendChild(line); }
    line.innerHTML = block.lines[i] + '\n';
  }
  while (code.children.length > block.lines.length) code.lastElementChild.remove();
}

function setBlocks(s, blocks) {
  const old = s.parts.blocks, kids = s.md.children;
  for (let i = 0; i < blocks.length; i++) {
    if (old[i] === blocks[i] && kids[i]) continue;
    let div = kids[i];
    if (!div) { div = document.createElement('div'); div.className = 'spec-block'; s.md.appendChild(div); }
    if (typeof blocks[i] === 'string') div.innerHTML = blocks[i];
    else setCode(div, blocks[i], typeof old[i] === 'object' ? old[i] : null);
  }
  while (s.md.children.length > blocks.length) s.md.lastElementChild.remove();
  s.parts.blocks = blocks.slice();
}

function upsert(item) {
  let s = shown.get(item.id);
  if (item.removed) { if (s) { s.el.remove(); shown.delete(item.id); } return; }
  if (!s) s = create(item.id);
  if (s.userHtml !== item.user) { s.user.innerHTML = item.user; s.userHtml = item.user; }
  if (typeof item.message === 'string') s.user.dataset.text = item.message; else delete s.user.dataset.text;
  const r = item.reply;
  s.bot.hidden = !r;
  if (!r) return;
  const p = s.parts;
  if (p.label !== r.label) s.label.textContent = p.label = r.label;
  if (p.notices !== r.notices) s.notices.innerHTML = p.notices = r.notices;
  if (p.status !== r.status) s.status.innerHTML = p.status = r.status;
  if (p.summary !== r.summary) {
    s.summary.textContent = p.summary = r.summary;
    s.summary.title = r.summary ? 'click: the whole line, or its first line again' : '';
  }
  s.bot.classList.toggle('spec-running', !!r.running);
  s.copy.hidden = typeof r.text !== 'string' || !r.text;  // nothing to copy before the first token
  if (typeof r.text === 'string') s.bot.dataset.text = r.text;
  setBlocks(s, (r.blocks || []).map(unwire));
}

// the page receives lists keyed by position (wire(), in Python): back to lists
const listed = (v) => Array.isArray(v) ? v : Object.values(v || {});
const unwire = (b) => (b && typeof b === 'object') ? {head: b.head, lines: listed(b.lines), tail: b.tail} : b;

let epoch = null;  // whose seq lastSeq is (a new session's values count from 1 again)
function apply(value) {
  if (!value || typeof value !== 'object' || value.seq === lastSeq) return;
  // the live channel runs ahead of Gradio's stream: an older value of the same epoch is stale
  if (value.epoch === epoch && value.seq < lastSeq) return;
  lastSeq = value.seq; epoch = value.epoch;
  fresh = false;
  if (value.reset) { root.replaceChildren(); shown.clear(); }
  for (const item of listed(value.items)) upsert(item);
  root.classList.toggle('spec-empty', shown.size === 0);
  // a new message always brings the view down; a grown reply is followed by the ResizeObserver
  // (below), after the browser's own layout: stick() here would force a layout of its own on every
  // update (the largest part of the page's script time on a reply of many short tokens)
  if (fresh) toBottom();
  if (typeof value.stats === 'string') setStats(value.stats);
  if (typeof value.live === 'string') listen(value.live);
}

// The stats line (#spec-stats, a Gradio HTML component) rides in a live value while a reply
// streams: each Gradio message costs the page far more than the line itself (live.py). Its own
// element is kept (Gradio replaces it with the reply's last stats): only what it holds changes.
function setStats(html) {
  const line = document.querySelector('#spec-stats .spec-stats');
  if (!line) return;
  const t = document.createElement('template'); t.innerHTML = html;
  const next = t.content.firstElementChild;
  if (next && line.innerHTML !== next.innerHTML) line.replaceChildren(...next.childNodes);
}

// -- a streaming reply's text past Gradio's stream (specchat/ui/session/live.py) ----------------
// A reply's updates say where its live channel is; while the page reads it, the server sends the
// reply's text there (server-sent events, each a value as above) instead of through Gradio, whose
// own handling of each streamed message costs far more than the text does. The end (event "end",
// or an error: the server then sends through Gradio again, and the page does not try again) closes it.
let live = null;  // {path, source}
const tried = new Set();  // each reply's channel is opened once: after an error Gradio carries the rest
const liveUrl = (path) => new URL(path, ((window.gradio_config && window.gradio_config.root) || location.origin).replace(/\/+$/, '') + '/');
function listen(path) {
  if (tried.has(path)) return;
  tried.add(path);
  if (live) live.source.close();
  const source = new EventSource(liveUrl(path));
  const me = {path, source};
  const done = () => { source.close(); if (live === me) live = null; };
  source.onmessage = (ev) => { root.liveUpdates = (root.liveUpdates || 0) + 1; apply(JSON.parse(ev.data)); };
  source.addEventListener('end', done);
  source.onerror = done;
  live = me;
}

// -- following the newest text ---------------------------------------------------------------
// The transcript scrolls by itself (.spec-transcript, not the page). It follows the bottom until
// the person scrolls up. Whether to follow is never measured after a change: a change of size
// can move scrollTop without anyone scrolling (an exchange laid out at its placeholder size by
// `content-visibility: auto` for a frame clamps scrollTop, then grows back; scroll anchoring;
// a resize). Instead every size change (each exchange and the box itself, seen by a
// ResizeObserver before the frame is painted) puts a following view back at the bottom, and only
// the person's own scrolling (wheel, keys, dragging the scrollbar, touch) stops following.
// Reaching the bottom again, the "jump to the latest" button or a Send starts it again.
const NEAR = 24;  // px from the bottom that count as "at the bottom"
let follow = true, held = false, lastTop = 0;
const gap = () => root.scrollHeight - root.scrollTop - root.clientHeight;
const jump = document.createElement('button');
jump.type = 'button'; jump.className = 'spec-jump'; jump.hidden = true;
jump.textContent = '↓ jump to the latest'; jump.title = 'scroll to the newest text and follow it again';
root.after(jump);
const showJump = () => { jump.hidden = follow || gap() <= NEAR; };
function stick() {
  if (follow && !held) { root.scrollTop = root.scrollHeight; lastTop = root.scrollTop; }
  showJump();
}
function toBottom() { follow = true; held = false; stick(); }
const stopFollowing = () => { if (root.scrollTop > 0) follow = false; showJump(); };  // before the scroll itself
const sizes = new ResizeObserver(stick);
sizes.observe(root);
// (a wheel over a pasted message that scrolls inside its bubble leaves the transcript where it is)
const scrollsInside = (el) => { for (; el && el !== root; el = el.parentElement) if (el.scrollTop > 0) return true; return false; };
root.addEventListener('wheel', (ev) => { if (ev.deltaY < 0 && !scrollsInside(ev.target)) stopFollowing(); }, {passive: true});
root.addEventListener('keydown', (ev) => { if (['ArrowUp', 'PageUp', 'Home'].includes(ev.key)) stopFollowing(); });
// a drag of the scrollbar (or a selection, a finger): while held, an upward scroll is the person's
root.addEventListener('pointerdown', () => { held = true; });
root.addEventListener('touchstart', () => { held = true; }, {passive: true});
for (const t of ['pointerup', 'pointercancel', 'touchend', 'touchcancel', 'blur']) {
  window.addEventListener(t, () => { if (held) { held = false; stick(); } }, true);
}
root.addEventListener('scroll', () => {
  const top = root.scrollTop, g = gap();
  if (g <= 2 || (g <= NEAR && top >= lastTop)) follow = true;  // back at the bottom: follow again
  else if (held && top < lastTop) follow = false;
  lastTop = top;
  showJump();
}, {passive: true});
jump.addEventListener('click', toBottom);
// a Send (the button, or Enter in the message box) brings the view down at once
document.addEventListener('click', (ev) => {
  if (ev.target.closest?.('#spec-send')) toBottom();
}, true);
document.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing && ev.target.closest?.('#spec-input')) toBottom();
}, true);

async function copyText(text) {
  try { await navigator.clipboard.writeText(text); return true; } catch (e) {
    const t = document.createElement('textarea'); t.value = text; document.body.appendChild(t); t.select();
    const ok = document.execCommand('copy'); t.remove(); return ok;
  }
}

root.addEventListener('click', async (ev) => {
  const button = ev.target.closest('.spec-copy, .spec-copy-reply');
  if (!button) return;
  ev.stopPropagation();
  let text;
  if (button.classList.contains('spec-copy-reply')) {
    text = button.closest('.spec-bot').dataset.text || '';
  } else {
    const pre = button.closest('.spec-code').querySelector('pre').cloneNode(true);
    pre.querySelectorAll('.spec-rejected-run').forEach(n => n.remove());
    text = pre.textContent;
  }
  const ok = await copyText(text);
  button.textContent = ok ? 'copied ✓' : 'copy failed';
  setTimeout(() => { button.textContent = 'copy'; }, 1500);
});

root.classList.add('spec-empty');
watch('value', () => apply(props.value));
apply(props.value);
