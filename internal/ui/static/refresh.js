// The pages work without this script; with it, the open page refreshes its
// content in place every data-refresh seconds while it is visible (not a
// full reload, so scrolling and keyboard focus stay where they are).
(function () {
  var every = (parseInt(document.body.dataset.refresh, 10) || 10) * 1000;
  function refresh() {
    if (document.hidden) return;
    fetch(location.href, { headers: { Accept: "text/html" }, cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var next = new DOMParser().parseFromString(html, "text/html").getElementById("main");
        var main = document.getElementById("main");
        if (next && main && !main.contains(document.activeElement)) main.innerHTML = next.innerHTML;
      })
      .catch(function () { /* the agent restarting: the next tick tries again */ });
  }
  setInterval(refresh, every);
})();
