// The keyboard. Enter sends and Shift+Enter starts a new line (Gradio's textbox does both); Esc
// stops the streaming reply (what the Stop button does, and only while a reply streams or a
// message waits); ↑ in the empty message box puts the last message sent back into it, the caret
// at its end. lastSent and putBack are kept apart for an edit-and-resend to reuse. Text typed and
// not sent survives a reload (below).
(function keys() {
  const box = () => document.querySelector('#spec-input textarea');
  // the text of the last message in the transcript, as typed (its bubble carries it in data-text;
  // a Continue's bubble has none)
  function lastSent() {
    const sent = [...document.querySelectorAll('#spec-chat [data-testid=user][data-text]')];
    return sent.length ? sent[sent.length - 1].dataset.text : null;
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
  document.addEventListener('keydown', (ev) => {
    if (ev.defaultPrevented || ev.isComposing || ev.altKey || ev.ctrlKey || ev.metaKey) return;
    if (ev.key === 'Escape') {
      // a menu or dialog takes its own Esc
      if (!busy() || ev.target.closest?.('[role=listbox], [role=combobox], [role=dialog]')) return;
      const stop = stopButton();
      if (stop) { ev.preventDefault(); stop.click(); }
    } else if (ev.key === 'ArrowUp' && !ev.shiftKey && ev.target === box() && ev.target.value === '') {
      if (putBack(lastSent())) ev.preventDefault();
    }
  });
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
  // Edit puts the last message into the box (from the server): the caret goes there, at its end
  document.addEventListener('click', (ev) => {
    if (!ev.target.closest?.('#spec-edit')) return;
    let waited = 0;
    const focus = setInterval(() => {
      const b = box();
      if (b && b.value) { clearInterval(focus); b.focus(); b.setSelectionRange(b.value.length, b.value.length); }
      else if ((waited += 100) > 5000) clearInterval(focus);
    }, 100);
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
