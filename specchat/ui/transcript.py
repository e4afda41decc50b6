"""The chat transcript: rendered in the browser once, then changed only where a reply changes.

The conversation is not a ``gr.Chatbot``: the Chatbot re-renders (sanitises, parses, lays out)
every message of the conversation on every streamed update, so streaming cost grew with the
chat (0.69× the engine's speed at reply 1, 0.38× at reply 8, measured with ``specchat
bench-page``). Here the page holds one ``gr.HTML`` whose template is an empty container; its
value is a *feed*: the exchanges that changed, and a small script (:data:`TRANSCRIPT_JS`, run by
Gradio's ``js_on_load``) puts each exchange into the container and, for the reply in progress,
replaces only the Markdown blocks that differ from what it shows. Finished replies stay in the
DOM untouched.

A feed value (built by :meth:`specchat.ui.session_views.SessionViews.feed`)::

    {"seq": 12,             # per browser session, grows with every value sent
     "reset": false,        # true: empty the transcript first (Clear)
     "items": [             # the exchanges that changed; the others stay as they are
        {"id": 3, "user": "<div …>message</div>",
         "reply": {"label": "#3 · hybrid · …", "notices": "",
                   "blocks": ["<p>…</p>", {"head": "<div class=spec-code>…<code>", "lines": […], "tail": …}, …],
                   "status": "", "summary": "generating…", "running": true}},
        {"id": 2, "removed": true}]}

During one streamed reply Gradio sends each value as a diff of the previous one (its streaming
diff), so an update carries the changed blocks only. The value is the *state* of each exchange,
not a change to it: if the browser folds two updates into one, the later state is complete.

A finished reply carries its plain text too, for its copy button. "Colours / plain" and "show
rejected drafts" are classes on the container, switched in the
browser (:data:`SET_PLAIN_JS`, :data:`SET_REJECTED_JS`): they work while a reply streams and
cost no round trip. A code block's copy button copies the code without the rejected drafts.
"""

from __future__ import annotations

TEMPLATE = ('<div class="spec-transcript" role="log" aria-live="polite" '
            'data-placeholder="Ask for some code. Tokens appear coloured by how they were produced."></div>')

# Runs once when the component is mounted (Gradio 6 gr.HTML js_on_load: element, props, watch).
TRANSCRIPT_JS = r"""
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
"""

SET_PLAIN_JS = """(mode) => {
  const root = document.querySelector('#spec-chat .spec-transcript');
  if (root) root.classList.toggle('spec-plain', mode === 'plain');
}"""
SET_REJECTED_JS = """(show) => {
  const root = document.querySelector('#spec-chat .spec-transcript');
  if (root) root.classList.toggle('spec-show-rejected', !!show);
}"""

