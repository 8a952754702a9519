// simpleperf lab web: the labs that are up, drawn from their models (/api/labs) and
// updated from their interfaces' counters (/api/live, server-sent events, once a second).
// Every request carries the console's token; the page keeps what it shows in
// window.simpleperfConsole, which the browser tests read.
"use strict";
(function () {
  const token = document.body.dataset.token;
  const headers = { "X-Simpleperf-Token": token };
  const HISTORY = 120; // readings a chart keeps (two minutes)
  const state = { labs: [], lab: null, live: null, updates: 0, series: {}, selected: null,
                  selectedNode: null, timeline: [], refused: [], runs: [] };
  window.simpleperfConsole = state;
  let graph = null;
  let chart = null;
  let labsText = "";

  function say(text) {
    document.getElementById("status").textContent = text;
  }

  function rate(bits) {
    if (bits === null || bits === undefined) return "–";
    for (const [factor, unit] of [[1e9, "Gbit/s"], [1e6, "Mbit/s"], [1e3, "kbit/s"]]) {
      if (bits >= factor) return (bits / factor).toFixed(1) + " " + unit;
    }
    return bits.toFixed(0) + " bit/s";
  }

  // A direction's queue (its sending end's root qdisc) and drops, when there are any
  function queued(way) {
    if (!way) return "";
    const parts = [];
    if (way.queue_packets) {
      parts.push("queue " + way.queue_packets + " pkt" + (way.queue_delay ?
        ", " + (way.queue_delay * 1e3).toFixed(0) + " ms" : ""));
    }
    if (way.dropped) parts.push(way.dropped + " dropped");
    if (way.marked) parts.push(way.marked + " marked");
    return parts.length ? " (" + parts.join(", ") + ")" : "";
  }

  async function loadLabs() {
    const answer = await fetch("/api/labs", { headers });
    if (!answer.ok) {
      say(await answer.text());
      return;
    }
    const text = await answer.text();
    if (text === labsText) return; // nothing changed: the drawing stays put
    labsText = text;
    state.labs = JSON.parse(text).labs;
    const select = document.getElementById("lab");
    const wanted = state.lab ? state.lab.lab : null;
    select.replaceChildren(...state.labs.map((lab) => new Option(lab.lab, lab.lab)));
    const lab = state.labs.find((found) => found.lab === wanted) || state.labs[0];
    if (lab) {
      select.value = lab.lab;
      draw(lab);
    } else {
      state.lab = null;
      if (graph) graph.destroy();
      graph = null;
      say("no lab is up: simpleperf lab up NAME");
    }
  }

  function draw(lab) {
    const same = state.lab && state.lab.lab === lab.lab;
    state.lab = lab;
    // where nodes were placed: kept with the lab (every browser draws it the same way)
    const saved = lab.positions && Object.keys(lab.positions).length ? lab.positions : null;
    const kept = same && graph ? positionsOf(graph) : saved;
    const elements = lab.nodes.map((node) => ({
      data: { id: node.id, kind: node.kind },
      position: kept && kept[node.id] ? kept[node.id] : undefined,
    })).concat(lab.links.map((link) => ({
      data: { id: link.name, source: link.a, target: link.b, label: link.name,
              down: link.down ? "yes" : "no" },
    })));
    if (graph) graph.destroy();
    const placed = kept && lab.nodes.every((node) => kept[node.id]);
    graph = cytoscape({
      container: document.getElementById("graph"),
      maxZoom: 1.5, // a lab of two nodes is not drawn the size of the window
      elements: elements,
      layout: placed ? { name: "preset" } : { name: "cose", randomize: false, animate: false },
      style: [
        { selector: "node", style: { label: "data(id)", "text-valign": "center",
                                     color: "#fff", "font-size": 11 } },
        { selector: "node[kind = 'host']", style: { shape: "ellipse",
                                                    "background-color": "#3572a5" } },
        { selector: "node[kind = 'router']", style: { shape: "diamond",
                                                      "background-color": "#c0392b" } },
        { selector: "node[kind = 'switch']", style: { shape: "round-rectangle",
                                                      "background-color": "#7f8c8d" } },
        { selector: "edge", style: { label: "data(label)", "font-size": 9, width: 2,
                                     "curve-style": "bezier", "line-color": "#888",
                                     "text-background-color": "#fff",
                                     "text-background-opacity": 0.8 } },
        { selector: "edge[down = 'yes']", style: { "line-style": "dashed",
                                                   "line-color": "#c0392b" } },
        { selector: "edge.path", style: { "line-color": "#27ae60" } },
        { selector: "edge:selected", style: { "line-color": "#e67e22" } },
      ],
    });
    state.drawn = { nodes: graph.nodes().length, links: graph.edges().length };
    graph.on("dragfree", "node", () => savePositions(lab.lab));
    if (!placed) savePositions(lab.lab); // the first layout is kept too: it stays put
    graph.on("tap mouseover", "edge", (event) => select(event.target.id()));
    graph.on("tap", "node", (event) => selectNode(event.target.id()));
    if (!same) state.series = {};
    const hosts = lab.nodes.filter((node) => node.kind === "host").map((node) => node.id);
    for (const [name, pick] of [["from", 0], ["to", hosts.length - 1]]) {
      const choice = document.querySelector("#flow select[name=" + name + "]");
      const kept = choice.value;
      choice.replaceChildren(...hosts.map((host) => new Option(host, host)));
      choice.value = hosts.includes(kept) ? kept : hosts[pick];
    }
    say(lab.lab + ": " + lab.nodes.length + " nodes, " + lab.links.length + " links, " +
        lab.shaper);
  }

  async function savePositions(name) {
    const answer = await fetch("/api/labs/" + encodeURIComponent(name) + "/positions", {
      method: "POST", headers: Object.assign({ "Content-Type": "application/json" }, headers),
      body: JSON.stringify(positionsOf(graph)) });
    state.positionsSaved = answer.ok ? "saved" : await answer.text();
  }

  function positionsOf(drawn) {
    const positions = {};
    drawn.nodes().forEach((node) => {
      positions[node.id()] = { x: node.position("x"), y: node.position("y") };
    });
    return positions;
  }

  function select(name) {
    const link = state.lab && state.lab.links.find((found) => found.name === name);
    if (!link) return;
    state.selected = name;
    document.getElementById("selected").textContent =
      link.name + ": " + link.a + " (" + link.a_interface + ") – " + link.b + " (" +
      link.b_interface + ")" + (link.down ? ", down" : "");
    document.getElementById("properties").textContent =
      link.a + " → " + link.b + ": " + link.a_to_b.described + "\n" +
      link.b + " → " + link.a + ": " + link.b_to_a.described;
    document.getElementById("shape").hidden = false;
    document.getElementById("node").hidden = true;
    if (chart) chart.destroy();
    chart = new uPlot({
      width: 320, height: 200, title: "throughput (Mbit/s)",
      series: [{}, { label: link.a + " → " + link.b, stroke: "#3572a5" },
               { label: link.b + " → " + link.a, stroke: "#c0392b" }],
    }, chartData(name), document.getElementById("chart"));
  }

  function chartData(name) {
    const series = state.series[name] || { t: [], ab: [], ba: [] };
    const mbits = (values) => values.map((bits) => (bits === null ? null : bits / 1e6));
    return [series.t, mbits(series.ab), mbits(series.ba)];
  }

  function onLive(live) {
    state.live = live;
    state.updates += 1;
    const mine = state.lab ? live.labs[state.lab.lab] : null;
    if (!mine || !graph) return;
    for (const link of mine.links) {
      const forward = link.a_to_b ? link.a_to_b.bits_per_second : null;
      const back = link.b_to_a ? link.b_to_a.bits_per_second : null;
      const edge = graph.getElementById(link.name);
      edge.data("label", link.name + "  → " + rate(forward) + queued(link.a_to_b) +
                "  ← " + rate(back) + queued(link.b_to_a));
      const busiest = Math.max(forward || 0, back || 0);
      edge.style("width", 2 + Math.min(10, 3 * Math.log10(1 + busiest / 1e5)));
      const series = state.series[link.name] || (state.series[link.name] = {
        t: [], ab: [], ba: [], queue_ab: [], queue_ba: [] });
      series.t.push(live.at);
      series.ab.push(forward);
      series.ba.push(back);
      series.queue_ab.push(link.a_to_b ? link.a_to_b.queue_packets : null);
      series.queue_ba.push(link.b_to_a ? link.b_to_a.queue_packets : null);
      if (series.t.length > HISTORY) {
        for (const kept of Object.values(series)) kept.shift();
      }
    }
    if (chart && state.selected) chart.setData(chartData(state.selected));
    showFlows(mine.flows || []);
    showTimeline(mine.timeline || []);
    showCaptures(mine.captures || []);
    say(state.lab.lab + ": live, " + new Date(live.at * 1000).toLocaleTimeString());
  }

  function selectNode(name) {
    state.selectedNode = name;
    document.getElementById("selected").textContent = "node " + name;
    document.getElementById("properties").textContent = "";
    document.getElementById("shape").hidden = true;
    document.getElementById("node").hidden = false;
  }

  // The lab's timeline, newest first: its journal (every change, typed or from the page,
  // and what routing did after it; the page's flows and captures), what its routers said
  // of their neighbours, and the page's own refusals
  function showTimeline(entries) {
    const shown = entries.map((entry) => ({ at: entry.at, by: entry.by,
      text: (entry.by === "router" ? "router " : "") + entry.what +
            (entry.by === "page" ? " (page)" : "") }))
      .concat(state.refused).sort((a, b) => a.at - b.at);
    const texts = shown.map((entry) => entry.text);
    if (texts.join("\n") === state.timeline.join("\n")) return;
    state.timeline = texts;
    document.getElementById("timeline").replaceChildren(...shown.reverse().map((entry) => {
      const item = document.createElement("li");
      item.className = entry.by;
      item.textContent = new Date(entry.at * 1000).toLocaleTimeString() + " " + entry.text;
      return item;
    }));
  }

  function happened(text) {
    if (!text.startsWith("refused")) return; // the rest is in the lab's journal
    state.refused.push({ at: Date.now() / 1000, by: "refused", text: text });
    showTimeline(state.live && state.lab && state.live.labs[state.lab.lab] ?
                 state.live.labs[state.lab.lab].timeline || [] : []);
  }

  // A change to the selected link (or node), through the code `simpleperf lab link` (or
  // `lab node`) runs
  async function act(body, kind) {
    const node = kind === "nodes";
    const name = node ? state.selectedNode : state.selected;
    if (!state.lab || !name) return;
    const said = document.getElementById("said");
    said.textContent = "…";
    const answer = await fetch("/api/labs/" + encodeURIComponent(state.lab.lab) + "/" +
                               (node ? "nodes" : "links") + "/" + encodeURIComponent(name), {
      method: "POST", headers: Object.assign({ "Content-Type": "application/json" }, headers),
      body: JSON.stringify(body) });
    const text = await answer.text();
    said.textContent = answer.ok ? JSON.parse(text).done : text;
    state.lastAction = { ok: answer.ok, said: said.textContent };
    happened((answer.ok ? "" : "refused: ") + said.textContent +
             (answer.ok && JSON.parse(text).routing ? "; " + JSON.parse(text).routing : ""));
    labsText = ""; // the lab's record changed: draw it anew
    await loadLabs();
    if (node) selectNode(name); else select(name);
  }

  document.getElementById("shape").addEventListener("submit", (event) => {
    event.preventDefault();
    const wanted = {};
    for (const input of event.target.querySelectorAll("input")) {
      if (input.value.trim()) wanted[input.name] = input.value.trim();
    }
    act({ action: "set", set: wanted });
  });
  document.getElementById("down").addEventListener("click", () => act({ action: "down" }));
  document.getElementById("up").addEventListener("click", () => act({ action: "up" }));
  document.getElementById("node-down").addEventListener(
    "click", () => act({ action: "down" }, "nodes"));
  document.getElementById("node-up").addEventListener(
    "click", () => act({ action: "up" }, "nodes"));
  window.simpleperfConsole.positions = () => (graph ? positionsOf(graph) : null);
  window.simpleperfConsole.selectNode = selectNode;
  window.simpleperfConsole.act = act;
  window.simpleperfConsole.select = select;

  // Flows: started from the form as an experiment's flow table, followed live with
  // theory's goodput beside them, stopped from their row
  let flowChart = null;

  function showFlows(flows) {
    state.flows = flows;
    const rows = flows.map((flow) => {
      const last = flow.samples.length ? flow.samples[flow.samples.length - 1] : {};
      const row = document.createElement("tr");
      const cells = [flow.id, flow.kind + " " + flow.from + "→" + flow.to,
        flow.rpm === null || flow.rpm === undefined ? rate(last.bits_per_second) :
          flow.rpm.toFixed(0) + " RPM", rate(flow.predicted_bits_per_second),
        last.rtt_ms === undefined || last.rtt_ms === null ? "–" :
          last.rtt_ms.toFixed(1) + " ms",
        last.cwnd_bytes ? (last.cwnd_bytes / 1024).toFixed(0) + " KB" : "–", flow.state];
      for (const text of cells) {
        const cell = document.createElement("td");
        cell.textContent = String(text);
        row.append(cell);
      }
      const stop = document.createElement("button");
      stop.textContent = "stop";
      stop.className = "stop";
      stop.disabled = flow.state !== "running";
      stop.addEventListener("click", () => stopFlow(flow.id));
      const cell = document.createElement("td");
      cell.append(stop);
      row.append(cell);
      row.addEventListener("click", () => { state.chartedFlow = flow.id; });
      return row;
    });
    document.querySelector("#flows tbody").replaceChildren(...rows);
    const charted = flows.find((flow) => flow.id === state.chartedFlow) ||
      flows[flows.length - 1];
    if (graph) { // the charted flow's path, highlighted on the drawing
      const path = charted ? charted.path || [] : [];
      graph.edges().forEach((edge) => {
        if (path.includes(edge.id())) edge.addClass("path"); else edge.removeClass("path");
      });
      state.highlighted = path;
    }
    if (!charted) return;
    const times = charted.samples.map((sample) => sample.at);
    const data = [times,
      charted.samples.map((sample) => (sample.bits_per_second ?? null) === null ? null :
        sample.bits_per_second / 1e6),
      times.map(() => charted.predicted_bits_per_second === null ? null :
        charted.predicted_bits_per_second / 1e6),
      charted.samples.map((sample) => sample.rtt_ms ?? null)];
    if (!flowChart || flowChart.charted !== charted.id) {
      if (flowChart) flowChart.destroy();
      flowChart = new uPlot({
        width: 320, height: 200,
        title: "flow " + charted.id + ": goodput (Mbit/s) and RTT (ms)",
        series: [{}, { label: "goodput", stroke: "#3572a5" },
                 { label: "theory", stroke: "#27ae60", dash: [6, 4] },
                 { label: "RTT", stroke: "#c0392b", scale: "ms" }],
        axes: [{}, {}, { scale: "ms", side: 1 }],
      }, data, document.getElementById("flow-chart"));
      flowChart.charted = charted.id;
    } else {
      flowChart.setData(data);
    }
  }

  async function startFlow(asked) {
    const answer = await fetch("/api/labs/" + encodeURIComponent(state.lab.lab) + "/flows", {
      method: "POST", headers: Object.assign({ "Content-Type": "application/json" }, headers),
      body: JSON.stringify(asked) });
    const text = await answer.text();
    const started = answer.ok ? JSON.parse(text) : null;
    state.lastFlow = { ok: answer.ok, said: started ? "flow " + started.id : text.trim() };
    if (started) state.chartedFlow = started.id;
    happened(answer.ok ? "started flow " + started.id + ": " + started.kind + " " +
             started.from + "→" + started.to : "refused: " + text.trim());
    return started;
  }

  async function stopFlow(number) {
    const answer = await fetch("/api/labs/" + encodeURIComponent(state.lab.lab) +
                               "/flows/" + number + "/stop", { method: "POST", headers });
    happened(answer.ok ? "stopped flow " + number : "refused: " + (await answer.text()));
  }

  document.getElementById("flow").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = event.target;
    const asked = { kind: form.kind.value, from: form.from.value, to: form.to.value };
    if (form.duration.value.trim()) asked.duration = form.duration.value.trim();
    if (form.rate.value.trim() && asked.kind === "udp") asked.rate = form.rate.value.trim();
    startFlow(asked);
  });
  window.simpleperfConsole.startFlow = startFlow;
  window.simpleperfConsole.stopFlow = stopFlow;

  // Captures: `lab capture`'s points (a link, or NODE:IFACE), started and stopped from
  // the page; an ended one's pcapng downloads from its row, with `lab analyze`'s tables
  function showCaptures(found) {
    state.captures = found;
    const rows = found.map((taken) => {
      const row = document.createElement("tr");
      const size = taken.bytes === null ? "–" : (taken.bytes / 1e3).toFixed(0) + " KB";
      for (const text of [taken.id, taken.where + (taken.filter ? " [" + taken.filter + "]" :
                                                   ""), taken.state, size,
                          taken.packets === null ? "–" : taken.packets]) {
        const cell = document.createElement("td");
        cell.textContent = String(text);
        row.append(cell);
      }
      const cell = document.createElement("td");
      if (taken.state === "capturing") {
        const stop = document.createElement("button");
        stop.textContent = "stop";
        stop.className = "stop-capture";
        stop.addEventListener("click", () => stopCapture(taken.id));
        cell.append(stop);
      } else if (taken.state === "ended") {
        const link = document.createElement("a");
        link.textContent = "pcapng";
        link.className = "pcap";
        link.href = "/api/labs/" + encodeURIComponent(taken.lab) + "/captures/" + taken.id +
          "/pcap?token=" + encodeURIComponent(token);
        link.download = taken.file;
        link.title = taken.analysis.join("\n");
        cell.append(link);
      }
      row.append(cell);
      return row;
    });
    document.querySelector("#captures tbody").replaceChildren(...rows);
  }

  async function startCapture(asked) {
    const answer = await fetch("/api/labs/" + encodeURIComponent(state.lab.lab) +
                               "/captures", {
      method: "POST", headers: Object.assign({ "Content-Type": "application/json" }, headers),
      body: JSON.stringify(asked) });
    const text = await answer.text();
    state.lastCapture = { ok: answer.ok, said: answer.ok ? JSON.parse(text) : text.trim() };
    if (!answer.ok) happened("refused: " + text.trim());
    return state.lastCapture;
  }

  async function stopCapture(number) {
    const answer = await fetch("/api/labs/" + encodeURIComponent(state.lab.lab) +
                               "/captures/" + number + "/stop", { method: "POST", headers });
    if (!answer.ok) happened("refused: " + (await answer.text()).trim());
  }

  document.getElementById("capture").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = event.target;
    const asked = { where: form.where.value.trim() || state.selected || "" };
    if (form.filter.value.trim()) asked.filter = form.filter.value.trim();
    if (form.seconds.value.trim()) asked.seconds = form.seconds.value.trim();
    startCapture(asked);
  });
  window.simpleperfConsole.startCapture = startCapture;
  window.simpleperfConsole.stopCapture = stopCapture;

  // Past runs (`lab run`'s results folders), newest first, each case's verdict against
  // theory, and its report
  async function loadRuns() {
    const answer = await fetch("/api/runs", { headers });
    if (!answer.ok) return;
    const text = await answer.text();
    if (text === state.runsText) return;
    state.runsText = text;
    state.runs = JSON.parse(text).runs;
    const rows = state.runs.map((run) => {
      const row = document.createElement("tr");
      const verdicts = run.verdicts || [];
      const within = verdicts.filter((v) => v.within === true).length;
      const outside = verdicts.filter((v) => v.within === false).length;
      const when = run.started ? new Date(run.started * 1000).toLocaleString() : "";
      const said = run.error ? run.error : within + " within, " + outside + " outside" +
        (run.failed ? ", " + run.failed + " flows failed" : "") +
        (run.state !== "complete" ? ", " + run.state : "");
      for (const text of [run.experiment || run.name, when, said]) {
        const cell = document.createElement("td");
        cell.textContent = text;
        row.append(cell);
      }
      row.children[2].className = outside || run.failed ? "outside" : "within";
      row.title = verdicts.map((v) => "case " + v.case + ": " + v.summary).join("\n");
      const cell = document.createElement("td");
      if (run.report) {
        const link = document.createElement("a");
        link.textContent = "report";
        link.className = "report";
        link.target = "_blank";
        link.href = "/runs/" + encodeURIComponent(run.name) + "/report.html?token=" +
          encodeURIComponent(token);
        cell.append(link);
      }
      row.append(cell);
      return row;
    });
    document.querySelector("#runs tbody").replaceChildren(...rows);
  }

  document.getElementById("lab").addEventListener("change", (event) => {
    const lab = state.labs.find((found) => found.lab === event.target.value);
    if (lab) draw(lab);
  });
  const events = new EventSource("/api/live?token=" + encodeURIComponent(token));
  events.onmessage = (message) => onLive(JSON.parse(message.data));
  events.onerror = () => say("disconnected from the console: retrying");
  loadLabs();
  loadRuns();
  setInterval(loadLabs, 3000); // labs up and down, links changed: redrawn when they change
  setInterval(loadRuns, 10000); // a run that ended meanwhile
})();
