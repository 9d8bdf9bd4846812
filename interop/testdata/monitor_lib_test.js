// Tests of monitor/assets/lib.js, run in Chromium by TestMonitorPage: one
// function expression that takes the module and returns "PASS" or throws.
(lib) => {
  const fails = [];
  const eq = (what, got, want) => {
    const g = JSON.stringify(got), w = JSON.stringify(want);
    if (g !== w) fails.push(`${what}: got ${g}, want ${w}`);
  };

  // matchType: the rule of config.MatchType ('*' any run, ':' and '.' included).
  for (const [pat, type, want] of [
    ["speak", "speak", true], ["speak", "speaks", false], ["*", "", true], ["", "", true], ["", "x", false],
    ["recognizer_loop:*", "recognizer_loop:utterance", true], ["recognizer_loop:*", "recognizer_loop", false],
    ["*.response", "skill.ping.response", true], ["*.response", "response", false],
    ["a*b*c", "aXbYc", true], ["a*b*c", "aXbY", false], ["a**", "a", true], ["*a", "bbba", true],
    ["gui.*.set", "gui.value.set", true], ["gui.*.set", "gui.value.get", false], ["x*", "", false],
  ]) eq(`matchType(${pat}, ${type})`, lib.matchType(pat, type), want);

  eq("parsePatterns", lib.parsePatterns(" a, b  c,,"), ["a", "b", "c"]);

  // makeFilter: include, exclude, text (case-insensitive, anywhere), session (exact).
  const rows = [
    { type: "speak", payload: '{"type":"speak","data":{"utterance":"Hello World"}}', session: "s1", source: "skills" },
    { type: "recognizer_loop:utterance", payload: "{}", session: "s2" },
    { type: "gui.value.set", payload: "{}", session: "s1" },
    { type: "", kind: "binary", preview: "de ad be ef", payload: "" },
  ];
  const pick = (f) => rows.filter(lib.makeFilter(f)).map((r) => r.type);
  eq("no filter", pick({}), ["speak", "recognizer_loop:utterance", "gui.value.set", ""]);
  eq("include", pick({ include: "speak recognizer_loop:*" }), ["speak", "recognizer_loop:utterance"]);
  eq("exclude", pick({ exclude: "gui.*" }), ["speak", "recognizer_loop:utterance", ""]);
  eq("include and exclude", pick({ include: "*", exclude: "speak,gui.*" }), ["recognizer_loop:utterance", ""]);
  eq("text", pick({ text: "hello world" }), ["speak"]);
  eq("text in the source", pick({ text: "SKILLS" }), ["speak"]);
  eq("text in a binary preview", pick({ text: "be ef" }), [""]);
  eq("session", pick({ session: "s1" }), ["speak", "gui.value.set"]);
  eq("session exact", pick({ session: "s" }), []);
  eq("all at once", pick({ include: "*", exclude: "speak", session: "s1" }), ["gui.value.set"]);

  // Ring: bounded, oldest dropped and counted.
  const r = new lib.Ring(3);
  eq("ring push", r.push(1, 2), 0);
  eq("ring push over", r.push(3, 4, 5), 2);
  eq("ring items", r.items(), [3, 4, 5]);
  eq("ring dropped", r.dropped, 2);
  eq("ring last", r.last(), 5);
  eq("ring drain", r.drain(), [3, 4, 5]);
  eq("ring after drain", [r.length, r.items(), r.dropped], [0, [], 2]);

  // View: pause holds (bounded), resume shows what came, drops are counted.
  const v = new lib.View(4, 3);
  eq("view add", v.add([1, 2]), [1, 2]);
  v.pause();
  eq("view add while paused", v.add([3, 4, 5, 6]), []);
  eq("view rows while paused", v.rows.items(), [1, 2]);
  eq("view pending", [v.pending.length, v.dropped], [3, 1]);
  eq("view resume", v.resume(), [4, 5, 6]);
  eq("view rows after resume", v.rows.items(), [2, 4, 5, 6]);
  eq("view dropped after resume", v.dropped, 2);
  eq("view add after resume", v.add([7]), [7]);

  // Rates: per-second counts, the busiest types and "other".
  const rates = new lib.Rates(300);
  const t0 = 1_000_000_000_000; // a whole second, in ms
  rates.add(t0, { a: 5, b: 1 });
  rates.add(t0 + 500, { a: 5, c: 2 });
  rates.add(t0 + 1000, { b: 4 });
  rates.add(t0 + 2000, { a: 1 }); // the current second: not drawn yet
  const s = rates.series(t0 + 2500, 2);
  eq("series span", [s.seconds, s.lines.length], [60, 3]);
  eq("series types", s.lines.map((l) => l.type), ["a", "b", "other"]);
  eq("series a", s.lines[0].values.slice(-2), [10, 0]);
  eq("series b", s.lines[1].values.slice(-2), [1, 4]);
  eq("series other", s.lines[2].values.slice(-2), [2, 0]);
  eq("series peak", s.peak, 13);
  rates.add(t0 + 400_000, { z: 1 });
  eq("old seconds dropped", [...rates.buckets.keys()].length, 1);

  // Formatting and pretty-printing.
  eq("formatSize", [lib.formatSize(512), lib.formatSize(1536), lib.formatSize(3 << 20)], ["512 B", "1.5 KiB", "3.0 MiB"]);
  eq("formatDuration", [lib.formatDuration(45), lib.formatDuration(192), lib.formatDuration(7500)], ["45s", "3m12s", "2h05m"]);
  eq("pretty json", lib.pretty({ kind: "json", payload: '{"a":[1,{"b":null}]}' }), '{\n  "a": [\n    1,\n    {\n      "b": null\n    }\n  ]\n}');
  eq("pretty truncated", lib.pretty({ kind: "json", truncated: true, payload: '{"a":' }), '{"a":');
  eq("pretty binary", lib.pretty({ kind: "binary", preview: "00 01" }), "00 01");
  eq("labels", [lib.kindLabel({ kind: "binary" }), lib.kindLabel({ kind: "text" }), lib.kindLabel({ kind: "json" })], ["binary", "not JSON", ""]);
  eq("parseObject", lib.parseObject("data", ' {"x": 1} '), { x: 1 });
  eq("parseObject empty", lib.parseObject("data", "  "), {});
  for (const bad of ["[1]", "nope", "null", "3"]) {
    try {
      lib.parseObject("data", bad);
      fails.push(`parseObject(${bad}) did not throw`);
    } catch (e) {
      if (!e.message.startsWith("data ")) fails.push(`parseObject(${bad}): ${e.message}`);
    }
  }
  if (fails.length) throw new Error(fails.join("\n"));
  return "PASS";
}
