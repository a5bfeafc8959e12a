// The portal's own script, kept out of the pages so the Content-Security-Policy can forbid inline script:
// a control marked data-autosubmit (the language switcher) submits its form when it changes.
document.addEventListener("change", (event) => {
  if (event.target.matches("[data-autosubmit]")) {
    event.target.form.submit();
  }
});
