#!/usr/bin/env python3
"""Time from exec of bare `hearth` to the first 200 from /health, over several runs.

Usage: bench/startup_time.py HEARTH_BINARY [--runs N] [--demo DIR]
HF_HOME is an empty temp dir, so bare hearth serves the demo model (models/hearth-demo next to
the build, or --demo DIR through HEARTH_DEMO_MODEL). /health is polled every millisecond.
"""
import argparse, http.client, os, re, statistics, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("binary")
ap.add_argument("--runs", type=int, default=10)
ap.add_argument("--demo")
args = ap.parse_args()

times = []
with tempfile.TemporaryDirectory() as hf:
    env = dict(os.environ, HF_HOME=hf)
    if args.demo:
        env["HEARTH_DEMO_MODEL"] = args.demo
    for _ in range(args.runs):
        start = time.perf_counter()
        proc = subprocess.Popen([args.binary, "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        port = None
        for line in proc.stdout:
            m = re.search(r"chat UI: http://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            sys.exit("hearth printed no URL")
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.001)
        times.append((time.perf_counter() - start) * 1000)
        proc.terminate()
        proc.wait()
print("runs: %d  min %.1f ms  median %.1f ms  max %.1f ms" % (len(times), min(times), statistics.median(times), max(times)))
