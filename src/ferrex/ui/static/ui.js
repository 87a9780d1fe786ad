// ferrex ui: the only script. Every page works without it; it only saves clicks.
document.addEventListener("DOMContentLoaded", () => {
  // The namespace switcher submits on change.
  for (const select of document.querySelectorAll("select[data-autosubmit]")) {
    select.addEventListener("change", () => select.form.submit());
  }
  // "Select all" boxes tick every memory of their table.
  for (const box of document.querySelectorAll("input[data-check-all]")) {
    box.addEventListener("change", () => {
      for (const other of box.closest("form").querySelectorAll("input[name=ids]")) {
        other.checked = box.checked;
      }
    });
  }
});
