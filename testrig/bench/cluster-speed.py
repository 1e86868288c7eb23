#!/usr/bin/env python3
"""cluster-speed.py: the snapshots and sums of cluster-speed.sh (run by it).

  snap [--nats NAME=MONPORT]... [--http NAME=ADDR]... [--pid NAME=PID]...
      one JSON snapshot on stdout, taken as close to one instant as it can:
      each NATS node's /jsz (accounts, streams, config) and /varz counters,
      each termserver's /metrics counters (termlink_*_total), and each
      process's CPU ticks (/proc/PID/stat utime+stime).
  window A B [--bg BGA BGB] --round R --srv S --phase P --results TSV
      what happened between snapshots A and B: replies (the termservers'
      termlink_outbound_delivered_total), writes per reply in each stream
      (its last sequence; a KV bucket is stream KV_<bucket>), less the
      background measured idle between BGA and BGB, scaled to the window,
      JetStream API requests and NATS messages per reply, CPU seconds per
      process. Prints one line per figure group and appends rows to TSV.
  leader SNAP STREAM
      prints the NATS node leading STREAM and the meta leader.
  prof [--rec ROUND SRV TSV] TRACES...
      the CPU of `go tool pprof -traces` outputs of NATS nodes, summed: by
      the stream label nats-server puts on its goroutines, and by activity
      (the first of ACTIVITIES a sample's stack matches).
  table TSV SECOND
      the medians over the rounds, per figure and server.
  goals TSV RATE
      the medians set against issue 25's goals.
"""
import concurrent.futures
import json
import os
import re
import statistics
import sys
import time
import urllib.request


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def pairs(args, flag):
    out = {}
    for i, a in enumerate(args):
        if a == flag:
            name, val = args[i + 1].split("=", 1)
            out[name] = val
    return out


def ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])  # utime, stime (fields 14, 15)
    except (OSError, IndexError, ValueError):
        return None


def metrics(addr):
    tot = {}
    for line in get(f"http://{addr}/metrics").splitlines():
        if line.startswith("termlink_") and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name.endswith("_total"):
                try:
                    tot[name] = tot.get(name, 0) + float(line.rsplit(" ", 1)[1])
                except ValueError:
                    pass
    return tot


def snap(args):
    s = {"t": time.time(), "cpu": {}, "nats": {}, "metrics": {}}
    for name, pid in pairs(args, "--pid").items():
        s["cpu"][name] = ticks(pid)
    # every server at once, so that the counters are read close together
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        nats = {name: ex.submit(nats_node, port) for name, port in pairs(args, "--nats").items()}
        mets = {name: ex.submit(metrics, addr) for name, addr in pairs(args, "--http").items()}
    for name, f in nats.items():
        try:
            s["nats"][name] = f.result()
        except OSError as e:
            s["nats"][name] = {"error": str(e)}
    for name, f in mets.items():
        try:
            s["metrics"][name] = f.result()
        except OSError as e:
            s["metrics"][name] = {"error": str(e)}
    json.dump(s, sys.stdout)


def nats_node(port):
    base = f"http://127.0.0.1:{port}"
    jsz = json.loads(get(base + "/jsz?accounts=true&streams=true&config=true"))
    varz = json.loads(get(base + "/varz"))
    streams = {}
    for acc in jsz.get("account_details") or []:
        for sd in acc.get("stream_detail") or []:
            streams[sd["name"]] = {
                "last_seq": sd["state"].get("last_seq", 0),
                "replicas": (sd.get("config") or {}).get("num_replicas", 1),
                "leader": (sd.get("cluster") or {}).get("leader", ""),
            }
    return {
        "streams": streams,
        "api": (jsz.get("api") or {}).get("total", 0),
        "api_errors": (jsz.get("api") or {}).get("errors", 0),
        "meta_leader": (jsz.get("meta_cluster") or {}).get("leader", ""),
        "in_msgs": varz.get("in_msgs", 0),
        "out_msgs": varz.get("out_msgs", 0),
    }


