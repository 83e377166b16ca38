// The DLQ console's only script, embedded in the binary. Everything works without it; it adds a "select every
// entry on this page" checkbox to the list.
document.addEventListener("DOMContentLoaded", () => {
  const all = document.getElementById("select-page");
  if (!all) return;
  const boxes = () => document.querySelectorAll("input[name=ids]");
  all.addEventListener("change", () => boxes().forEach((box) => { box.checked = all.checked; }));
});
