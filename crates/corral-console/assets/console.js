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
  // A running command's output: the page shows what was there when it was made; this
  // follows the console's event stream from that point (the browser's EventSource resumes
  // with Last-Event-ID after a dropped connection) and appends as it comes, to the exit.
  var output = document.querySelector("pre[data-stream]");
  if (output && window.EventSource) {
    follow(output);
  }
  // A sandbox's status, kept live from its lifecycle events (the page is right when made;
  // this says what changed since, and the reload that shows the rest).
  var status = document.querySelector("#sandbox-status[data-events]");
  if (status && window.EventSource) {
    watch(status);
  }
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

function follow(output) {
  var url = output.getAttribute("data-stream") + "?after=" + encodeURIComponent(output.getAttribute("data-after") || "0");
  var hint = document.getElementById("follow-hint");
  if (hint) {
    hint.textContent = "Running: output appears here as it comes.";
  }
  output.setAttribute("data-following", "true");
  var decoder = window.TextDecoder ? new TextDecoder("utf-8") : null;
  var source = new EventSource(url);
  function text(event) {
    if (event.encoding !== "base64") {
      return event.data;
    }
    var bin = atob(event.data);
    if (!decoder) {
      return bin;
    }
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) {
      bytes[i] = bin.charCodeAt(i);
    }
    return decoder.decode(bytes, { stream: true });
  }
  function append(node) {
    // Keep following the end only when the reader is already there.
    var atEnd = output.scrollTop + output.clientHeight >= output.scrollHeight - 4;
    output.appendChild(node);
    if (atEnd) {
      output.scrollTop = output.scrollHeight;
    }
  }
  function chunk(stream) {
    return function (message) {
      var event = JSON.parse(message.data);
      if (stream === "stderr") {
        var span = document.createElement("span");
        span.className = "stderr";
        span.textContent = text(event);
        append(span);
      } else {
        append(document.createTextNode(text(event)));
      }
    };
  }
  source.addEventListener("stdout", chunk("stdout"));
  source.addEventListener("stderr", chunk("stderr"));
  source.addEventListener("gap", function (message) {
    var event = JSON.parse(message.data);
    var span = document.createElement("span");
    span.className = "gap";
    span.textContent = "[" + (event.length == null ? "some output" : event.length + " bytes") + " lost]\n";
    append(span);
  });
  source.addEventListener("exit", function (message) {
    source.close();
    var event = JSON.parse(message.data);
    output.setAttribute("data-following", "done");
    var state = document.querySelector("#command-state [data-state]");
    if (state) {
      state.textContent = event.state;
      state.setAttribute("data-state", event.state);
      state.className = event.state === "exited" ? "badge plain" : "badge danger";
    }
    var stop = document.getElementById("command-stop");
    if (stop) {
      stop.hidden = true;
    }
    var code = document.getElementById("exit-code");
    if (code) {
      code.textContent = event.exitCode == null ? "—" : String(event.exitCode);
    }
    if (hint) {
      hint.textContent = "Finished.";
    }
    refreshFacts(hint, 3);
  });
}

// The exit event carries no times: the facts (end, duration, exit code) are read from the
// command's page itself, as the server renders them, and swapped in. The record can trail the
// exit event by a moment, so an answer without an end is asked again.
function refreshFacts(hint, tries) {
  if (!window.fetch || !window.DOMParser) {
    return;
  }
  fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
    .then(function (response) {
      return response.ok ? response.text() : Promise.reject(response.status);
    })
    .then(function (html) {
      var page = new DOMParser().parseFromString(html, "text/html");
      var ended = page.getElementById("command-ended");
      if (!ended || ended.textContent.trim() === "—") {
        return Promise.reject("no end yet");
      }
      ["command-ended", "command-duration", "exit-code"].forEach(function (id) {
        var fresh = page.getElementById(id);
        var shown = document.getElementById(id);
        if (fresh && shown) {
          shown.textContent = fresh.textContent;
        }
      });
    })
    .catch(function () {
      if (tries > 1) {
        setTimeout(function () {
          refreshFacts(hint, tries - 1);
        }, 1000);
      } else if (hint) {
        hint.textContent = "Finished. Reload for the times and duration.";
      }
    });
}

function watch(status) {
  var url = status.getAttribute("data-events") + "?after=" + encodeURIComponent(status.getAttribute("data-after") || "0");
  var news = document.getElementById("status-news");
  var source = new EventSource(url);
  status.setAttribute("data-watching", "true");
  function badge(text, kind) {
    var span = document.createElement("span");
    span.className = "badge " + kind;
    span.textContent = text;
    status.replaceChildren(span);
  }
  function say(text) {
    if (news) {
      news.textContent = text;
      news.hidden = false;
    }
  }
  source.addEventListener("sandbox.status_changed", function (message) {
    var event = JSON.parse(message.data);
    var kind = { running: "ok", creating: "warn", failed: "danger" }[event.status] || "";
    badge(event.status, kind);
    status.setAttribute("data-status", event.status);
    say("Its status changed to " + event.status + ". Reload for the details.");
  });
  ["sandbox.deleted", "sandbox.vanished"].forEach(function (name) {
    source.addEventListener(name, function () {
      source.close();
      badge("deleted", "plain");
      status.setAttribute("data-status", "deleted");
      say(name === "sandbox.deleted" ? "This sandbox was deleted. Reload for the details." : "This sandbox is gone at its provider. Reload for the details.");
    });
  });
  ["command.started", "command.exited"].forEach(function (name) {
    source.addEventListener(name, function () {
      say("Its commands changed. Reload to see the history.");
    });
  });
}
