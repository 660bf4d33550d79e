#!/bin/bash
# eshard-mpi report on a real job: `run` under mpirun on 3 fake hosts (fakehosts.sh) with a
# `cp` processor that fails once on one shard, then `report`, then the page in a real headless
# Chromium: the DOM has one class="attempt" element per attempt folder of the job, with the
# shard, host and status of its attempt.json, and no <script> element; the failed attempt's
# error and log tail are escaped; the screenshot is not blank (decoded with Python's zlib: many
# colours, the done and failed colours of the timeline). The same job without its event logs
# (as the reference leaves a job folder) gives the same elements; bad arguments exit 2 and
# write nothing. Issue 32: a second, sub-second job whose 3 shards keep failing: its page opens
# with a red banner naming the failed shards, each with the first line of its error and a link
# to an element of the page (its log tail), and the top of its screenshot is red where the good
# job's is not; the time axes of both pages read differently at every tick. The screenshots
# (report-good.png: the good job, one failed attempt retried, green banner; report-failed.png:
# the failed job, red banner first) and the pages are kept in $ESHARD_TEST_ARTIFACTS (default
# /tmp/eshard-test-artifacts/test_report); the test prints their paths.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/fakehosts.sh"
fakehosts_check
fakehosts_setup 3
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
command -v chromium >/dev/null || fail "chromium is missing (scripts/install-deps.sh installs it)"
ART=${ESHARD_TEST_ARTIFACTS:-/tmp/eshard-test-artifacts/test_report}
mkdir -p "$ART"

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(360):
        f.write(json.dumps({"id": i, "text": "row %d " % i + "x" * (i * 7 % 40)}) + "\n")
PY
# The processor: cp after a short sleep (shard 5 is the slow one); its first run of shard 3
# fails with markup in its log and error.
cat >"$T/proc.sh" <<EOF
#!/bin/sh
i=\${3#part-}; i=\$(expr "\${i%%-of-*}" + 0)
case "\$i" in 5) sleep 1.2 ;; *) sleep 0.\$((i % 3 + 2)) ;; esac
if [ "\$i" = 3 ] && mkdir "$T/failed-once" 2>/dev/null; then
  echo "first try of \$3 <script>alert(1)</script> & fails" >&2
  exit 3
fi
cp "\$1" "\$2"
EOF
chmod +x "$T/proc.sh"
J=$T/job
# shellcheck disable=SC2086
timeout 100 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS -np 3 -npernode 1 "$T/rank.sh" "$BIN" run --config "$T/recipe.yaml" \
  --dataset-path "$T/in.jsonl" --job-dir "$J" --num-shards 12 --poll-interval-secs 1 \
  --process-cmd "$T/proc.sh {input} {output} {shard_id}" >"$T/out" 2>"$T/err" || { cat "$T/out" "$T/err"; fail "run failed"; }
ranks_expect 3 0
expect_out "PASS: 12 shards were completed by"
[ -d "$T/failed-once" ] || fail "the processor never failed"

# attempts JOB: "shard host status" of every attempt folder with an attempt.json, sorted.
attempts() {
  python3 - "$1" <<'PY'
import glob, json, os, sys
for p in sorted(glob.glob(os.path.join(sys.argv[1], "attempts", "*", "*", "attempt.json"))):
    a = json.load(open(p))
    print(a["shard_id"], a["hostname"], a["status"])
PY
}
attempts "$J" >"$T/attempts.txt"
N=$(wc -l <"$T/attempts.txt")
[ "$N" -ge 13 ] || fail "expected at least 13 attempts (12 shards, one failed once), found $N"
grep -q ' failed$' "$T/attempts.txt" || fail "no failed attempt in the job folder"