def load(path):
    with open(path) as f:
        return json.load(f)


def streams(s):
    """Each stream's last sequence (the highest any replica reports) and replicas."""
    out = {}
    for node in s["nats"].values():
        for name, st in (node.get("streams") or {}).items():
            seq, r = out.get(name, (0, 1))
            out[name] = (max(seq, st["last_seq"]), max(r, st["replicas"]))
    return out


def nats_sum(s, key):
    return sum(n.get(key, 0) for n in s["nats"].values())


def metric(s, name, devices_only=False):
    """A counter summed over the termservers (devices_only: the edges or
    the embedded server, the nodes that hold devices)."""
    return sum(m.get(name, 0) for n, m in s["metrics"].items()
               if not devices_only or not n.startswith("worker"))


def order(name):
    """Processes in the order n1 n2 n3 edges workers load embedded."""
    for i, p in enumerate(("n", "edge", "worker", "load", "embedded")):
        if name.startswith(p):
            return (i, name)
    return (9, name)


def window(args):
    a, b = load(args[0]), load(args[1])
    opt = {args[i]: args[i + 1] for i in range(2, len(args) - 1) if args[i].startswith("--")}
    bg = None
    if "--bg" in opt:
        i = args.index("--bg")
        bg = (load(args[i + 1]), load(args[i + 2]))
    rnd, srv, phase, results = opt["--round"], opt["--srv"], opt["--phase"], opt["--results"]
    dt = b["t"] - a["t"]
    replies = metric(b, "termlink_outbound_delivered_total", True) - metric(a, "termlink_outbound_delivered_total", True)
    rows = []

    def rec(fig, val):
        rows.append((fig, val))

    accepted = metric(b, "termlink_inbound_total", True) - metric(a, "termlink_inbound_total", True)
    dropped = metric(b, "termlink_cluster_events_dropped_total") - metric(a, "termlink_cluster_events_dropped_total")
    rec(f"window replies/s {phase}", replies / dt if dt > 0 else 0)
    out = [f"{phase} window {dt:.1f} s: {replies:.0f} replies ({replies / dt:.0f}/s), "
           f"{accepted:.0f} messages accepted (termlink_outbound_delivered_total, termlink_inbound_total)" +
           (f", {dropped:.0f} cluster events dropped" if dropped else "")]
    if a["nats"] and replies > 0:
        sa, sb = streams(a), streams(b)
        bga, bgb = (streams(bg[0]), streams(bg[1])) if bg else ({}, {})
        bgdt = (bg[1]["t"] - bg[0]["t"]) if bg else 0
        per, total, total_r = {}, 0.0, 0.0
        for name in sorted(sb):
            d = sb[name][0] - sa.get(name, (0, 1))[0]
            back = 0.0
            if bgdt > 0 and name in bga and name in bgb:
                back = (bgb[name][0] - bga[name][0]) / bgdt * dt
            net = (d - back) / replies
            if abs(net) < 0.005 and d == 0:
                continue
            per[name] = (net, d, back, sb[name][1])
            total += net
            if sb[name][1] > 1:
                total_r += net
        parts = [f"{n} {v[0]:.2f}" + ("" if v[3] > 1 else " (R1)") for n, v in
                 sorted(per.items(), key=lambda kv: -kv[1][0]) if abs(v[0]) >= 0.005]
        out.append("  writes/reply: " + ", ".join(parts) +
                   f"; replicated total {total_r:.2f}" +
                   (f", {total_r * replies / accepted:.2f} per accepted message" if accepted else "") +
                   (" (background with the devices idle subtracted)" if bg else ""))
        for n, v in per.items():
            rec(f"writes/reply {phase} {n}", v[0])
        rec(f"writes/reply {phase} replicated total", total_r)
        if accepted:
            rec(f"writes/accepted {phase} replicated total", total_r * replies / accepted)
        api = (nats_sum(b, "api") - nats_sum(a, "api")) / replies
        inm = (nats_sum(b, "in_msgs") - nats_sum(a, "in_msgs")) / replies
        outm = (nats_sum(b, "out_msgs") - nats_sum(a, "out_msgs")) / replies
        errs = nats_sum(b, "api_errors") - nats_sum(a, "api_errors")
        out.append(f"  per reply: {api:.2f} JetStream API requests ({errs} of them answered with an error, not-found reads included), "
                   f"{inm:.1f} NATS messages in, {outm:.1f} out (all 3 nodes, routes included)")
        rec(f"JS API/reply {phase}", api)
        rec(f"NATS msgs in/reply {phase}", inm)
    hz = os.sysconf("SC_CLK_TCK")
    cpu = {}
    for name, t1 in sorted(b["cpu"].items(), key=lambda kv: order(kv[0])):
        t0 = a["cpu"].get(name)
        if t0 is not None and t1 is not None:
            cpu[name] = (t1 - t0) / hz
    if cpu:
        tot = sum(cpu.values())
        out.append("  CPU s: " + ", ".join(f"{n} {v:.2f}" for n, v in cpu.items()) +
                   f" = {tot:.2f} s ({tot / dt:.2f} cores)" +
                   (f", {tot / replies * 1e6:.0f} µs/reply" if replies else ""))
        if phase == "saturated":
            for n, v in cpu.items():
                rec(f"CPU s {phase} window {n}", v)
        if replies:
            rec(f"CPU µs/reply {phase}", tot / replies * 1e6)
        # what the server (and its load) got of the machine's cores: low
        # when the machine's other work took them
        rec(f"cores used {phase} (load included)", tot / dt)
    with open(results, "a") as f:
        for fig, val in rows:
            f.write(f"{rnd}\t{srv}\t{fig}\t{val}\n")
    print("\n".join(out))