CSS = """
#spec-chat { padding: 0 !important; }
.spec-transcript { height: 520px; overflow-y: auto; resize: vertical; padding: 10px 12px;
  border: 1px solid var(--border-color-primary, #e5e7eb); border-radius: var(--radius-lg, 8px);
  background: var(--background-fill-secondary, #fafafa); }
.spec-transcript.spec-empty::before { content: attr(data-placeholder); display: block; opacity: 0.6;
  text-align: center; margin-top: 180px; font-size: 0.95rem; }
.spec-ex { margin-bottom: 14px; }
/* a finished exchange off screen: the browser skips its layout and paint, so an update late in a
   long chat costs no more than early (each keeps the size it was last drawn at) */
.spec-ex:not(:last-child) { content-visibility: auto; contain-intrinsic-size: auto 320px; }
.spec-msg { border-radius: 10px; padding: 8px 12px; max-width: 100%; box-sizing: border-box; }
.spec-user { background: var(--color-accent-soft, #eef2ff); margin: 0 0 8px auto; width: fit-content; max-width: 85%; }
.spec-bot { background: var(--background-fill-primary, #fff); border: 1px solid var(--border-color-primary, #e5e7eb); }
.spec-bot[hidden] { display: none; }
.spec-md { font-size: 0.95rem; line-height: 1.6; overflow-wrap: anywhere; }
.spec-md p { margin: 0.35em 0; }
.spec-md ul, .spec-md ol { margin: 0.35em 0; padding-left: 1.6em; }
.spec-md li { margin: 0.1em 0; }
.spec-md h1, .spec-md h2, .spec-md h3, .spec-md h4 { margin: 0.6em 0 0.3em; line-height: 1.3; }
.spec-md h1 { font-size: 1.3em; } .spec-md h2 { font-size: 1.18em; } .spec-md h3, .spec-md h4 { font-size: 1.05em; }
.spec-md table { border-collapse: collapse; margin: 0.4em 0; font-size: 0.92em; }
.spec-md th, .spec-md td { border: 1px solid var(--border-color-primary, #d0d7de); padding: 2px 8px; }
.spec-md blockquote { border-left: 3px solid var(--border-color-primary, #d0d7de); margin: 0.4em 0; padding-left: 10px; opacity: 0.9; }
.spec-md :not(pre) > code { font-family: var(--font-mono); font-size: 0.88em; padding: 1px 4px; border-radius: 4px;
  background: rgba(134, 142, 150, 0.14); }
.spec-code { margin: 0.5em 0; border: 1px solid var(--border-color-primary, #d0d7de); border-radius: 8px; overflow: hidden; }
.spec-code-bar { display: flex; justify-content: space-between; align-items: center; padding: 2px 8px;
  font-size: 0.75rem; background: rgba(134, 142, 150, 0.12); }
.spec-code-lang { opacity: 0.75; font-family: var(--font-mono); }
.spec-copy { font-size: 0.75rem; padding: 1px 8px; border-radius: 4px; cursor: pointer; opacity: 0.85;
  border: 1px solid var(--border-color-primary, #d0d7de); background: var(--background-fill-primary, #fff); }
.spec-copy:hover { opacity: 1; }
.spec-code pre { margin: 0; padding: 8px 10px; overflow-x: auto; background: var(--background-fill-primary, #fff);
  font-family: var(--font-mono); font-size: 0.84rem; line-height: 1.5; tab-size: 4; }
.spec-code pre code { font-family: inherit; background: none; padding: 0; white-space: pre; }
.spec-user .spec-text { font-family: inherit; font-size: 0.95rem; max-height: 18em; overflow-y: auto; }  /* a pasted document scrolls */
.spec-dots { opacity: 0.6; }
.spec-reply-head { display: flex; justify-content: space-between; align-items: baseline; gap: 8px; }
.spec-copy-reply { font-size: 0.72rem; padding: 0 8px; border-radius: 4px; cursor: pointer; opacity: 0.7;
  border: 1px solid var(--border-color-primary, #d0d7de); background: transparent; }
.spec-copy-reply:hover { opacity: 1; }
.spec-line { display: inline; }
/* the drafts a round threw away: hidden unless "show rejected drafts" */
.spec-transcript .spec-rejected-run { display: none; }
.spec-transcript.spec-show-rejected .spec-rejected-run { display: inline; }
/* plain: the text alone */
.spec-transcript.spec-plain .tok { background: none !important; box-shadow: none !important; }
.spec-transcript.spec-plain .spec-rejected-run { display: none !important; }
.spec-transcript .tok:hover { outline: 1px solid rgba(28, 126, 214, 0.6); }
/* the loading banner takes no room once there is nothing to say */
#spec-loading:not(:has(.spec-loading, .spec-error, .spec-status)) { display: none !important; }
"""


def wire(feed: dict) -> dict:
    """``feed`` as the page receives it: the exchanges keyed by id and each code block's lines
    by number, instead of lists (the script turns them back into lists).

    Why: Gradio (6.31) sends a streamed value as a diff of the last one, and its diff shifts the
    index of *every* "delete" edit met while comparing a list, those nested inside its elements
    included. When a list loses elements while lists inside it shrink in the same update (a
    reply's first update drops the reply before it, whose blocks then compare against the new
    reply's), the browser deletes the wrong elements, its copy of the value no longer matches the
    server's, the next diff fails in the browser ("Cannot create property 'head' on string") and
    the reply stops streaming. A dict's deletes carry string keys, which the diff leaves alone;
    the one list left, a reply's blocks, holds no list.
    """
    items = {}
    for item in feed["items"]:
        reply = item.get("reply")
        if reply is not None:
            blocks = [{**b, "lines": {str(i): line for i, line in enumerate(b["lines"])}} if isinstance(b, dict) else b
                      for b in reply["blocks"]]
            item = {**item, "reply": {**reply, "blocks": blocks}}
        items[str(item["id"])] = item
    return {**feed, "items": items}


def unwire(feed: dict) -> dict:
    """The inverse of :func:`wire` (for API clients and tests reading the page's value)."""
    items = list(feed["items"].values()) if isinstance(feed["items"], dict) else feed["items"]
    out = []
    for item in items:
        reply = item.get("reply")
        if reply is not None:
            blocks = [{**b, "lines": list(b["lines"].values())} if isinstance(b, dict) and isinstance(b["lines"], dict)
                      else b for b in reply["blocks"]]
            item = {**item, "reply": {**reply, "blocks": blocks}}
        out.append(item)
    return {**feed, "items": out}


def feed_messages(feed: dict) -> list[dict]:
    """A feed's exchanges as chat messages, ``[{"role": "user" | "assistant", "content": HTML}]``:
    what the page shows of each, in one HTML string per message (for API clients and tests; the
    page itself patches the parts). An item without a reply gives its user message only."""
    from html import escape

    from specchat.ui.markdown import block_html

    out = []
    for item in unwire({"items": feed.get("items", [])})["items"]:
        if item.get("removed"):
            continue
        out.append({"role": "user", "content": item["user"]})
        r = item.get("reply")
        if r is not None:
            body = "".join(block_html(b) for b in r["blocks"])
            out.append({"role": "assistant", "content": (
                f'<div class="spec-label">{escape(r["label"])}</div>{r["notices"]}<div class="spec-md">{body}</div>'
                f'{r["status"]}<div class="spec-summary">{escape(r["summary"])}</div>')})
    return out