# run wrote the same report at its end, beside the manifest.
grep -qF "Report: $J/report.html ($N attempts on 3 host(s))" "$T/out" || { cat "$T/out"; fail "run did not write its report"; }
[ "$(grep -o 'class="attempt"' "$J/report.html" | wc -l)" = "$N" ] || fail "run's report has not $N attempt elements"
pass "run wrote $J/report.html ($N attempts)"
run_expect 0 "$BIN" report --job-dir "$J" --output "$T/report.html"
expect_out "Wrote $T/report.html: $N attempts of 12 shards (12 done, 0 failed) on "
cp "$T/report.html" "$ART/report.html"

# ---- the page in a real browser: the DOM
chrome() { timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --no-default-browser-check --user-data-dir="$T/chrome" "$@" 2>>"$T/chrome.err"; }
# ticks.py DOM: in each chart, the labels of the time axis's ticks all differ.
cat >"$T/ticks.py" <<'PY'
import re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
ok = True
for sec in ("timeline", "throughput", "durations", "skew"):
    svg = dom.split('<svg id="%s"' % sec, 1)[1].split("</svg>", 1)[0]
    labels = re.findall(r'<text class="tick" [^>]*>([^<]*)</text>', svg)
    print("%s axis: %s" % (sec, ", ".join(labels)))
    if len(labels) < 3 or len(set(labels)) != len(labels):
        print("the %s axis's tick labels are too few or not all different" % sec, file=sys.stderr)
        ok = False
sys.exit(0 if ok else 1)
PY
chrome --dump-dom "file://$T/report.html" >"$T/dom.html" || { tail "$T/chrome.err"; fail "chromium --dump-dom failed"; }
python3 - "$T/dom.html" "$T/attempts.txt" <<'PY' || fail "the DOM does not show the job's attempts (see above)"
import html, re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
want = sorted(open(sys.argv[2]).read().split("\n")[:-1])
els = re.findall(r'<g class="attempt" data-shard="([^"]*)" data-host="([^"]*)" data-status="([^"]*)"', dom)
got = sorted(" ".join(html.unescape(v) for v in e) for e in els)
ok = True
def bad(msg):
    global ok
    print("DOM:", msg, file=sys.stderr)
    ok = False
if dom.count('class="attempt"') != len(want):
    bad("%d class=\"attempt\" elements, %d attempts in the job folder" % (dom.count('class="attempt"'), len(want)))
if got != want:
    bad("attempt elements differ from the attempt folders:\n%s\n---\n%s" % ("\n".join(got), "\n".join(want)))
if re.search(r"<script\b", dom, re.I):
    bad("a <script> element")
if "first try of part-00003-of-00012 &lt;script&gt;alert(1)&lt;/script&gt; &amp; fails" not in dom:
    bad("the failed attempt's log tail is missing or not escaped")
for sec in ("timeline", "throughput", "durations", "skew"):
    if '<svg id="%s"' % sec not in dom:
        bad("no %s chart" % sec)
if "<b>12 / 12</b>" not in dom:
    bad("the summary does not say 12 / 12 shards done")
if 'class="banner bad"' in dom or "Job finished with failures" in dom:
    bad("a failure banner on a job that completed")
if "Job complete: all 12 shard(s) done" not in dom:
    bad("no banner that says the job is complete")
sys.exit(0 if ok else 1)
PY
python3 "$T/ticks.py" "$T/dom.html" || fail "the good job's time axes (see above)"
pass "the DOM has one attempt element per attempt folder ($N), with its shard, host and status; no script"

# ---- the page in a real browser: the screenshot
chrome --screenshot="$ART/report-good.png" --window-size=1400,1800 "file://$T/report.html" >/dev/null ||
  { tail "$T/chrome.err"; fail "chromium --screenshot failed"; }
echo "screenshot of the good job: $ART/report-good.png"
cat >"$T/png.py" <<'PY'
# png.py PNG good|failed: the screenshot shows the page; the failed job's first screen (its top
# 700 rows) holds the red banner's background, the good job's none.
# A PNG decoder in plain Python (zlib and the five row filters), so no imaging library is needed.
import struct, sys, zlib
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat = 8, []
while pos < len(d):
    n, = struct.unpack(">I", d[pos:pos + 4]); kind = d[pos + 4:pos + 8]; body = d[pos + 8:pos + 8 + n]; pos += 12 + n
    if kind == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    elif kind == b"IDAT":
        idat.append(body)
