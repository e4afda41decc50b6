// The keyboard. Enter sends and Shift+Enter starts a new line (Gradio's textbox does both); Esc
// stops the streaming reply (what the Stop button does, and only while a reply streams or a
// message waits); ↑ in the empty message box edits the last message, as the Edit button does: its
// text goes into the box (the caret at its end), the exchange stays, marked, until the edited
// message is sent, which replaces it and its reply (the hidden #spec-editing box tells the server
// which one: Handlers.take_message); Esc, emptying the box or the note's cancel button cancels.
// Text typed and not sent survives a reload (below).
(function keys() {
  const box = () => document.querySelector('#spec-input textarea');
  // the text of the last message in the transcript, as typed (its bubble carries it in data-text;
  // a Continue's bubble has none)
  function lastSent() {
    const sent = [...document.querySelectorAll('#spec-chat [data-testid=user][data-text]')];
    return sent.length ? sent[sent.length - 1] : null;
  }
  function putBack(text) {
    const b = box();
    if (!b || text === null) return false;
    b.value = text;
    b.dispatchEvent(new Event('input', {bubbles: true}));  // Gradio's textbox reads its value from this
    b.focus();
    b.setSelectionRange(text.length, text.length);
    return true;
  }
  const busy = () => document.querySelector('#spec-chat .spec-running, #spec-chat .spec-unqueue');
  const stopButton = () => document.getElementById('spec-stop');
  // -- editing the last message ------------------------------------------------------------------
  const editingBox = () => document.querySelector('#spec-editing textarea, #spec-editing input');
  let editing = null;  // the exchange element being edited
  let noteTimer = null;
  function note(text, cancel) {  // the line above the message box (none: text null)
    let n = document.getElementById('spec-edit-note');
    const row = document.querySelector('#spec-input')?.closest('.row, .form') || document.querySelector('#spec-input');
    if (!n && text !== null && row) {
      n = document.createElement('div');
      n.id = 'spec-edit-note';
      n.setAttribute('role', 'status');
      row.parentNode.insertBefore(n, row);
    }
    if (!n) return;
    clearTimeout(noteTimer);
    n.hidden = text === null;
    n.textContent = text || '';
    if (cancel) {
      const b = document.createElement('button');
      b.type = 'button'; b.className = 'spec-edit-cancel'; b.textContent = 'cancel';
      b.addEventListener('click', () => cancelEdit(true));
      n.append(' ', b);
    } else if (text !== null) {
      noteTimer = setTimeout(() => { if (!editing) note(null); }, 6000);
    }
  }
  const unmark = () => document.querySelectorAll('#spec-chat .spec-editing').forEach((e) => e.classList.remove('spec-editing'));
  function setEditing(ex) {  // the hidden box the server reads with the message (Gradio reads its input event)
    const e = editingBox();
    if (e) { e.value = ex ? ex.dataset.ex : ''; e.dispatchEvent(new Event('input', {bubbles: true})); }
    unmark();
    editing = ex;
    // the exchange and the Continues after it (their bubbles carry no text): replaced together
    for (let e = ex; e; e = e.nextElementSibling) if (e.classList.contains('spec-ex')) e.classList.add('spec-editing');
  }
  function startEdit() {
    const b = box();
    if (!b) return false;
    if (b.value.trim()) { note('The message box has text in it: send it or empty it first, then Edit puts your last message there.'); return false; }
    if (busy()) { note('Edit: a reply is still being written or a message waits. Stop them first.'); return false; }
    const bubble = lastSent();
    if (!bubble) { note('There is no message to edit yet.'); return false; }
    putBack(bubble.dataset.text);
    setEditing(bubble.closest('.spec-ex'));
    // the message being edited in view (the transcript alone scrolls: the box stays where it is)
    const r = bubble.closest('.spec-transcript'), bb = bubble.getBoundingClientRect(), rb = r && r.getBoundingClientRect();
    if (rb && (bb.top < rb.top || bb.bottom > rb.bottom)) r.scrollTo({top: r.scrollTop + bb.top - rb.top - 8, behavior: 'smooth'});
    note('✎ Editing your last message: Send replaces it and its reply (Esc cancels).', true);
    return true;
  }
  function cancelEdit(empty) {  // the box emptied too when the cancel is asked for (Esc, the note's button)
    if (!editing) return;
    setEditing(null);
    note(null);
    if (empty) putBack('');
  }
  function sent() {  // Enter or Send: the server takes the edit with the message and empties #spec-editing
    if (!editing || !box()?.value.trim()) return;
    unmark();
    editing = null;
    note(null);
  }
  document.addEventListener('keydown', (ev) => {
    if (ev.defaultPrevented || ev.isComposing || ev.altKey || ev.ctrlKey || ev.metaKey) return;
    if (ev.key === 'Escape') {
      // a menu or dialog takes its own Esc
      if (ev.target.closest?.('[role=listbox], [role=combobox], [role=dialog]')) return;
      if (editing && !busy()) { ev.preventDefault(); cancelEdit(true); return; }
      if (!busy()) return;
      const stop = stopButton();
      if (stop) { ev.preventDefault(); stop.click(); }
    } else if (ev.key === 'ArrowUp' && !ev.shiftKey && ev.target === box() && ev.target.value === '') {
      if (startEdit()) ev.preventDefault();
    }
  });
  document.addEventListener('click', (ev) => {
    if (ev.target.closest?.('#spec-edit')) startEdit();
    else if (ev.target.closest?.('#spec-send')) sent();
    else if (ev.target.closest?.('#spec-export')) showExport();
  }, true);
  // Export: its files are offered below the chat's buttons, often under the window's edge: once
  // they are there, they are scrolled into view (as little as it takes)
  function showExport() {
    let waited = 0;
    const look = setInterval(() => {
      const link = document.querySelector('#spec-export-file a');
      if (link) { clearInterval(look); document.getElementById('spec-export-file').scrollIntoView({block: 'nearest'}); }
      else if ((waited += 200) > 10000) clearInterval(look);
    }, 200);
  }
  document.addEventListener('input', (ev) => { if (ev.target === box() && !ev.target.value) cancelEdit(false); }, true);
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing && ev.target === box()) sent();
  }, true);
  // What is typed in the message box and not sent yet is kept in this browser (localStorage) and
  // put back after a reload. A Send (Enter, the button) forgets it: the box is emptied by the
  // server then, which fires no input event.
  const DRAFT = 'specchat-draft';
  const keep = (text) => { try { if (text) localStorage.setItem(DRAFT, text); else localStorage.removeItem(DRAFT); } catch (e) { /* private mode */ } };
  document.addEventListener('input', (ev) => { if (ev.target === box()) keep(ev.target.value); }, true);
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing && ev.target === box()) keep('');
  }, true);
  document.addEventListener('click', (ev) => {
    if (ev.target.closest?.('#spec-send')) keep('');
  }, true);
  let tries = 0;
  const restore = setInterval(() => {
    const b = box();
    if (!b && ++tries < 100) return;
    clearInterval(restore);
    let draft = null;
    try { draft = localStorage.getItem(DRAFT); } catch (e) { /* private mode */ }
    if (b && draft && !b.value) putBack(draft);
  }, 200);
})();
