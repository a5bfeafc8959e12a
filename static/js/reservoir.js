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

// A <time data-age> (a pool card's DCGM reading) is sent as the moment itself, so that the markup stays the same
// between two readings and the dashboard's poll keeps getting its empty 204; here it says how old that is, in the
// page's language ("5 minutes ago", "5分钟前"), kept current while no new markup arrives. Without script the
// moment stays, in UTC, and so does its full date in the title.
const AGE_UNITS = [
  ["day", 86400],
  ["hour", 3600],
  ["minute", 60],
  ["second", 1],
];
function showAges() {
  const words = new Intl.RelativeTimeFormat(document.documentElement.lang || undefined, { numeric: "auto" });
  for (const element of document.querySelectorAll("time[data-age]")) {
    const seconds = Math.max(0, (Date.now() - Date.parse(element.dateTime)) / 1000);
    const [unit, size] = AGE_UNITS.find(([, length]) => seconds >= length) || AGE_UNITS[AGE_UNITS.length - 1];
    element.textContent = words.format(-Math.floor(seconds / size), unit);
  }
}
document.addEventListener("DOMContentLoaded", showAges);
document.addEventListener("htmx:afterSettle", showAges);
setInterval(showAges, 10000);
