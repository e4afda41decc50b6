// The light / dark switch (a button at the top right). Gradio's dark theme is the `dark` class on
// <body>, which Gradio sets from the system's preference when the app mounts (and again when that
// preference changes). A choice made with the switch is kept in localStorage and wins over both:
// it is applied before the page is first drawn (the colour scheme of <html> at once, <body>'s class
// as soon as <body> exists) and put back whenever Gradio changes the class. No choice: the
// system's, as Gradio does it.
(function theme() {
  const KEY = 'specchat-theme';
  const chosen = () => { try { return localStorage.getItem(KEY); } catch (e) { return null; } };
  let button = null;
  function apply() {
    const choice = chosen(), body = document.body;
    if (choice) {
      document.documentElement.style.colorScheme = choice;
      if (body && body.classList.contains('dark') !== (choice === 'dark')) body.classList.toggle('dark', choice === 'dark');
    }
    if (button) {
      const dark = !!body && body.classList.contains('dark');
      button.textContent = dark ? '☀ light' : '☾ dark';
      button.title = dark ? 'switch to the light theme' : 'switch to the dark theme';
    }
  }
  function start() {
    new MutationObserver(apply).observe(document.body, {attributes: true, attributeFilter: ['class']});
    button = document.createElement('button');
    button.type = 'button'; button.id = 'spec-theme';
    button.addEventListener('click', () => {
      try { localStorage.setItem(KEY, document.body.classList.contains('dark') ? 'light' : 'dark'); } catch (e) { /* private mode */ }
      apply();
    });
    document.body.appendChild(button);
    apply();
  }
  apply();
  if (document.body) start();
  else new MutationObserver((_, seen) => {  // the <head> is still being read: wait for <body>
    if (!document.body) return;
    seen.disconnect();
    apply();
    if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start); else start();
  }).observe(document.documentElement, {childList: true});
})();