assert depth == 8 and ctype in (2, 6), "unexpected PNG type %d/%d" % (depth, ctype)
bpp = 3 if ctype == 2 else 4
raw = zlib.decompress(b"".join(idat)); stride = w * bpp
prev, colours, i, banner = bytes(stride), {}, 0, 0
for y in range(h):
    f = raw[i]; line = bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
    if f == 1:
        for x in range(bpp, stride): line[x] = (line[x] + line[x - bpp]) & 255
    elif f == 2:
        line = bytearray((a + b) & 255 for a, b in zip(line, prev))
    elif f == 3:
        for x in range(stride): line[x] = (line[x] + ((line[x - bpp] if x >= bpp else 0) + prev[x]) // 2) & 255
    elif f == 4:
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0; b = prev[x]; c = prev[x - bpp] if x >= bpp else 0
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    prev = bytes(line)
    for x in range(0, stride, bpp * 2):
        px = prev[x:x + 3]; colours[px] = colours.get(px, 0) + 1
    if y == 700:
        banner = colours.get(bytes([0xfd, 0xec, 0xea]), 0)
total = sum(colours.values())
white = colours.get(b"\xff\xff\xff", 0)
done, failed = colours.get(bytes([0x2e, 0x9e, 0x44]), 0), colours.get(bytes([0xd6, 0x27, 0x28]), 0)
print("screenshot %dx%d: %d colours, %.1f%% not white, %d done-green and %d failed-red samples, %d banner-red "
      "samples on the first screen" % (w, h, len(colours), 100.0 * (total - white) / total, done, failed, banner))
ok = len(colours) >= 20 and (total - white) >= total * 0.05 and failed >= 10
if sys.argv[2] == "good":
    ok = ok and done >= 500 and banner == 0
else:
    ok = ok and banner >= 2000
sys.exit(0 if ok else 1)
PY
python3 "$T/png.py" "$ART/report-good.png" good || fail "the screenshot looks blank (see above)"
pass "the screenshot shows the page (colours, the done and failed bars, no red banner)"

# ---- issue 32: a job that finished with failures (shards 2, 5 and 9 fail at every attempt)
cat >"$T/fproc.sh" <<'EOF'
#!/bin/sh
case "$3" in
part-00002-*|part-00005-*|part-00009-*)
  printf 'Traceback (most recent call last):\nValueError: bad row in %s <b>&</b>\n' "$3" >&2
  exit 3 ;;
esac
cp "$1" "$2"
EOF
chmod +x "$T/fproc.sh"
F=$T/fjob
ranks_reset
# shellcheck disable=SC2086
run_expect "$(noabort_rc 2)" timeout 100 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS $RANKS_NOABORT -np 3 -npernode 1 "$T/rank.sh" \
  "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$F" --num-shards 12 \
  --poll-interval-secs 1 --max-retries 1 --process-cmd "$T/fproc.sh {input} {output} {shard_id}"
ranks_expect 3 2
run_expect 0 "$BIN" report --job-dir "$F" --output "$T/failed.html"
expect_out "(9 done, 3 failed)"
cp "$T/failed.html" "$ART/report-failed.html"
chrome --dump-dom "file://$T/failed.html" >"$T/fdom.html" || { tail "$T/chrome.err"; fail "chromium --dump-dom failed"; }
python3 - "$T/fdom.html" <<'PY' || fail "the failed job's page does not show its failures first (see above)"
import html, re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
ok = True
def bad(msg):
    global ok
    print("DOM:", msg, file=sys.stderr)
    ok = False
