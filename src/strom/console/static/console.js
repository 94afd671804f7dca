// strom console: progress for searches and forms, live charts. Pages work without it.
"use strict";

function pollSearch(results, url) {
  fetch(url, {cache: "no-store"}).then((answer) => answer.text()).then((html) => {
    results.innerHTML = html;
    const state = results.querySelector("[data-state]");
    if (state && state.dataset.state === "running") {
      setTimeout(() => pollSearch(results, url), 300);
    }
  }).catch((error) => {
    results.innerHTML = '<p class="notice error" role="alert">The console stopped answering: ' +
      String(error) + "</p>";
  });
}

function searchInBackground(form) {
  const results = document.getElementById("results");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = new URLSearchParams(new FormData(form)).toString();
    const start = form.action.replace(/\/messages$/, "/search") + "?" + query;
    history.replaceState(null, "", form.action + "?" + query);
    results.innerHTML = '<p class="progress" data-state="running" role="status">Starting the search…</p>';
    fetch(start, {cache: "no-store"}).then((answer) => {
      if (!answer.ok) {
        return answer.text().then((html) => {
          const page = new DOMParser().parseFromString(html, "text/html");
          const notice = page.querySelector(".notice.error");
          results.innerHTML = notice ? notice.outerHTML : "<p class='notice error'>" + answer.statusText + "</p>";
        });
      }
      return answer.json().then((started) => pollSearch(results, started.url));
    });
  });
}

function showWorking(form) {
  form.addEventListener("submit", () => {
    const button = form.querySelector("button");
    if (button) { button.disabled = true; button.textContent = "Working…"; }
  });
}

function refreshCharts(box) {
  setInterval(() => {
    fetch(box.dataset.refresh, {cache: "no-store"})
      .then((answer) => answer.text()).then((html) => { box.innerHTML = html; })
      .catch(() => {});
  }, 2000);
}

document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form")) {
    if (form.getAttribute("name") === "Search messages") searchInBackground(form);
    else if (form.method === "post") showWorking(form);
  }
  const charts = document.getElementById("throughput");
  if (charts) refreshCharts(charts);
});
