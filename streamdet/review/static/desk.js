// streamdet review: keyboard shortcuts. On a page: s, n, u record spam / not spam /
// unsure (with the note typed, if any). On a list: j / k move, Enter opens.
"use strict";
(function () {
  function typing(ev) {
    const t = ev.target;
    return t && (t.tagName === "TEXTAREA" || t.tagName === "INPUT" || t.tagName === "SELECT" || t.isContentEditable);
  }
  function onPage(ev) {
    const button = document.querySelector('#label-form button[data-key="' + ev.key + '"]');
    if (!button) return false;
    ev.preventDefault();
    button.form.requestSubmit(button);
    return true;
  }
  let current = -1;
  function onList(ev) {
    const rows = Array.from(document.querySelectorAll("table#quilts tr.row"));
    if (!rows.length) return;
    if (ev.key === "j" || ev.key === "k") {
      ev.preventDefault();
      current = Math.max(0, Math.min(rows.length - 1, current + (ev.key === "j" ? 1 : -1)));
      rows.forEach(function (r, i) { r.classList.toggle("current", i === current); });
      rows[current].scrollIntoView({block: "nearest"});
    } else if (ev.key === "Enter" && current >= 0) {
      const link = rows[current].querySelector("a.open");
      if (link) window.location.href = link.href;
    }
  }
  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev)) return;
    if (!onPage(ev)) onList(ev);
  });
})();