m = re.search(r'<div class="banner bad" id="failures">Job finished with failures: 3 failed shard\(s\)\s*<ul>(.*?)</ul>', dom, re.S)
if not m:
    bad("no red banner that says the job finished with 3 failed shards")
elif dom.index(m.group(0)) > dom.index("<h2>Summary</h2>"):
    bad("the banner is not above the summary")
else:
    items = re.findall(r'<li><a href="#([^"]+)">([^<]+)</a>: ([^<]*)</li>', m.group(1))
    shards = sorted(i[1] for i in items)
    if shards != ["part-00002-of-00012", "part-00005-of-00012", "part-00009-of-00012"]:
        bad("the banner lists %s" % shards)
    for anchor, shard, why in items:
        t = re.search(r'<h3 id="%s">([^<]*)</h3>' % re.escape(anchor), dom)
        if not t or not t.group(1).startswith(shard + " attempt 2 on "):
            bad("the link of %s does not lead to its last attempt's log (%s)" % (shard, t and t.group(1)))
        if html.unescape(why) != "Processor returned exit code 3; log: ValueError: bad row in %s <b>&</b>" % shard:
            bad("not the reason of %s, with its log's error line: %r" % (shard, why))
        print("banner: %s: %s -> #%s" % (shard, html.unescape(why), anchor))
if re.search(r"<script\b", dom, re.I) or "<b>&</b>" in dom:
    bad("markup of the job reached the page")
if '<div class="card bad"><b>3</b><span>shards failed</span>' not in dom:
    bad("the failed-shards card is not red")
if len(re.findall(r'data-status="failed"[^>]*>(?:(?!</g>).)*<path class="mk"', dom, re.S)) != 6:
    bad("not 6 failed attempts with a marker on the timeline")
sys.exit(0 if ok else 1)
PY
python3 "$T/ticks.py" "$T/fdom.html" || fail "the failed job's time axes (see above)"
chrome --screenshot="$ART/report-failed.png" --window-size=1400,1800 "file://$T/failed.html" >/dev/null ||
  { tail "$T/chrome.err"; fail "chromium --screenshot failed"; }
echo "screenshot of the failed job: $ART/report-failed.png"
python3 "$T/png.py" "$ART/report-failed.png" failed || fail "the failed job's screenshot shows no red banner on top (see above)"
pass "a failed job: a red banner first, its 3 shards with their reason and a link to their log; distinct ticks"

# ---- the same job as the reference leaves it: no event logs, times from attempt.json
cp -a "$J" "$T/ref"
rm -rf "$T/ref/state/events"
run_expect 0 "$BIN" report --job-dir "$T/ref" --output "$T/ref.html"
[ "$(grep -o 'class="attempt"' "$T/ref.html" | wc -l)" = "$N" ] || fail "the report without events has not $N attempts"
grep -qF "No event logs" "$T/ref.html" || fail "the report without events does not say so"
pass "a job folder without event logs gets the same $N attempt elements"

# ---- bad arguments: exit 2, a clear message, nothing written
run_expect 2 "$BIN" report --job-dir "$T/nothing" --output "$T/x.html"
expect_err "Job manifest not found"
mkdir -p "$T/foreign"
run_expect 2 "$BIN" report --job-dir "$T/foreign" --output "$T/x.html"
expect_err "Job manifest not found"
run_expect 2 "$BIN" report --job-dir "$J" --output "$T/foreign"
expect_err "Report output is a folder: $T/foreign"
run_expect 2 "$BIN" report --job-dir "$J" --output "$T/no/such/x.html"
expect_err "Report output folder does not exist"
run_expect 2 "$BIN" report --job-dir "$T/foreign"
expect_err "Job manifest not found"
[ ! -e "$T/x.html" ] && [ -z "$(ls -A "$T/foreign")" ] || fail "a failed report wrote something"
run_expect 0 "$BIN" report --help
expect_out "eshard-mpi report"
pass "missing or foreign job folder, a folder or a missing folder as output: exit 2, nothing written"
