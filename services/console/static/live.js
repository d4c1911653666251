// Live decisions: Server-Sent Events from /events, added to the list the page labels as a
// live region. Text only (textContent), so nothing a runner sent is ever read as markup.
(function () {
  "use strict";
  var list = document.getElementById("live");
  var state = document.getElementById("live-state");
  if (!list || !window.EventSource) { return; }
  var source = new EventSource(list.getAttribute("data-source"));
  source.addEventListener("open", function () { state.textContent = "Connected: new decisions appear below."; });
  source.addEventListener("error", function () { state.textContent = "Reconnecting to the live decisions..."; });
  source.addEventListener("decision", function (event) {
    var d;
    try { d = JSON.parse(event.data); } catch (e) { return; }
    var item = document.createElement("li");
    var link = document.createElement("a");
    // The run id in the query: `.` and `..` are run ids a path would resolve away.
    link.href = "/run?id=" + encodeURIComponent(d.run_id);
    link.textContent = d.run_id;
    var action = document.createElement("span");
    action.className = "action";
    action.textContent = d.action;
    var note = document.createElement("span");
    note.className = "note";
    note.textContent = "attempt " + d.attempt + ", runner " + d.runner_id + ", " + d.decided_at;
    item.append(link, " ", action, " " + d.reason + " ", note);
    list.insertBefore(item, list.firstChild);
    while (list.children.length > 50) { list.removeChild(list.lastChild); }
  });
})();