def leader(args):
    s = load(args[0])
    sl = ml = ""
    for name, node in s["nats"].items():
        st = (node.get("streams") or {}).get(args[1])
        if st and st["leader"]:
            sl = st["leader"]
        ml = ml or node.get("meta_leader", "")
    print(sl or "-", ml or "-")


# ACTIVITIES: what a NATS CPU sample was doing, by the first pattern its
# stack matches (most specific first).
ACTIVITIES = [
    ("consumer state to disk", r"consumerFileStore\)\.(writeState|flushLoop)"),
    ("stream store (filestore)", r"\(\*fileStore\)\.|\(\*msgBlock\)\."),
    ("raft (replication log)", r"\(\*raft\)\."),
    ("consumers (deliver, ack)", r"\(\*consumer\)\."),
    ("JetStream API, direct get", r"\(\*Server\)\.js[A-Z]|apiDispatch|DirectGet|processDirectGet"),
    ("stream ingest", r"\(\*stream\)\.|\(\*jetStream\)\."),
    ("client/route read and routing", r"readLoop"),
    ("client/route write", r"writeLoop|flushOutbound"),
    ("GC and runtime", r"^runtime\.|gcBgMarkWorker|bgsweep|bgscavenge"),
]


def prof(args):
    rec = None
    if args[0] == "--rec":
        rec, args = args[1:4], args[4:]
    by_stream, by_act, total = {}, {}, 0.0
    for path in args:
        blocks = open(path).read().split("-----------+-------------------------------------------------------")
        for blk in blocks[1:]:
            lines = [l for l in blk.splitlines() if l.strip()]
            stream, w, frames = "(no stream)", None, []
            for l in lines:
                m = re.match(r"\s*stream:\s+(\S+)", l)
                if m:
                    stream = m.group(1)
                    continue
                if w is None:
                    m = re.match(r"\s*([0-9.]+)(ms|s|us|µs|ns)\s+(.*)", l)
                    if m:
                        w = float(m.group(1)) * {"s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}[m.group(2)]
                        frames.append(m.group(3).strip())
                    continue
                frames.append(l.strip())
            if w is None:
                continue
            total += w
            by_stream[stream] = by_stream.get(stream, 0) + w
            act = "other"
            for name, pat in ACTIVITIES:
                if any(re.search(pat, f) for f in frames):
                    act = name
                    break
            by_act[act] = by_act.get(act, 0) + w
    if not total:
        print("no samples")
        return
    fmt = lambda d: ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in sorted(d.items(), key=lambda kv: -kv[1]) if v / total >= 0.01)
    print(f"{total:.2f} s of CPU sampled")
    print("by activity: " + fmt(by_act))
    print("by stream: " + fmt(by_stream))
    if rec:
        with open(rec[2], "a") as f:
            for kind, d in (("activity", by_act), ("stream", by_stream)):
                for k, v in sorted(d.items(), key=lambda kv: -kv[1]):
                    f.write(f"{rec[0]}\t{rec[1]}\tNATS CPU % {kind}: {k}\t{100 * v / total}\n")


