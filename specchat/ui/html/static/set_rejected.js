(show) => {
  const root = document.querySelector('#spec-chat .spec-transcript');
  if (root) root.classList.toggle('spec-show-rejected', !!show);
}
