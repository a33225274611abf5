#!/usr/bin/env python3
"""tools/trace_check.py - checks a Chrome trace-event JSON file (`troupe timeline`,
tr_timeline_dump, troupe.timeline()) against the rules Perfetto's and chrome://tracing's
JSON importers rely on (docs/OBSERVABILITY.md, "The timeline's rules"):

  1. The file is a JSON object with a "traceEvents" array (or a bare array).
  2. Every event is an object with a known "ph"; "name" is a string; "pid" and "tid" are
     integers; every event but metadata ("M") has a number "ts" >= 0 (microseconds), one
     with a fraction below 2^53 ns (beyond, a double keeps less than a ns: an absolute
     time's fraction is noise).
  3. "X" slices have a number "dur" >= 0; on one track (pid, tid) they nest: a slice that
     begins inside another ends inside it too. "B"/"E" pairs balance per track.
  4. Async slices ("b"/"e") pair by (cat, id, name): one begin, then one end, not earlier.
  5. Flows ("s"/"t"/"f") pair by (cat, id): exactly one "s" and one "f", any "t" between,
     in time order; each end lies inside an "X" slice of its track (what it binds to).
  6. Metadata: "process_name"/"thread_name" carry args.name as a string.

Usage: trace_check.py FILE [--expect KEY=N]...  Prints a summary line and each broken rule
(at most 20); exit status 0 when the file keeps every rule and every --expect holds (KEY:
slices, flows, async, processes, cat:NAME - the X slices of that category - or name:NAME;
N a minimum)."""
import json
import sys
from collections import defaultdict

PHASES = set("XBEiIbenstfMCPOND") | {"(", ")"}


def check(doc):
    errors = []
    counts = defaultdict(int)

    def err(msg):
        if len(errors) < 20:
            errors.append(msg)
        counts["errors"] += 1

    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        err("no traceEvents array")
        return errors, counts
    tracks = defaultdict(list)  # (pid, tid) -> [(ts, end)]
    begins = defaultdict(list)  # B/E per track
    asyncs = defaultdict(list)
    flows = defaultdict(list)
    for i, e in enumerate(events):
        where = f"event {i}"
        if not isinstance(e, dict):
            err(f"{where}: not an object")
            continue
        ph = e.get("ph")
        if ph not in PHASES:
            err(f"{where}: unknown ph {ph!r}")
            continue
        if not isinstance(e.get("name", ""), str):
            err(f"{where}: name is not a string")
        pid, tid = e.get("pid"), e.get("tid", 0)
        if not isinstance(pid, int) or not isinstance(tid, int):
            err(f"{where}: pid/tid not integers")
            continue
        if ph == "M":
            if e.get("name") in ("process_name", "thread_name"):
                if not isinstance((e.get("args") or {}).get("name"), str):
                    err(f"{where}: {e.get('name')} without args.name")
                counts["processes" if e["name"] == "process_name" else "threads"] += 1
            continue
        ts = e.get("ts")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool) or ts < 0:
            err(f"{where}: ts {ts!r} is not a number >= 0")
            continue
        if isinstance(ts, float) and ts >= 2**53 / 1000:
            err(f"{where}: ts {ts!r} has a fraction a double cannot hold (count from the start)")
            continue
        name = e.get("name", "")
        counts[f"name:{name}"] += ph in "Xb"
        if ph == "X":
            dur = e.get("dur")
            if not isinstance(dur, (int, float)) or dur < 0:
                err(f"{where}: X without a dur >= 0")
                continue
            tracks[(pid, tid)].append((ts, ts + dur, i))
            counts["slices"] += 1
            counts[f"cat:{e.get('cat', '')}"] += 1
        elif ph in "BE":
            begins[(pid, tid)].append((ts, ph, i))
        elif ph in "be":
            if "id" not in e:
                err(f"{where}: async {ph} without an id")
                continue
            asyncs[(e.get("cat"), str(e["id"]), name)].append((ts, ph, i))
        elif ph in "stf":
            if "id" not in e:
                err(f"{where}: flow {ph} without an id")
                continue
            flows[(e.get("cat"), str(e["id"]))].append((ts, ph, pid, tid, i))
    eps = 1e-3  # (ts are microseconds printed with 3 decimals)
    for track, sl in tracks.items():
        sl.sort(key=lambda x: (x[0], -(x[1] - x[0])))
        stack = []
        for ts, end, i in sl:
            while stack and stack[-1][1] <= ts + eps:
                stack.pop()
            if stack and end > stack[-1][1] + eps:
                err(f"event {i}: slice [{ts}, {end}] on track {track} overlaps event "
                    f"{stack[-1][2]} [{stack[-1][0]}, {stack[-1][1]}] without nesting")
                continue
            stack.append((ts, end, i))
    for track, evs in begins.items():
        depth = 0
        for ts, ph, i in sorted(evs, key=lambda x: (x[0], x[1] == "E")):
            depth += 1 if ph == "B" else -1
            if depth < 0:
                err(f"event {i}: E without its B on track {track}")
                depth = 0
        if depth:
            err(f"track {track}: {depth} B without an E")
    for key, evs in asyncs.items():
        b = [x for x in evs if x[1] == "b"]
        e = [x for x in evs if x[1] == "e"]
        if len(b) != 1 or len(e) != 1 or e[0][0] < b[0][0]:
            err(f"async {key}: {len(b)} begin(s), {len(e)} end(s) (want one each, in order)")
        else:
            counts["async"] += 1

    def inside(pid, tid, ts):
        return any(s - eps <= ts <= e + eps for s, e, _ in tracks.get((pid, tid), ()))

    for key, evs in flows.items():
        s = [x for x in evs if x[1] == "s"]
        f = [x for x in evs if x[1] == "f"]
        if len(s) != 1 or len(f) != 1:
            err(f"flow {key}: {len(s)} start(s), {len(f)} end(s) (want one each)")
            continue
        if sorted(evs, key=lambda x: x[0])[0][1] != "s" or max(x[0] for x in evs) > f[0][0]:
            err(f"flow {key}: not in time order from its s to its f")
            continue
        for ts, ph, pid, tid, i in evs:
            if not inside(pid, tid, ts):
                err(f"event {i}: flow {ph} at {ts} is in no slice of track ({pid}, {tid})")
        counts["flows"] += 1
    return errors, counts


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    expects = []
    args = argv[2:]
    while args:
        if args[0] != "--expect" or len(args) < 2 or "=" not in args[1]:
            print(f"trace_check: bad arguments {args}", file=sys.stderr)
            return 2
        k, n = args[1].rsplit("=", 1)
        expects.append((k, int(n)))
        args = args[2:]
    try:
        with open(argv[1], encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"trace_check: {argv[1]}: {e}")
        return 1
    errors, counts = check(doc)
    for k, n in expects:
        if counts[k] < n:
            errors.append(f"expected at least {n} {k}, found {counts[k]}")
            counts["errors"] += 1
    for e in errors:
        print(f"trace_check: {e}")
    print(f"trace_check: {counts['slices']} slices, {counts['async']} async, "
          f"{counts['flows']} flows, {counts['processes']} processes: "
          f"{counts['errors']} broken")
    return 1 if counts["errors"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
