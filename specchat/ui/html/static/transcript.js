const root = element.querySelector('.spec-transcript');
const shown = new Map();  // exchange id -> {el, user, bot, label, notices, md, status, summary, parts}
let lastSeq = -1;

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
  const r = item.reply;
  s.bot.hidden = !r;
  if (!r) return;
  const p = s.parts;
  if (p.label !== r.label) s.label.textContent = p.label = r.label;
  if (p.notices !== r.notices) s.notices.innerHTML = p.notices = r.notices;
  if (p.status !== r.status) s.status.innerHTML = p.status = r.status;
  if (p.summary !== r.summary) s.summary.textContent = p.summary = r.summary;
  s.bot.classList.toggle('spec-running', !!r.running);
  s.copy.hidden = typeof r.text !== 'string';
  if (typeof r.text === 'string') s.bot.dataset.text = r.text;
  setBlocks(s, (r.blocks || []).map(unwire));
}

// the page receives lists keyed by position (wire(), in Python): back to lists
const listed = (v) => Array.isArray(v) ? v : Object.values(v || {});
const unwire = (b) => (b && typeof b === 'object') ? {head: b.head, lines: listed(b.lines), tail: b.tail} : b;

function apply(value) {
  if (!value || typeof value !== 'object' || value.seq === lastSeq) return;
  lastSeq = value.seq;
  const stick = root.scrollHeight - root.scrollTop - root.clientHeight < 60;
  if (value.reset) { root.replaceChildren(); shown.clear(); }
  for (const item of listed(value.items)) upsert(item);
  root.classList.toggle('spec-empty', shown.size === 0);
  if (stick) root.scrollTop = root.scrollHeight;
}

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
