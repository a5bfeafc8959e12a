// The portal's own script, kept out of the pages so the Content-Security-Policy can forbid inline script:
// a control marked data-autosubmit (the language switcher) submits its form when it changes.
document.addEventListener("change", (event) => {
  if (event.target.matches("[data-autosubmit]")) {
    event.target.form.submit();
  }
});

// A live part that could not be refreshed (the portal or the network down) or an action the portal refused says so
// (#live-status, its words in the page's language), instead of leaving the page as it was without a word; the next
// request that succeeds clears it.
function sayLiveStatus(kind, status) {
  const region = document.getElementById("live-status");
  if (!region) {
    return;
  }
  region.textContent = kind ? region.dataset[kind].replace("STATUS", String(status)) : "";
  region.hidden = !kind;
}
document.addEventListener("htmx:sendError", () => sayLiveStatus("offline"));
document.addEventListener("htmx:responseError", (event) => {
  const status = event.detail.xhr.status;
  const reading = (event.detail.requestConfig || {}).verb === "get";
  sayLiveStatus(reading || status >= 500 ? "offline" : "refused", status);
});
document.addEventListener("htmx:afterRequest", (event) => {
  if (event.detail.successful) {
    sayLiveStatus("", 0);
  }
});
