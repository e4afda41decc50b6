(mode) => {
  const root = document.querySelector('#spec-chat .spec-transcript');
  if (root) root.classList.toggle('spec-plain', mode === 'plain');
}
