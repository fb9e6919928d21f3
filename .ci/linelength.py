#!/usr/bin/env python3
"""Line length check of make lint (.ci/lint.sh): linelength.py LIMIT LISTFILE FILE...

Prints each line of FILE wider than LIMIT columns (tabs at 8, UTF-8 characters), except
in the files LISTFILE names (one a line, '#' comments), and each listed file that is no
longer over the limit or not among the FILEs, so that the list only shrinks. Exit 1 if
it printed anything.
"""
import sys

limit = int(sys.argv[1])
with open(sys.argv[2]) as f:
    listed = {l.split("#")[0].strip() for l in f} - {""}
bad = 0
for path in sys.argv[3:]:
    over = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for no, line in enumerate(f, 1):
            cols = len(line.rstrip("\n").expandtabs(8))
            if cols > limit:
                over.append(f"{path}:{no}: {cols} columns")
    if path in listed:
        listed.discard(path)
        if not over:
            print(f"lint: {path} is within {limit} columns now: remove it from {sys.argv[2]}")
            bad += 1
    elif over:
        print("\n".join(over))
        bad += len(over)
for path in sorted(listed):
    print(f"lint: {sys.argv[2]} lists {path}, which is not a checked file")
    bad += 1
if bad:
    print(f"lint: {bad} lines over {limit} columns or stale entries in {sys.argv[2]}")
sys.exit(1 if bad else 0)
