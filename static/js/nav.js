/* The main navigation on narrow screens: a "Menu" button shows and hides the links.
 *
 * Loaded in <head>: it marks the document as scripted at once (class "js" on <html>), so the
 * stylesheet folds the links behind the button only when the button works; without
 * JavaScript the links simply wrap. The button's aria-expanded says whether the menu is open;
 * Escape closes it and gives the focus back to the button.
 */
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  document.addEventListener("DOMContentLoaded", () => {
    const button = document.querySelector(".nav-toggle");
    const menu = document.getElementById("nav-menu");
    if (!button || !menu) return;
    function set(open) {
      button.setAttribute("aria-expanded", open ? "true" : "false");
      menu.classList.toggle("open", open);
    }
    button.addEventListener("click", () => set(button.getAttribute("aria-expanded") !== "true"));
    menu.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && menu.classList.contains("open")) {
        set(false);
        button.focus();
      }
    });
  });
})();