def table(args):
    second = args[1]
    vals, order, srvs = {}, [], ["cluster", second]
    for line in open(args[0]):
        _, srv, fig, v = line.rstrip("\n").split("\t")
        if fig not in order:
            order.append(fig)
        if srv not in srvs:
            srvs.append(srv)
        vals.setdefault((fig, srv), []).append(float(v))
    w = max(len(f) for f in order) if order else 20
    ratios = [(s, second) for s in srvs if s != second]
    print(f"{'figure (median over rounds)':{w}} " + " ".join(f"{s:>10}" for s in srvs) + " " +
          " ".join(f"{a[:3] + '/' + b[:3]:>7}" for a, b in ratios) + f"   per round ({' | '.join(srvs)})")
    for fig in order:
        xs = [vals.get((fig, s), []) for s in srvs]
        ms = [statistics.median(x) if x else None for x in xs]
        med = dict(zip(srvs, ms))
        small = 1 if fig.startswith("NATS CPU %") else 0.01
        if fig.startswith(("writes/", "NATS CPU %")) and all(m is None or abs(m) < small for m in ms):
            continue  # background noise: in the TSV, not in the table
        col = lambda m: f"{m:10.2f}" if m is not None else f"{'-':>10}"
        rat = lambda a, b: f"{med[a] / med[b]:7.2f}" if med[a] is not None and med[b] else f"{'-':>7}"
        per = " | ".join(" ".join(f"{x:.4g}" for x in x_) or "-" for x_ in xs)
        print(f"{fig:{w}} " + " ".join(col(m) for m in ms) + " " + " ".join(rat(a, b) for a, b in ratios) + f"   {per}")


def goals(args):
    rate, who = args[1], args[2] if len(args) > 2 else "cluster"
    vals = {}
    for line in open(args[0]):
        r, srv, fig, v = line.rstrip("\n").split("\t")
        vals.setdefault((srv, fig), {})[r] = float(v)
    med = lambda srv, fig: statistics.median(vals[(srv, fig)].values()) if (srv, fig) in vals else None
    ratios = [c / vals[("embedded", "replies/s saturated")][r]
              for r, c in vals.get((who, "replies/s saturated"), {}).items()
              if vals.get(("embedded", "replies/s saturated"), {}).get(r)]
    events = med(who, "writes/reply fixed TERMLINK_EVENTS") or 0
    total = med(who, "writes/reply fixed replicated total")
    show = lambda v, unit="": "-" if v is None else f"{v:.2f}{unit}"
    print(f"goals (issue 25 item 3), {who}, medians: p50 @{rate}/s {show(med(who, f'p50 ms @{rate}/s'), ' ms')} (<= 20 ms); "
          f"p99 {show(med(who, f'p99 ms @{rate}/s'), ' ms')} (<= 100 ms); "
          f"saturated {who}/embedded {show(statistics.median(ratios) if ratios else None)} (>= 0.4, the median of the rounds' ratios); "
          f"replicated writes per reply @{rate}/s {show(total)}, {show(None if total is None else total - events)} without TERMLINK_EVENTS (<= 2)")


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    {"snap": snap, "window": window, "leader": leader, "prof": prof, "table": table, "goals": goals}[cmd](rest)
