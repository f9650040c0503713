#!/usr/bin/env python3
"""Builds the demo model's training corpus from installed Debian packages, as JSON lines.

Sources (install first; see scripts/train_demo/README.md):
  bible-kjv + bible-kjv-text   King James Bible, read through the `bible` program
  jargon-text                  The Jargon File 4.4.7, glossary entries
  dict-devil                   Ambrose Bierce, The Devil's Dictionary
  fortunes + fortunes-min      fortune cookies (a selection of files, listed below)

Each line is one record: {"src": "kjv", "book": ..., "chapter": N, "verses": [[n, text], ...]},
{"src": "jargon" | "devil", "term": ..., "text": ...} or {"src": "fortune", "file": ..., "text": ...}.
Text is ASCII-folded where it is plain punctuation (curly quotes, dashes) and whitespace-normalized;
the order is fixed, so the same packages give the same file byte for byte.

Usage: python3 make_corpus.py OUT.jsonl
"""
import gzip
import json
import re
import subprocess
import sys

JARGON = "/usr/share/doc/jargon-text/jargon.txt.gz"
DEVIL = "/usr/share/dictd/devil.dict.dz"  # dictzip is gzip-compatible
FORTUNE_DIR = "/usr/share/games/fortunes"
# Prose and quotations; left out: ASCII art, song lyrics, TV dialogue, and the files of jokes
# about groups of people.
FORTUNE_FILES = [
    "fortunes", "literature", "riddles",  # fortunes-min
    "computers", "cookie", "definitions", "disclaimer", "education", "food", "goedel", "humorists",
    "kids", "knghtbrd", "law", "linux", "linuxcookie", "love", "magic", "medicine", "miscellaneous",
    "news", "paradoxum", "people", "perl", "pets", "platitudes", "pratchett", "science", "sports",
    "tao", "wisdom", "work",
]

FOLD = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "--",
        "\u2026": "...", "\u00a0": " ", "\u00b7": "."}


def clean(text):
    for a, b in FOLD.items():
        text = text.replace(a, b)
    lines = [ln.replace("\t", " ").rstrip() for ln in text.split("\n")]
    text = "\n".join(lines).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", text)


def usable(text):
    # No terminal tricks (backspace overstrike, bells), box-drawing tables or mojibake.
    return not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2500-\u257f\ufffd]", text)


def reflow(paragraph):
    # Hard-wrapped prose -> one line per paragraph.
    return " ".join(ln.strip() for ln in paragraph.split("\n") if ln.strip())


def kjv():
    out = subprocess.run(["bible", "-l0", "Genesis 1:1-Revelation 22:21"], check=True,
                         capture_output=True, text=True).stdout
    chapters, cur = [], None
    for line in out.split("\n"):
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m and cur is not None:
            cur["verses"].append([int(m.group(1)), clean(m.group(2))])
            continue
        m = re.match(r"^(\S.*) (\d+)$", line)
        if m:
            cur = {"src": "kjv", "book": m.group(1), "chapter": int(m.group(2)), "verses": []}
            chapters.append(cur)
    return chapters


def jargon():
    with gzip.open(JARGON, "rt", encoding="utf-8") as f:
        text = f.read()
    start = text.index("\nGlossary\n")
    body = text[start:text.index("\nAppendix\u00a0A.\u00a0Hacker Folklore", start)]
    entries, cur = [], None
    for para in re.split(r"\n\s*\n", body):
        if re.fullmatch(r"  \S.*", para):  # a letter heading ("  C") ends the previous letter
            cur = None
            continue
        m = re.match(r"\s*:(.+?):\s*(.*)$", para, re.S)
        if m and para.startswith("   :"):
            cur = {"src": "jargon", "term": m.group(1).strip(), "head": reflow(m.group(2)), "paras": []}
            entries.append(cur)
        elif cur is not None and usable(para):
            cur["paras"].append(reflow(para))
    records = []
    for e in entries:
        paras = [p for p in e["paras"] if p]
        if not paras:
            continue
        head = e["term"] + (" " + e["head"] if e["head"] else "")
        records.append({"src": "jargon", "term": e["term"], "text": clean(head + "\n\n" + "\n\n".join(paras))})
    return records


def devil():
    with gzip.open(DEVIL, "rt", encoding="utf-8") as f:
        text = f.read()
    start = text.index("\nABASEMENT, n.")
    end = text.rindex("\n abcdefghijklmnopqrstuvwxyz")
    records, cur = [], None
    head = re.compile(r"^([A-Z][A-Z' -]*[A-Z])(, [a-z.]+(?: and [a-z.]+)?| ?\.)")
    for para in re.split(r"\n\s*\n", text[start:end].strip("\n")):
        m = head.match(para)
        if m:
            cur = {"src": "devil", "term": m.group(1).title(), "paras": [reflow(para)]}
            records.append(cur)
        elif cur is not None:
            # Verse stays line by line.
            cur["paras"].append("\n".join(ln.strip() for ln in para.split("\n")))
    return [{"src": "devil", "term": r["term"], "text": clean("\n\n".join(r["paras"]))} for r in records]


def fortunes():
    records = []
    for name in FORTUNE_FILES:
        with open(f"{FORTUNE_DIR}/{name}", encoding="utf-8", errors="replace") as f:
            text = f.read()
        for cookie in re.split(r"\n%\n", text):
            lines = [ln.strip() for ln in cookie.split("\n")]
            body = clean("\n".join(lines))
            if not body or len(body) > 1200 or not usable(body):
                continue
            letters = sum(c.isalpha() for c in body)
            if letters < 0.6 * len(body.replace(" ", "").replace("\n", "")):
                continue  # drawings and tables
            records.append({"src": "fortune", "file": name, "text": body})
    return records


def main():
    parts = {"kjv": kjv(), "jargon": jargon(), "devil": devil(), "fortune": fortunes()}
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        for name, records in parts.items():
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
            chars = sum(len(r.get("text", "")) + sum(len(v[1]) for v in r.get("verses", [])) for r in records)
            print(f"{name}: {len(records)} records, {chars} characters", file=sys.stderr)


if __name__ == "__main__":
    main()
