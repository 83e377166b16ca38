// The DLQ console's only script, embedded in the binary. Everything works without it; it adds a "select every
// entry on this page" checkbox to the list, and reloads a page that asks for it (`data-refresh-s` on its body,
// the overview) every so many seconds, unless something was typed in one of its forms.
document.addEventListener("DOMContentLoaded", () => {
  const every = Number(document.body.dataset.refreshS || 0);
  if (every > 0) {
    let edited = false;
    document.addEventListener("input", () => { edited = true; });
    setInterval(() => { if (!edited) window.location.reload(); }, every * 1000);
  }
  const all = document.getElementById("select-page");
  if (!all) return;
  const boxes = () => document.querySelectorAll("input[name=ids]");
  all.addEventListener("change", () => boxes().forEach((box) => { box.checked = all.checked; }));
});
