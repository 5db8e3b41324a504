// Progressive enhancement only: every page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // Copy buttons: <button data-copy="ELEMENT-ID">. Hidden until scripts run, since they need them.
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    var target = document.getElementById(button.getAttribute("data-copy"));
    if (!target || !navigator.clipboard) {
      return;
    }
    button.hidden = false;
    var label = button.textContent;
    button.addEventListener("click", function () {
      navigator.clipboard.writeText(target.textContent.trim()).then(function () {
        button.textContent = "Copied";
        button.classList.add("is-done");
        setTimeout(function () {
          button.textContent = label;
          button.classList.remove("is-done");
        }, 2000);
      });
    });
  });
  // Select-on-focus for the one-time key, so it can be copied by hand too.
  document.querySelectorAll("[data-select-all]").forEach(function (el) {
    el.addEventListener("click", function () {
      var range = document.createRange();
      range.selectNodeContents(el);
      var sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
    });
  });
});
